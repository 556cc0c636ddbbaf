package edge

import (
	"context"
	"net/http"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	billingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/billing/v1"
	"google.golang.org/grpc"
)

// registerBilling wires hosted billing: the http.yaml routes (status, checkout), plus
// Stripe's billing webhook as a plain handler, because the signature covers the exact
// bytes of the body, which grpc-gateway's JSON decoding would not keep.
func registerBilling(ctx context.Context, mux *runtime.ServeMux, conn *grpc.ClientConn) error {
	client := billingv1.NewBillingServiceClient(conn)
	if err := billingv1.RegisterBillingServiceHandlerClient(ctx, mux, client); err != nil {
		return err
	}
	return mux.HandlePath(http.MethodPost, "/v1/webhooks/billing", billingWebhook(mux, client))
}

func billingWebhook(mux *runtime.ServeMux, client billingv1.BillingServiceClient) runtime.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request, _ map[string]string) {
		ctx, out, body, ok := readRawBody(mux, w, r, billingv1.BillingService_HandleStripeEvent_FullMethodName, "/v1/webhooks/billing")
		if !ok {
			return
		}
		resp, err := client.HandleStripeEvent(ctx, &billingv1.HandleStripeEventRequest{
			Payload:   body,
			Signature: r.Header.Get("Stripe-Signature"),
		})
		if err != nil {
			runtime.HTTPError(ctx, mux, out, w, r, err)
			return
		}
		runtime.ForwardResponseMessage(ctx, mux, out, w, r, resp)
	}
}
