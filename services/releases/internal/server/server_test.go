package server

import (
	"context"
	"testing"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/auth"
	"github.com/keyhouse/keyhouse/pkg/signing"
	releasesv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/releases/v1"
	"github.com/keyhouse/keyhouse/services/releases/internal/store"
)

// The subscription check and the product claim of a hosted registration have no
// end-to-end test while billing reports every subscription active; these pin them.

type fakeStore struct {
	Store
	registered []*store.NewRelease
}

func (f *fakeStore) Register(_ context.Context, _, _ string, _ []byte, r *store.NewRelease, _ int) (int32, error) {
	f.registered = append(f.registered, r)
	return int32(len(f.registered)), nil
}

type fakeLicensing struct {
	Licensing
	keyring *signing.Keyring
	claims  []string
	owned   bool
}

func (f *fakeLicensing) ClaimProduct(_ context.Context, tenant, productID string) error {
	f.claims = append(f.claims, tenant+"/"+productID)
	if f.owned {
		return errProductOwned
	}
	return nil
}

func (f *fakeLicensing) Keyring(context.Context) (*signing.Keyring, error) { return f.keyring, nil }

type fakeEntitlements struct {
	active bool
	calls  int
}

func (f *fakeEntitlements) SubscriptionActive(context.Context, string) (bool, error) {
	f.calls++
	return f.active, nil
}

var testKeyring = func() *signing.Keyring {
	k, err := signing.NewKeyring()
	if err != nil {
		panic(err)
	}
	return k
}()

func register(t *testing.T, multiTenant, active, owned bool) (*fakeStore, *fakeLicensing, *fakeEntitlements, error) {
	t.Helper()
	st, lic, ent := &fakeStore{}, &fakeLicensing{keyring: testKeyring, owned: owned}, &fakeEntitlements{active: active}
	s := New(Config{MultiTenant: multiTenant}, st, lic, ent)
	ctx := auth.WithPrincipal(context.Background(), auth.Principal{TenantID: "t1"})
	_, err := s.RegisterRelease(ctx, &releasesv1.RegisterReleaseRequest{
		ProductId: "App", Version: "1.0.0", ArtifactUrl: "https://example.com/app.zip",
	})
	return st, lic, ent, err
}

func TestHostedRegistrationNeedsAnActiveSubscription(t *testing.T) {
	st, lic, _, err := register(t, true, false, false)
	if err != errSubscription || err.(*apierr.Error).Message != "Subscription is not active" {
		t.Fatalf("inactive subscription: %v", err)
	}
	if len(lic.claims) != 0 || len(st.registered) != 0 {
		t.Fatalf("an inactive tenant claimed %v or registered %d", lic.claims, len(st.registered))
	}
}

func TestHostedRegistrationClaimsTheProduct(t *testing.T) {
	st, lic, _, err := register(t, true, true, false)
	if err != nil || len(lic.claims) != 1 || lic.claims[0] != "t1/App" || len(st.registered) != 1 {
		t.Fatalf("err %v claims %v registered %d", err, lic.claims, len(st.registered))
	}
	st, _, _, err = register(t, true, true, true)
	if err != errProductOwned || len(st.registered) != 0 {
		t.Fatalf("owned product: %v, registered %d", err, len(st.registered))
	}
}

func TestSelfHostedRegistrationChecksNoSubscription(t *testing.T) {
	st, lic, ent, err := register(t, false, false, false)
	if err != nil || ent.calls != 0 || len(lic.claims) != 0 || len(st.registered) != 1 {
		t.Fatalf("err %v, entitlement calls %d, claims %v", err, ent.calls, lic.claims)
	}
}

func TestRegistrationSignsTheSevenReleaseFields(t *testing.T) {
	st, _, _, err := register(t, false, true, false)
	if err != nil {
		t.Fatal(err)
	}
	r := st.registered[0]
	want := `{"product_id":"App","version":"1.0.0","channel":"stable","platform":"","artifact_url":"https://example.com/app.zip","checksum":"","release_notes":""}`
	if err := testKeyring.VerifyRSA([]byte(want), r.Signature); err != nil {
		t.Fatalf("signature over %s: %v", want, err)
	}
}
