package edge

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
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
		w.Header().Set("Content-Disposition", licenseFileDisposition(resp.GetKey()))
		w.Header().Set("Content-Length", strconv.Itoa(len(resp.GetContent())))
		_, _ = w.Write(resp.GetContent())
	}
}

// licenseFileDisposition is the .lic download's Content-Disposition: the file is
// license-<key>.lic. A Keyhouse key (Crockford base32 and dashes) is safe in the quoted
// filename as it is. An imported key may be any printable ASCII, and a quote, backslash
// or ";" would end or break the quoted name, a "/" or "\" make it a path: then filename
// is a fallback with each other character as "_", and filename* (RFC 6266, RFC 8187)
// carries the exact name, percent-encoded, which every current browser prefers.
func licenseFileDisposition(key string) string {
	name := "license-" + key + ".lic"
	fallback := []byte(name)
	for i, c := range fallback {
		if !fileNameSafe(c) {
			fallback[i] = '_'
		}
	}
	if string(fallback) == name {
		return `attachment; filename="` + name + `"`
	}
	var ext strings.Builder
	for i := 0; i < len(name); i++ {
		if c := name[i]; attrChar(c) {
			ext.WriteByte(c)
		} else {
			fmt.Fprintf(&ext, "%%%02X", c)
		}
	}
	return `attachment; filename="` + string(fallback) + `"; filename*=UTF-8''` + ext.String()
}

// fileNameSafe: c stands for itself in a quoted file name on every system.
func fileNameSafe(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~' || c == '+' || c == '='
}

// attrChar: c is an attr-char of RFC 8187, written as it is in an ext-value.
func attrChar(c byte) bool {
	if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' {
		return true
	}
	return strings.IndexByte("!#$&+-.^_`|~", c) >= 0
}
