package edge

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/keyhouse/keyhouse/pkg/license"
	"github.com/keyhouse/keyhouse/pkg/licensecache"
	"github.com/keyhouse/keyhouse/pkg/metrics"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	"google.golang.org/grpc"
)

// registerLicensing wires the licensing service: the http.yaml routes, plus the .lic
// download as a plain handler, because it answers raw bytes with a file name.
// verify-license's successful answers are served from verified (nil: no cache). The
// client it returns is the one hotRoutes answers verify-license with (one cache, one
// batcher).
func registerLicensing(ctx context.Context, mux *runtime.ServeMux, conn *grpc.ClientConn, verified *licensecache.Cache[*licensingv1.VerifyLicenseResponse]) (*cachedVerify, error) {
	client := licensingv1.NewLicensingServiceClient(conn)
	routes := &cachedVerify{LicensingServiceClient: mistypedImportsAnswered{client}, verified: verified, misses: newBatchedVerify(client)}
	if err := licensingv1.RegisterLicensingServiceHandlerClient(ctx, mux, routes); err != nil {
		return nil, err
	}
	return routes, mux.HandlePath(http.MethodGet, "/v1/export-license/{key}/file", exportLicenseFile(mux, client))
}

// cachedVerify answers verify-license from licensing's earlier answer for the same key
// while the license cache holds it: the same bytes, without the hop to licensing. Only
// valid answers are kept (an unknown, revoked or expired key always asks licensing), and
// none past its own expires_at: licensing decides again then. The cache follows
// licensing's change events (pkg/licensecache), and a write that passes through this
// gateway drops its key before its answer leaves (Caches.DropAnnounced). The misses go to
// licensing in batches (batchedVerify).
type cachedVerify struct {
	licensingv1.LicensingServiceClient
	verified *licensecache.Cache[*licensingv1.VerifyLicenseResponse]
	misses   *batchedVerify
}

func (c *cachedVerify) VerifyLicense(ctx context.Context, req *licensingv1.VerifyLicenseRequest, opts ...grpc.CallOption) (*licensingv1.VerifyLicenseResponse, error) {
	if req.Key == nil {
		ctx, err := annotated(ctx)
		if err != nil {
			return nil, err
		}
		return c.LicensingServiceClient.VerifyLicense(ctx, req, opts...)
	}
	asked := false
	resp, err := c.verified.GetUntil(license.CanonicalKey(req.GetKey()), "", func() (*licensingv1.VerifyLicenseResponse, time.Time, error) {
		asked = true
		resp, err := c.misses.VerifyLicense(ctx, req)
		if err != nil {
			return nil, time.Time{}, err
		}
		var until time.Time
		if exp := resp.GetExpiresAt(); exp != nil {
			until = exp.AsTime()
		}
		return resp, until, nil
	})
	metrics.RecordAnswer(VerifyLicensePath, !asked)
	return resp, err
}

func exportLicenseFile(mux *runtime.ServeMux, client licensingv1.LicensingServiceClient) runtime.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request, params map[string]string) {
		_, out := runtime.MarshalerForRequest(mux, r)
		ctx, err := runtime.AnnotateContext(r.Context(), mux, r,
			licensingv1.LicensingService_ExportLicenseFile_FullMethodName,
			runtime.WithHTTPPathPattern("/v1/export-license/{key}/file"))
		if err != nil {
			runtime.HTTPError(ctx, mux, out, w, r, err)
			return
		}
		resp, err := client.ExportLicenseFile(ctx, &licensingv1.ExportLicenseFileRequest{Key: params["key"]})
		if err != nil {
			runtime.HTTPError(ctx, mux, out, w, r, err)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		// The key is Crockford base32 and dashes, safe in a quoted file name.
		w.Header().Set("Content-Disposition", `attachment; filename="license-`+resp.GetKey()+`.lic"`)
		w.Header().Set("Content-Length", strconv.Itoa(len(resp.GetContent())))
		_, _ = w.Write(resp.GetContent())
	}
}
