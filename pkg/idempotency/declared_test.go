package idempotency

import (
	"context"
	"strings"
	"testing"

	"github.com/keyhouse/keyhouse/pkg/grpcx/grpcxtest"
	_ "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1" // registers the methods checked below
	"google.golang.org/grpc/metadata"
)

func TestKey_OnlyAMethodDeclaringTheOptionMayReadIt(t *testing.T) {
	t.Parallel()
	call := func(method string) context.Context {
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(Header, "k-1"))
		ctx, _ = grpcxtest.Call(ctx, method)
		return ctx
	}
	for _, m := range []string{"/keyhouse.licensing.v1.LicensingService/IssueLicense", "/keyhouse.licensing.v1.LicensingInternalService/IssueLicenseForTenant"} {
		if k, err := Key(call(m)); err != nil || k != "k-1" {
			t.Errorf("%s declares the option: key %q, error %v", m, k, err)
		}
	}
	_, err := Key(call("/keyhouse.licensing.v1.LicensingService/VerifyLicense"))
	if err == nil || !strings.Contains(err.Error(), "does not declare (keyhouse.api.v1.idempotency_key)") {
		t.Errorf("VerifyLicense does not declare the option, yet Key answered error %v", err)
	}
	if k, err := Key(metadata.NewIncomingContext(context.Background(), metadata.Pairs(Header, "k-2"))); err != nil || k != "k-2" {
		t.Errorf("outside gRPC: key %q, error %v", k, err)
	}
}
