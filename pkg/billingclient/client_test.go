package billingclient_test

import (
	"context"
	"errors"
	"net"
	"testing"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/auth"
	"github.com/keyhouse/keyhouse/pkg/billingclient"
	"github.com/keyhouse/keyhouse/pkg/grpcx"
	accountsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/accounts/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

type fakeBilling struct {
	accountsv1.UnimplementedAccountsServiceServer
	err          error
	entitlements *accountsv1.GetEntitlementsResponse
}

func (f *fakeBilling) GetEntitlements(context.Context, *accountsv1.GetEntitlementsRequest) (*accountsv1.GetEntitlementsResponse, error) {
	return f.entitlements, f.err
}

func (f *fakeBilling) Authenticate(context.Context, *accountsv1.AuthenticateRequest) (*accountsv1.AuthenticateResponse, error) {
	if f.err != nil {
		return nil, f.err
	}
	return &accountsv1.AuthenticateResponse{TenantId: "t1"}, nil
}

func (f *fakeBilling) GetTenantContact(context.Context, *accountsv1.GetTenantContactRequest) (*accountsv1.GetTenantContactResponse, error) {
	if f.err != nil {
		return nil, f.err
	}
	return &accountsv1.GetTenantContactResponse{Email: "t1@example.com"}, nil
}

func start(t *testing.T, f *fakeBilling) *billingclient.Client {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	accountsv1.RegisterAccountsServiceServer(g, f)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	conn, err := grpcx.Dial("billing", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return billingclient.New(conn, "admin-key")
}

func wantStatus(t *testing.T, err error, code codes.Code, msg string) {
	t.Helper()
	var ae *apierr.Error
	if !errors.As(err, &ae) || ae.Code != code || ae.Message != msg {
		t.Fatalf("got %v, want %v %q", err, code, msg)
	}
}

func TestActivePlanIsTheOneSubscriptionCheck(t *testing.T) {
	t.Parallel()
	c := start(t, &fakeBilling{entitlements: &accountsv1.GetEntitlementsResponse{SubscriptionActive: true, LicenseLimit: 5}})
	if quota, err := c.ActivePlan(context.Background(), "t1"); err != nil || quota != 5 {
		t.Fatalf("quota %d, %v", quota, err)
	}
	c = start(t, &fakeBilling{entitlements: &accountsv1.GetEntitlementsResponse{SubscriptionActive: false, LicenseLimit: 5}})
	_, err := c.ActivePlan(context.Background(), "t1")
	wantStatus(t, err, codes.PermissionDenied, "Subscription is not active")
}

func TestBillingOutagesAre503sNamingTheStep(t *testing.T) {
	t.Parallel()
	c := start(t, &fakeBilling{err: status.Error(codes.Internal, "pq: 10.0.0.5 refused")})
	_, err := c.ActivePlan(context.Background(), "t1")
	wantStatus(t, err, codes.Unavailable, "Billing service unavailable, retry")
	_, err = c.ResolveAPIKey(context.Background(), "kh_x")
	wantStatus(t, err, codes.Unavailable, "Authentication service unavailable, retry")
}

func TestResolveAPIKey(t *testing.T) {
	t.Parallel()
	cred, err := start(t, &fakeBilling{}).ResolveAPIKey(context.Background(), "kh_x")
	if err != nil || cred.TenantID != "t1" || cred.ReadOnly {
		t.Fatalf("credential %+v, %v", cred, err)
	}
	_, err = start(t, &fakeBilling{err: apierr.Unauthorized}).ResolveAPIKey(context.Background(), "kh_x")
	if err != apierr.Unauthorized {
		t.Fatalf("unknown key: %v", err)
	}
	_, err = start(t, &fakeBilling{err: auth.ErrTenantSuspended}).ResolveAPIKey(context.Background(), "kh_x")
	if err != auth.ErrTenantSuspended {
		t.Fatalf("suspended tenant: %v", err)
	}
}

// A tenant billing does not have is "no", not an error; an outage is the 503.
func TestTenantExists(t *testing.T) {
	t.Parallel()
	if ok, err := start(t, &fakeBilling{}).TenantExists(context.Background(), "t1"); !ok || err != nil {
		t.Fatalf("known tenant: %v, %v", ok, err)
	}
	if ok, err := start(t, &fakeBilling{err: apierr.NotFound("Tenant not found")}).TenantExists(context.Background(), "t2"); ok || err != nil {
		t.Fatalf("unknown tenant: %v, %v", ok, err)
	}
	_, err := start(t, &fakeBilling{err: status.Error(codes.Internal, "pq: 10.0.0.5 refused")}).TenantExists(context.Background(), "t1")
	wantStatus(t, err, codes.Unavailable, "Billing service unavailable, retry")
}
