package edge

import (
	"context"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	releasesv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/releases/v1"
	"google.golang.org/grpc"
)

// registerReleases wires the releases service: every route is an http.yaml rule.
func registerReleases(ctx context.Context, mux *runtime.ServeMux, conn *grpc.ClientConn) error {
	return releasesv1.RegisterReleasesServiceHandlerClient(ctx, mux, releasesv1.NewReleasesServiceClient(conn))
}
