package auth_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/auth"
	"github.com/keyhouse/keyhouse/pkg/grpcx/grpcxtest"
	_ "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/accounts/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

const (
	tenantMethod   = "/keyhouse.accounts.v1.AccountsService/RotateApiKey"
	adminMethod    = "/keyhouse.accounts.v1.AccountsService/GetBuildInfo"
	publicMethod   = "/keyhouse.accounts.v1.AccountsService/Authenticate"
	internalMethod = "/keyhouse.accounts.v1.AccountsService/GetEntitlements"
	unknownMethod  = "/keyhouse.accounts.v1.AccountsService/NoSuchMethod"
	healthMethod   = "/grpc.health.v1.Health/Check"
)

type tenants map[string]string

// ResolveAPIKey: a key whose tenant ends in ":read" is a read-scope key, "suspended" a
// suspended tenant's.
func (t tenants) ResolveAPIKey(_ context.Context, key string) (auth.Credential, error) {
	id, ok := t[key]
	switch {
	case !ok:
		return auth.Credential{}, apierr.Unauthorized
	case id == "suspended":
		return auth.Credential{}, auth.ErrTenantSuspended
	}
	tenant, read := strings.CutSuffix(id, ":read")
	return auth.Credential{TenantID: tenant, ReadOnly: read}, nil
}

func call(a *auth.Authenticator, method string, md ...string) (auth.Principal, error) {
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(md...))
	ctx, err := a.Authenticate(ctx, method)
	if err != nil {
		return auth.Principal{}, err
	}
	p, _ := auth.FromContext(ctx)
	return p, nil
}

func TestAccessLevels(t *testing.T) {
	self := auth.New(auth.Config{AdminKey: "admin-key"})
	hosted := auth.New(auth.Config{MultiTenant: true, AdminKey: "admin-key", Tenants: tenants{"tenant-key": "t_1"}})
	cases := []struct {
		name   string
		a      *auth.Authenticator
		method string
		md     []string
		tenant string // "" with ok: no principal needed
		ok     bool
	}{
		{"public needs nothing", hosted, publicMethod, nil, "", true},
		{"health is public", hosted, healthMethod, nil, "", true},
		{"a method without an access option is refused", self, unknownMethod, []string{"authorization", "Bearer admin-key"}, "", false},
		{"self-hosted tenant route takes the admin key", self, tenantMethod, []string{"authorization", "Bearer admin-key"}, auth.SelfHostedTenant, true},
		{"self-hosted tenant route refuses another key", self, tenantMethod, []string{"authorization", "Bearer tenant-key"}, "", false},
		{"hosted tenant route takes a tenant key", hosted, tenantMethod, []string{"authorization", "Bearer tenant-key"}, "t_1", true},
		{"hosted tenant route refuses the admin key", hosted, tenantMethod, []string{"authorization", "Bearer admin-key"}, "", false},
		{"hosted tenant route refuses an unknown key", hosted, tenantMethod, []string{"authorization", "Bearer nope"}, "", false},
		{"admin route takes the admin key hosted", hosted, adminMethod, []string{"authorization", "Bearer admin-key"}, "", true},
		{"admin route refuses a tenant key", hosted, adminMethod, []string{"authorization", "Bearer tenant-key"}, "", false},
		{"missing header", self, adminMethod, nil, "", false},
		{"wrong scheme", self, adminMethod, []string{"authorization", "Basic admin-key"}, "", false},
		{"scheme is case-insensitive", self, adminMethod, []string{"authorization", "bearer admin-key"}, "", true},
		{"internal takes the admin key and the tenant header", hosted, internalMethod, []string{"authorization", "Bearer admin-key", auth.TenantHeader, "t_9"}, "t_9", true},
		{"internal refuses a tenant key", hosted, internalMethod, []string{"authorization", "Bearer tenant-key", auth.TenantHeader, "t_9"}, "", false},
		{"internal self-hosted is the default tenant", self, internalMethod, []string{"authorization", "Bearer admin-key", auth.TenantHeader, "t_9"}, auth.SelfHostedTenant, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := call(tc.a, tc.method, tc.md...)
			if tc.ok != (err == nil) {
				t.Fatalf("err = %v, want ok=%v", err, tc.ok)
			}
			// An internal method's refusal says it refused the admin key (the caller is a
			// service, whose keys disagree); every other refusal is the clients' Unauthorized.
			if want := error(apierr.Unauthorized); err != nil && tc.method == internalMethod {
				if !auth.IsAdminKeyRefusal(err) {
					t.Fatalf("an internal refusal must be ErrAdminKeyRefused, got %v", err)
				}
			} else if err != nil && !errors.Is(err, want) {
				t.Fatalf("refusal must be Unauthorized, got %v", err)
			}
			if p.TenantID != tc.tenant {
				t.Fatalf("tenant %q, want %q", p.TenantID, tc.tenant)
			}
		})
	}
}

func TestTenantIDRefusesCallsWithoutATenant(t *testing.T) {
	if _, err := auth.TenantID(context.Background()); !errors.Is(err, apierr.Unauthorized) {
		t.Fatalf("got %v", err)
	}
	ctx := auth.WithPrincipal(context.Background(), auth.Principal{Admin: true})
	if _, err := auth.TenantID(ctx); err == nil {
		t.Fatal("an admin-only principal has no tenant")
	}
}

func TestConsoleSessionTokensAreTenantCredentialsInBothModes(t *testing.T) {
	sessions := tenants{"khs_live": "t_7", "kh_key": "t_1"}
	for _, multi := range []bool{false, true} {
		a := auth.New(auth.Config{MultiTenant: multi, AdminKey: "admin-key", Tenants: sessions})
		p, err := call(a, tenantMethod, "authorization", "Bearer khs_live")
		if err != nil || p.TenantID != "t_7" || !p.Session {
			t.Fatalf("multi=%v: a live session resolves to its tenant: %+v %v", multi, p, err)
		}
		if _, err := call(a, tenantMethod, "authorization", "Bearer khs_dead"); !errors.Is(err, apierr.Unauthorized) {
			t.Fatalf("multi=%v: an unknown session must be Unauthorized, got %v", multi, err)
		}
		for _, m := range []string{adminMethod, internalMethod} {
			if _, err := call(a, m, "authorization", "Bearer khs_live"); err == nil {
				t.Fatalf("multi=%v: a session must not open %s", multi, m)
			}
		}
	}
	// Without a resolver a session is refused, never mistaken for the admin key.
	if _, err := call(auth.New(auth.Config{AdminKey: "khs_admin"}), tenantMethod, "authorization", "Bearer khs_admin"); err == nil {
		t.Fatal("a session-shaped token without a resolver must be refused")
	}
}

func TestReadScopeKeysCallOnlyReadOnlyMethods(t *testing.T) {
	const (
		readMethod  = "/keyhouse.accounts.v1.ApiKeysService/ListApiKeys"
		writeMethod = "/keyhouse.accounts.v1.ApiKeysService/CreateApiKey"
	)
	keys := tenants{"kh_read": "t_1:read", "kh_full": "t_1"}
	for _, multi := range []bool{false, true} {
		a := auth.New(auth.Config{MultiTenant: multi, AdminKey: "admin-key", Tenants: keys})
		p, err := call(a, readMethod, "authorization", "Bearer kh_read")
		if err != nil || p.TenantID != "t_1" || !p.ReadOnly {
			t.Fatalf("multi=%v: a read key reads: %+v %v", multi, p, err)
		}
		for _, m := range []string{writeMethod, tenantMethod} {
			if _, err := call(a, m, "authorization", "Bearer kh_read"); !errors.Is(err, apierr.Unauthorized) {
				t.Fatalf("multi=%v: a read key must not call %s: %v", multi, m, err)
			}
		}
		if p, err := call(a, writeMethod, "authorization", "Bearer kh_full"); err != nil || p.ReadOnly || p.TenantID != "t_1" {
			t.Fatalf("multi=%v: a full key writes: %+v %v", multi, p, err)
		}
	}
}

func TestSelfHostedResolvesExtraKeysNextToTheAdminKey(t *testing.T) {
	a := auth.New(auth.Config{AdminKey: "admin-key", Tenants: tenants{"kh_extra": auth.SelfHostedTenant}})
	if p, err := call(a, tenantMethod, "authorization", "Bearer kh_extra"); err != nil || p.TenantID != auth.SelfHostedTenant || p.Admin {
		t.Fatalf("an extra key acts for the implicit tenant, not as the admin: %+v %v", p, err)
	}
	if p, err := call(a, tenantMethod, "authorization", "Bearer admin-key"); err != nil || !p.Admin {
		t.Fatalf("the admin key stays: %+v %v", p, err)
	}
}

func TestASuspendedTenantsCredentialsAreRefusedWithTheirOwnMessage(t *testing.T) {
	a := auth.New(auth.Config{MultiTenant: true, AdminKey: "admin-key", Tenants: tenants{"kh_s": "suspended"}})
	if _, err := call(a, tenantMethod, "authorization", "Bearer kh_s"); err != auth.ErrTenantSuspended {
		t.Fatalf("got %v", err)
	}
}

func TestAnAnswerNamesWhoTheCredentialProvedToBe(t *testing.T) {
	self := auth.New(auth.Config{AdminKey: "admin-key", Tenants: tenants{"extra-key": auth.SelfHostedTenant}})
	hosted := auth.New(auth.Config{MultiTenant: true, AdminKey: "admin-key", Tenants: tenants{"tenant-key": "t_1", "read-key": "t_2:read", "gone": "suspended"}})
	cases := []struct {
		name   string
		a      *auth.Authenticator
		method string
		md     []string
		caller string // "": the answer names nobody
	}{
		{"a hosted tenant key", hosted, tenantMethod, []string{"authorization", "Bearer tenant-key"}, "tenant t_1"},
		{"the admin key on an admin route", hosted, adminMethod, []string{"authorization", "Bearer admin-key"}, "admin"},
		{"the self-hosted admin key on a tenant route", self, tenantMethod, []string{"authorization", "Bearer admin-key"}, "admin"},
		{"a self-hosted extra key", self, tenantMethod, []string{"authorization", "Bearer extra-key"}, "tenant default"},
		{"a made-up key", hosted, tenantMethod, []string{"authorization", "Bearer made-up"}, ""},
		{"a suspended tenant's key", hosted, tenantMethod, []string{"authorization", "Bearer gone"}, ""},
		{"a read-scope key on a write route", hosted, tenantMethod, []string{"authorization", "Bearer read-key"}, ""},
		{"a public route, whatever it carries", hosted, publicMethod, []string{"authorization", "Bearer tenant-key"}, ""},
		{"an internal call", hosted, internalMethod, []string{"authorization", "Bearer admin-key", auth.TenantHeader, "t_9"}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, stream := grpcxtest.Call(metadata.NewIncomingContext(context.Background(), metadata.Pairs(tc.md...)), tenantMethod)
			_, _ = tc.a.Authenticate(ctx, tc.method)
			header, _ := stream.Header()
			got := header.Get(auth.CallerHeader)
			switch {
			case tc.caller == "" && len(got) > 0:
				t.Fatalf("the answer names %q; a credential not proven must name nobody", got)
			case tc.caller != "" && (len(got) != 1 || got[0] != tc.caller):
				t.Fatalf("the answer names %q, want %q", got, tc.caller)
			}
		})
	}
}

// During a rotation (ADMIN_API_KEY_PREVIOUS) both keys are the admin's on every route that
// takes the admin key; the previous one alone, or any other, is not. Unset, an empty
// previous key matches nothing.
func TestThePreviousAdminKeyIsAcceptedBesideTheCurrentOne(t *testing.T) {
	rotating := auth.New(auth.Config{AdminKey: "new-admin-key", PreviousAdminKey: "old-admin-key"})
	for _, key := range []string{"new-admin-key", "old-admin-key"} {
		for _, method := range []string{adminMethod, internalMethod, tenantMethod} {
			if p, err := call(rotating, method, "authorization", "Bearer "+key); err != nil || !p.Admin {
				t.Errorf("%s with %s: %+v %v", method, key, p, err)
			}
		}
		if !rotating.IsAdminKey(key) {
			t.Errorf("IsAdminKey(%s) = false", key)
		}
	}
	if _, err := call(rotating, internalMethod, "authorization", "Bearer other-key"); !auth.IsAdminKeyRefusal(err) {
		t.Errorf("another key on an internal method: %v", err)
	}
	after := auth.New(auth.Config{AdminKey: "new-admin-key"})
	if _, err := call(after, adminMethod, "authorization", "Bearer old-admin-key"); !errors.Is(err, apierr.Unauthorized) {
		t.Errorf("the old key after the rotation: %v", err)
	}
	if after.IsAdminKey("") || rotating.IsAdminKey("") {
		t.Error("an empty key is an admin key")
	}
	// A refusal of the admin key crosses the wire as itself, and nothing else is taken for it.
	if !auth.IsAdminKeyRefusal(auth.ErrAdminKeyRefused.GRPCStatus().Err()) || auth.IsAdminKeyRefusal(apierr.Unauthorized) || auth.IsAdminKeyRefusal(nil) {
		t.Error("IsAdminKeyRefusal")
	}
}

// unreachableBilling answers as billingclient does when a call cannot go out: a
// retryable 503. It counts the questions it was asked.
type unreachableBilling struct{ asked int }

func (b *unreachableBilling) ResolveAPIKey(context.Context, string) (auth.Credential, error) {
	b.asked++
	return auth.Credential{}, apierr.Unavailable("Authentication service unavailable, retry")
}

// A credential that is not UTF-8 is no key Keyhouse issued: it is refused as an unknown
// one (403 Unauthorized), never a 503 to retry, and billing is not asked (its request's
// string field could not carry it).
func TestACredentialThatIsNotUTF8IsUnauthorizedWithoutAskingBilling(t *testing.T) {
	for _, multi := range []bool{false, true} {
		billing := &unreachableBilling{}
		a := auth.New(auth.Config{MultiTenant: multi, AdminKey: "admin-key", Tenants: billing})
		for _, token := range []string{"\xff\xfe", "kh_\xc3", "admin-key\xff"} {
			if _, err := call(a, tenantMethod, "authorization", "Bearer "+token); !errors.Is(err, apierr.Unauthorized) {
				t.Fatalf("multi=%v token %q: got %v, want Unauthorized", multi, token, err)
			}
		}
		if billing.asked != 0 {
			t.Fatalf("multi=%v: billing was asked %d times", multi, billing.asked)
		}
		// A UTF-8 credential still goes to billing (which here cannot answer).
		if _, err := call(a, tenantMethod, "authorization", "Bearer café"); !apierr.Is(err, codes.Unavailable) || billing.asked != 1 {
			t.Fatalf("multi=%v: a UTF-8 credential: %v, asked %d", multi, err, billing.asked)
		}
	}
}

// Two different authorization values are refused as REST refuses two Authorization
// headers, whichever of them is valid and in either order, on every method that takes a
// credential. The same value twice (what gateways before this release sent) is one
// credential.
func TestTwoAuthorizationValuesAreRefusedInEitherOrder(t *testing.T) {
	a := auth.New(auth.Config{MultiTenant: true, AdminKey: "admin-key", Tenants: tenants{"tenant-key": "t_1"}})
	if p, err := call(a, tenantMethod, "authorization", "Bearer tenant-key", "authorization", "Bearer tenant-key"); err != nil || p.TenantID != "t_1" {
		t.Fatalf("the same credential twice: %+v %v", p, err)
	}
	for _, m := range []string{tenantMethod, adminMethod, internalMethod} {
		for _, pair := range [][2]string{{"Bearer wrong", "Bearer admin-key"}, {"Bearer admin-key", "Bearer wrong"}, {"Bearer tenant-key", "Bearer admin-key"}} {
			_, err := call(a, m, "authorization", pair[0], "authorization", pair[1], auth.TenantHeader, "t_1")
			st, _ := status.FromError(err)
			if st.Code() != codes.InvalidArgument || st.Message() != "Authorization must be sent once" {
				t.Fatalf("%s %q: got %v, want InvalidArgument \"Authorization must be sent once\"", m, pair, err)
			}
		}
	}
	// A public method judges no credential: what it carries is not looked at.
	if _, err := call(a, publicMethod, "authorization", "Bearer a", "authorization", "Bearer b"); err != nil {
		t.Fatalf("public method: %v", err)
	}
}

// A console session records the admin key's fingerprint, never the key: it is the same for
// the same key, another for another key, shows nothing of the key, and is none of the
// other values derived from it (the SHA-256 under which keys are stored).
func TestTheAdminKeyFingerprintNamesTheKeyWithoutShowingIt(t *testing.T) {
	key := "admin-key-0123456789abcdef0123456789"
	fp := auth.AdminKeyFingerprint(key)
	if fp != auth.AdminKeyFingerprint(key) || len(fp) != 64 {
		t.Fatalf("fingerprint %q", fp)
	}
	if fp == auth.AdminKeyFingerprint(key+"x") || fp == auth.HashAPIKey(key) || strings.Contains(fp, key[:8]) {
		t.Fatalf("fingerprint %q of %q", fp, key)
	}
}
