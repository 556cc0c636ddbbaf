package edge

import (
	"context"
	"net/http"
	"strconv"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	"google.golang.org/grpc"
)

// registerLicensing wires the licensing service: the http.yaml routes, plus the .lic
// download as a plain handler, because it answers raw bytes with a file name.
func registerLicensing(ctx context.Context, mux *runtime.ServeMux, conn *grpc.ClientConn) error {
	client := licensingv1.NewLicensingServiceClient(conn)
	if err := licensingv1.RegisterLicensingServiceHandlerClient(ctx, mux, client); err != nil {
		return err
	}
	return mux.HandlePath(http.MethodGet, "/v1/export-license/{key}/file", exportLicenseFile(mux, client))
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
