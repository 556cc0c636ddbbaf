package edge

import (
	"context"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	accountsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/accounts/v1"
	"google.golang.org/grpc"
)

// registerKeysAndOperator wires the billing service's extra API keys (/v1/api-keys) and
// the hosted operator's tenant routes (/v1/operator/tenants/…): every route is an
// http.yaml rule.
func registerKeysAndOperator(ctx context.Context, mux *runtime.ServeMux, conn *grpc.ClientConn) error {
	if err := accountsv1.RegisterApiKeysServiceHandlerClient(ctx, mux, accountsv1.NewApiKeysServiceClient(conn)); err != nil {
		return err
	}
	return accountsv1.RegisterOperatorServiceHandlerClient(ctx, mux, accountsv1.NewOperatorServiceClient(conn))
}
