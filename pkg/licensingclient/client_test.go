package licensingclient_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/grpcx"
	"github.com/keyhouse/keyhouse/pkg/license"
	"github.com/keyhouse/keyhouse/pkg/licensingclient"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// fakeLicensing answers GetLicense and ClaimProduct with whatever the test sets.
type fakeLicensing struct {
	licensingv1.UnimplementedLicensingInternalServiceServer
	err  error
	md   chan metadata.MD
	resp *licensingv1.License
}

func (f *fakeLicensing) GetLicense(ctx context.Context, _ *licensingv1.GetLicenseRequest) (*licensingv1.GetLicenseResponse, error) {
	if md, ok := metadata.FromIncomingContext(ctx); ok && f.md != nil {
		f.md <- md
	}
	if f.err != nil {
		return nil, f.err
	}
	return &licensingv1.GetLicenseResponse{License: f.resp}, nil
}

func (f *fakeLicensing) ClaimProduct(context.Context, *licensingv1.ClaimProductRequest) (*licensingv1.ClaimProductResponse, error) {
	if f.err != nil {
		return nil, f.err
	}
	return &licensingv1.ClaimProductResponse{}, nil
}

func (f *fakeLicensing) CheckProductOwner(context.Context, *licensingv1.CheckProductOwnerRequest) (*licensingv1.CheckProductOwnerResponse, error) {
	if f.err != nil {
		return nil, f.err
	}
	return &licensingv1.CheckProductOwnerResponse{Owned: true}, nil
}

func (f *fakeLicensing) IssueLicenseForTenant(ctx context.Context, req *licensingv1.IssueLicenseForTenantRequest) (*licensingv1.IssueLicenseForTenantResponse, error) {
	if md, ok := metadata.FromIncomingContext(ctx); ok && f.md != nil {
		f.md <- md
	}
	if f.err != nil {
		return nil, f.err
	}
	return &licensingv1.IssueLicenseForTenantResponse{Key: "KEY-" + req.GetLicense().GetProductId()}, nil
}

// serve starts f on lis and stops it with the test.
func serve(t *testing.T, lis net.Listener, f *fakeLicensing) {
	t.Helper()
	g := grpc.NewServer()
	licensingv1.RegisterLicensingInternalServiceServer(g, f)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
}

func client(t *testing.T, addr string) *licensingclient.Client {
	t.Helper()
	conn, err := grpcx.Dial("licensing", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return licensingclient.New(conn, "admin-key")
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return lis
}

// wantStatus checks err as the gateway would see it once it crossed the wire.
func wantStatus(t *testing.T, err error, code codes.Code, msg string, retryable bool) {
	t.Helper()
	st := status.Convert(err)
	var ae *apierr.Error
	if errors.As(err, &ae) {
		st = ae.GRPCStatus()
	}
	if st.Code() != code || st.Message() != msg || apierr.Retryable(st) != retryable {
		t.Fatalf("got %v %q retryable=%v, want %v %q retryable=%v", st.Code(), st.Message(), apierr.Retryable(st), code, msg, retryable)
	}
}

func TestLicenseAnswersAndFailuresMapOnce(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		err       error
		code      codes.Code
		msg       string
		retryable bool
	}{
		{"unknown key", license.ErrNotFound, codes.NotFound, "License key not found", false},
		{"licensing's own 503", apierr.Unavailable("Billing service unavailable, retry"), codes.Unavailable, "Licensing service unavailable, retry", true},
		{"an unexpected code is an outage, its text hidden", status.Error(codes.Internal, "pq: connection refused 10.0.0.5"), codes.Unavailable, "Licensing service unavailable, retry", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			lis := listen(t)
			serve(t, lis, &fakeLicensing{err: tc.err})
			_, err := client(t, lis.Addr().String()).License(context.Background(), "", "K")
			wantStatus(t, err, tc.code, tc.msg, tc.retryable)
		})
	}
}

func TestLicenseCarriesTheAdminKeyAndTenant(t *testing.T) {
	t.Parallel()
	lis := listen(t)
	f := &fakeLicensing{md: make(chan metadata.MD, 1), resp: &licensingv1.License{Key: "K", TenantId: "t1", Status: license.StatusActive}}
	serve(t, lis, f)
	l, err := client(t, lis.Addr().String()).License(context.Background(), "t1", "K")
	if err != nil || l.GetKey() != "K" {
		t.Fatalf("license %v, %v", l, err)
	}
	md := <-f.md
	if got := md.Get("authorization"); len(got) != 1 || got[0] != "Bearer admin-key" {
		t.Fatalf("authorization %q", got)
	}
	if got := md.Get("x-keyhouse-tenant"); len(got) != 1 || got[0] != "t1" {
		t.Fatalf("tenant %q", got)
	}
}

func TestClaimProductPassesTheOwnershipRefusal(t *testing.T) {
	t.Parallel()
	lis := listen(t)
	serve(t, lis, &fakeLicensing{err: license.ErrProductOwned})
	err := client(t, lis.Addr().String()).ClaimProduct(context.Background(), "t1", "App")
	wantStatus(t, err, codes.PermissionDenied, "product_id is owned by a different tenant", false)
}

// Licensing's refusal of a blank product_id is its 400, not the outage's 503, from the
// claim and from the check that claims nothing alike; a failure is still the 503.
func TestProductCallsPassTheRefusalsAndNotFailures(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		code codes.Code
		msg  string
	}{
		{license.ErrProductOwned, codes.PermissionDenied, "product_id is owned by a different tenant"},
		{apierr.Invalid("product_id is required"), codes.InvalidArgument, "product_id is required"},
		{status.Error(codes.Internal, "db on 10.0.0.5 down"), codes.Unavailable, "Licensing service unavailable, retry"},
	} {
		lis := listen(t)
		serve(t, lis, &fakeLicensing{err: tc.err})
		c := client(t, lis.Addr().String())
		err := c.ClaimProduct(context.Background(), "t1", " ")
		wantStatus(t, err, tc.code, tc.msg, tc.code == codes.Unavailable)
		owned, err := c.ProductOwned(context.Background(), "t1", " ")
		if owned {
			t.Errorf("%s: owned", tc.msg)
		}
		wantStatus(t, err, tc.code, tc.msg, tc.code == codes.Unavailable)
	}
	lis := listen(t)
	serve(t, lis, &fakeLicensing{})
	if owned, err := client(t, lis.Addr().String()).ProductOwned(context.Background(), "t1", "App"); !owned || err != nil {
		t.Fatalf("owned %v err %v", owned, err)
	}
}

// Storefront issues for a tenant with an Idempotency-Key; licensing's refusals keep their
// message (the quota refusal is how fulfillment tells over_quota apart), an internal
// failure is the 503.
func TestIssueLicenseSendsTheKeyAndPassesRefusals(t *testing.T) {
	t.Parallel()
	lis := listen(t)
	f := &fakeLicensing{md: make(chan metadata.MD, 1)}
	serve(t, lis, f)
	c := client(t, lis.Addr().String())
	key, err := c.IssueLicense(context.Background(), "t1", "storefront:cs_1", &licensingv1.IssueLicenseRequest{ProductId: "App"})
	if err != nil || key != "KEY-App" {
		t.Fatalf("key %q err %v", key, err)
	}
	md := <-f.md
	if got := md.Get("idempotency-key"); len(got) != 1 || got[0] != "storefront:cs_1" {
		t.Fatalf("idempotency-key %v", got)
	}
	if got := md.Get("x-keyhouse-tenant"); len(got) != 1 || got[0] != "t1" {
		t.Fatalf("tenant %v", got)
	}
	for _, tc := range []struct {
		err  error
		code codes.Code
		msg  string
	}{
		{apierr.Forbidden("License issuance quota exceeded"), codes.PermissionDenied, "License issuance quota exceeded"},
		{apierr.Invalid("Unknown limit key: storage"), codes.InvalidArgument, "Unknown limit key: storage"},
		{apierr.Conflict("Idempotency-Key reused with a different request"), codes.AlreadyExists, "Idempotency-Key reused with a different request"},
		{status.Error(codes.Internal, "pq: connection refused 10.0.0.5"), codes.Unavailable, "Licensing service unavailable, retry"},
	} {
		lis := listen(t)
		serve(t, lis, &fakeLicensing{err: tc.err})
		_, err := client(t, lis.Addr().String()).IssueLicense(context.Background(), "t1", "k", &licensingv1.IssueLicenseRequest{})
		wantStatus(t, err, tc.code, tc.msg, tc.code == codes.Unavailable)
	}
}

// A call made while licensing is not up yet waits for it within the call budget
// (WaitForReady) instead of failing at once.
func TestACallRidesOutAPeerThatComesUpWithinTheBudget(t *testing.T) {
	t.Parallel()
	lis := listen(t)
	addr := lis.Addr().String()
	_ = lis.Close()
	c := client(t, addr)
	go func() {
		time.Sleep(300 * time.Millisecond)
		lis, err := net.Listen("tcp", addr)
		if err != nil {
			t.Error(err)
			return
		}
		serve(t, lis, &fakeLicensing{resp: &licensingv1.License{Key: "K", Status: license.StatusActive}})
	}()
	if _, err := c.License(context.Background(), "", "K"); err != nil {
		t.Fatalf("call during the peer's start: %v", err)
	}
}

// A peer that never comes up is a 503 within the caller's own deadline.
func TestAnAbsentPeerIsA503WithinTheCallersDeadline(t *testing.T) {
	t.Parallel()
	lis := listen(t)
	addr := lis.Addr().String()
	_ = lis.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := client(t, addr).License(ctx, "", "K")
	wantStatus(t, err, codes.Unavailable, "Licensing service unavailable, retry", true)
}

func TestUsableIsTheOneLicenseRule(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		name string
		l    *licensingv1.License
		want error
	}{
		{"active perpetual", &licensingv1.License{Status: license.StatusActive}, nil},
		{"active until later", &licensingv1.License{Status: license.StatusActive, ExpiresAt: timestamppb.New(now.Add(time.Second))}, nil},
		{"expiry instant counts as expired", &licensingv1.License{Status: license.StatusActive, ExpiresAt: timestamppb.New(now)}, license.ErrExpired},
		{"revoked", &licensingv1.License{Status: license.StatusRevoked}, license.ErrNotActive},
		{"revoked and expired reads not active", &licensingv1.License{Status: license.StatusRevoked, ExpiresAt: timestamppb.New(now.Add(-time.Hour))}, license.ErrNotActive},
		{"unknown status is not active", &licensingv1.License{Status: ""}, license.ErrNotActive},
	}
	for _, tc := range cases {
		if got := licensingclient.Usable(tc.l, now); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}
