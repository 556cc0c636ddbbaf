package idempotency

import (
	"context"
	"strings"
	"testing"

	_ "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1" // registers the methods checked below
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// methodStream is the server transport stream grpc.Method reads the called method from.
type methodStream struct{ method string }

func (s methodStream) Method() string               { return s.method }
func (s methodStream) SetHeader(metadata.MD) error  { return nil }
func (s methodStream) SendHeader(metadata.MD) error { return nil }
func (s methodStream) SetTrailer(metadata.MD) error { return nil }

func TestKey_OnlyAMethodDeclaringTheOptionMayReadIt(t *testing.T) {
	t.Parallel()
	call := func(method string) context.Context {
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(Header, "k-1"))
		return grpc.NewContextWithServerTransportStream(ctx, methodStream{method})
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
