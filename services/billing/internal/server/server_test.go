package server

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/keyhouse/keyhouse/devinfra/testkit"
	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/auth"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
	accountsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/accounts/v1"
	"github.com/keyhouse/keyhouse/services/billing/internal/plan"
	"github.com/keyhouse/keyhouse/services/billing/internal/store"
	"github.com/keyhouse/keyhouse/services/billing/migrations"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
)

// The handlers run on the real store (a Postgres database of each test's own, migrated by
// the production migrations): billing's rules are mostly its SQL's.

func TestMain(m *testing.M) { testkit.Main(m) }

var schema = testkit.Template{Name: "billing", Migrate: pgxx.Migrations{Schema: "billing", FS: migrations.FS}.Apply}

func newServer(t *testing.T, hosted bool) *Server {
	t.Helper()
	pool, err := pgxx.Open(context.Background(), testkit.DatabaseURL(t, schema), "billing")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return New(store.New(pool, nil), nil, hosted, slog.New(slog.DiscardHandler))
}

// tenantCall is a call by tenant presenting apiKey, as the auth interceptor leaves it.
func tenantCall(tenant, apiKey string) context.Context {
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+apiKey))
	return auth.WithPrincipal(ctx, auth.Principal{TenantID: tenant})
}

func wantErr(t *testing.T, err error, code codes.Code, msg string) {
	t.Helper()
	if !apierr.Is(err, code) || err.Error() != msg {
		t.Fatalf("got %v, want %v %q", err, code, msg)
	}
}

func createTenant(t *testing.T, s *Server) *accountsv1.CreateTenantResponse {
	t.Helper()
	resp, err := s.CreateTenant(context.Background(), &accountsv1.CreateTenantRequest{Name: " Acme ", Email: "ops@acme.example"})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestCreateTenantValidatesAndReturnsTheKeyOnce(t *testing.T) {
	t.Parallel()
	s := newServer(t, true)
	for _, tc := range []struct{ name, email, want string }{
		{"", "a@b.example", "name is required"},
		{"   ", "a@b.example", "name is required"},
		{strings.Repeat("é", 201), "a@b.example", "name must be at most 200 characters"},
		{"Acme", "", "email is required"},
		{"Acme", "not-an-address", "email must be a valid email address"},
		{"Acme", "Acme <ops@acme.example>", "email must be a valid email address"},
		{"Acme", strings.Repeat("a", 310) + "@acme.example", "email must be a valid email address"},
	} {
		_, err := s.CreateTenant(context.Background(), &accountsv1.CreateTenantRequest{Name: tc.name, Email: tc.email})
		wantErr(t, err, codes.InvalidArgument, tc.want)
	}
	resp := createTenant(t, s)
	if resp.GetName() != "Acme" || resp.GetEmail() != "ops@acme.example" || !strings.HasPrefix(resp.GetTenantId(), "t_") || !strings.HasPrefix(resp.GetApiKey(), "kh_") {
		t.Fatalf("created %+v", resp)
	}
	tenant, err := s.Authenticate(context.Background(), &accountsv1.AuthenticateRequest{ApiKey: resp.GetApiKey()})
	if err != nil || tenant.GetTenantId() != resp.GetTenantId() {
		t.Fatalf("the new key resolves to %v, %v", tenant, err)
	}
	other, err := s.CreateTenant(context.Background(), &accountsv1.CreateTenantRequest{Name: "Acme", Email: "other@acme.example"})
	if err != nil || other.GetTenantId() == resp.GetTenantId() || other.GetApiKey() == resp.GetApiKey() {
		t.Fatalf("two tenants share an id or a key: %v", err)
	}
	// An email is one tenant's, in any case.
	_, err = s.CreateTenant(context.Background(), &accountsv1.CreateTenantRequest{Name: "Acme 2", Email: "OPS@acme.example"})
	wantErr(t, err, codes.AlreadyExists, "A tenant with this email already exists")
}

func TestSelfHostedHasNoTenantsNorKeys(t *testing.T) {
	t.Parallel()
	s := newServer(t, false)
	_, err := s.CreateTenant(context.Background(), &accountsv1.CreateTenantRequest{Name: "Acme", Email: "ops@acme.example"})
	wantErr(t, err, codes.InvalidArgument, "Tenant management is only available for hosted deployments")
	_, err = s.RotateApiKey(tenantCall(auth.SelfHostedTenant, "admin"), &accountsv1.RotateApiKeyRequest{})
	wantErr(t, err, codes.InvalidArgument, "API key rotation is only available for hosted accounts")
	_, err = s.Authenticate(context.Background(), &accountsv1.AuthenticateRequest{ApiKey: "kh_anything"})
	wantErr(t, err, codes.Unauthenticated, "Unauthorized")
	e, err := s.GetEntitlements(tenantCall(auth.SelfHostedTenant, "admin"), &accountsv1.GetEntitlementsRequest{})
	if err != nil || !e.GetSubscriptionActive() || e.GetLicenseLimit() != 0 {
		t.Fatalf("self-hosted entitlements %+v, %v", e, err)
	}
}

func TestAuthenticateRefusesUnknownAndEmptyKeys(t *testing.T) {
	t.Parallel()
	s := newServer(t, true)
	createTenant(t, s)
	for _, key := range []string{"", "kh_unknown", "Bearer kh_unknown"} {
		_, err := s.Authenticate(context.Background(), &accountsv1.AuthenticateRequest{ApiKey: key})
		wantErr(t, err, codes.Unauthenticated, "Unauthorized")
	}
}

// A rotated key dies at once; of two rotations presenting the same key, one wins and the
// other is refused, so no caller is left holding a key that no longer works.
func TestRotateApiKeyRetiresTheOldKeyAndHasOneWinner(t *testing.T) {
	t.Parallel()
	s := newServer(t, true)
	acct := createTenant(t, s)
	ctx := tenantCall(acct.GetTenantId(), acct.GetApiKey())
	var wg sync.WaitGroup
	keys := make([]string, 4)
	errs := make([]error, 4)
	for i := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := s.RotateApiKey(ctx, &accountsv1.RotateApiKeyRequest{})
			keys[i], errs[i] = resp.GetApiKey(), err
		}()
	}
	wg.Wait()
	var winner string
	for i, err := range errs {
		switch {
		case err == nil && winner == "":
			winner = keys[i]
		case err == nil:
			t.Fatal("two rotations of one key both succeeded")
		default:
			wantErr(t, err, codes.Unauthenticated, "Unauthorized")
		}
	}
	if winner == "" || winner == acct.GetApiKey() {
		t.Fatalf("winner %q", winner)
	}
	_, err := s.Authenticate(context.Background(), &accountsv1.AuthenticateRequest{ApiKey: acct.GetApiKey()})
	wantErr(t, err, codes.Unauthenticated, "Unauthorized")
	if got, err := s.Authenticate(context.Background(), &accountsv1.AuthenticateRequest{ApiKey: winner}); err != nil || got.GetTenantId() != acct.GetTenantId() {
		t.Fatalf("new key resolves to %v, %v", got, err)
	}
}

// A new hosted tenant has no billing history: Free, active, 5 licenses (addendum §2).
func TestNewHostedTenantIsOnFree(t *testing.T) {
	t.Parallel()
	s := newServer(t, true)
	acct := createTenant(t, s)
	e, err := s.GetEntitlements(tenantCall(acct.GetTenantId(), acct.GetApiKey()), &accountsv1.GetEntitlementsRequest{})
	if err != nil || !e.GetSubscriptionActive() || e.GetLicenseLimit() != plan.FreeLicenseLimit || e.GetPlan() != plan.Free {
		t.Fatalf("entitlements %+v, %v", e, err)
	}
	_, err = s.GetEntitlements(context.Background(), &accountsv1.GetEntitlementsRequest{})
	wantErr(t, err, codes.Unauthenticated, "Unauthorized")
}

// The tenant's contact is the email it was created with, hosted (an unknown tenant is not
// found); nothing self-hosted.
func TestTenantContact(t *testing.T) {
	t.Parallel()
	s := newServer(t, true)
	acct := createTenant(t, s)
	c, err := s.GetTenantContact(tenantCall(acct.GetTenantId(), acct.GetApiKey()), &accountsv1.GetTenantContactRequest{})
	if err != nil || c.GetEmail() != acct.GetEmail() || c.GetEmail() == "" {
		t.Fatalf("contact %+v, %v (tenant %s)", c, err, acct.GetEmail())
	}
	_, err = s.GetTenantContact(tenantCall("no-such-tenant", "admin"), &accountsv1.GetTenantContactRequest{})
	wantErr(t, err, codes.NotFound, "Tenant not found")
	self := newServer(t, false)
	c, err = self.GetTenantContact(tenantCall(auth.SelfHostedTenant, "admin"), &accountsv1.GetTenantContactRequest{})
	if err != nil || c.GetEmail() != "" {
		t.Fatalf("self-hosted contact %+v, %v", c, err)
	}
}

// The watermark identifies the installation: the same on every call (that it differs
// between installations is e2e's TestBuildInfoWatermarkDiffersBetweenInstallations).
func TestBuildInfoWatermarkIsStable(t *testing.T) {
	t.Parallel()
	s := newServer(t, false)
	a, err := s.GetBuildInfo(context.Background(), &accountsv1.GetBuildInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.GetBuildInfo(context.Background(), &accountsv1.GetBuildInfoRequest{})
	if err != nil || a.GetWatermarkId() == "" || a.GetWatermarkId() != b.GetWatermarkId() {
		t.Fatalf("watermarks %q %q, %v", a.GetWatermarkId(), b.GetWatermarkId(), err)
	}
}
