package edge

import (
	"context"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	eventsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/events/v1"
	"google.golang.org/grpc"
)

// registerEvents wires the events service (the event log and the webhook endpoints of
// addendum §11): every route is an http.yaml rule.
func registerEvents(ctx context.Context, mux *runtime.ServeMux, conn *grpc.ClientConn) error {
	if err := eventsv1.RegisterEventsServiceHandlerClient(ctx, mux, eventsv1.NewEventsServiceClient(conn)); err != nil {
		return err
	}
	return eventsv1.RegisterWebhookEndpointsServiceHandlerClient(ctx, mux, eventsv1.NewWebhookEndpointsServiceClient(conn))
}
