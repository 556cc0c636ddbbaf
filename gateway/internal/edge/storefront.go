package edge

import (
	"context"
	"net/http"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	storefrontv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/storefront/v1"
	"google.golang.org/grpc"
)

// callbackPattern is the payment provider's callback (addendum §4).
const callbackPattern = "/v1/webhooks/storefront/{webhook_id}"

// registerStorefront wires the storefront service: the http.yaml routes, plus the
// provider callback as a plain handler, because the signature covers the exact bytes of
// the body (grpc-gateway would decode them).
func registerStorefront(ctx context.Context, mux *runtime.ServeMux, conn *grpc.ClientConn) error {
	client := storefrontv1.NewStorefrontServiceClient(conn)
	if err := storefrontv1.RegisterStorefrontServiceHandlerClient(ctx, mux, client); err != nil {
		return err
	}
	return mux.HandlePath(http.MethodPost, callbackPattern, storefrontCallback(mux, client))
}

// storefrontCallback passes the raw body and the Stripe-Signature header to the service,
// which verifies, records the event durably and only then answers {"received": true}.
func storefrontCallback(mux *runtime.ServeMux, client storefrontv1.StorefrontServiceClient) runtime.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request, params map[string]string) {
		ctx, out, payload, ok := readRawBody(mux, w, r, storefrontv1.StorefrontService_ReceiveEvent_FullMethodName, callbackPattern)
		if !ok {
			return
		}
		resp, err := client.ReceiveEvent(ctx, &storefrontv1.ReceiveEventRequest{
			WebhookId: params["webhook_id"],
			Payload:   payload,
			Signature: r.Header.Get("Stripe-Signature"),
		})
		if err != nil {
			runtime.HTTPError(ctx, mux, out, w, r, err)
			return
		}
		runtime.ForwardResponseMessage(ctx, mux, out, w, r, resp)
	}
}
