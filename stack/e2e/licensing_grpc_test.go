package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Internal callers (the storefront) issue over gRPC with the same credentials and the
// same Idempotency-Key semantics as the REST edge: a checkout session issues once.
func TestIssueLicenseOverGRPCIsIdempotent(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	conn, err := grpc.NewClient(s.Env("LICENSING_ADDR"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := licensingv1.NewLicensingServiceClient(conn)
	session := fmt.Sprintf("cs_test_%d", time.Now().UnixNano())
	call := func(token string) (*licensingv1.IssueLicenseResponse, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token, "idempotency-key", session)
		return client.IssueLicense(ctx, &licensingv1.IssueLicenseRequest{Tier: "pro", ProductId: "grpc", IssuedTo: "buyer"})
	}
	first, err := call(s.AdminKey)
	if err != nil {
		t.Fatal(err)
	}
	again, err := call(s.AdminKey)
	if err != nil || again.GetKey() != first.GetKey() || again.GetStatus() != "issued" {
		t.Fatalf("replay %v %v, first %v", again, err, first)
	}
	if _, err := call("wrong"); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("wrong key: %v", err)
	}
}
