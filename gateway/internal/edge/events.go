package edge

import (
	"context"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	eventsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/events/v1"
	"google.golang.org/grpc"
)

// registerEvents wires the events service (the event log of addendum §11): every route
// is an http.yaml rule.
func registerEvents(ctx context.Context, mux *runtime.ServeMux, conn *grpc.ClientConn) error {
	return eventsv1.RegisterEventsServiceHandlerClient(ctx, mux, eventsv1.NewEventsServiceClient(conn))
}
