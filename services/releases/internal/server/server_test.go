package server

import (
	"context"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/auth"
	"github.com/keyhouse/keyhouse/pkg/billingclient"
	"github.com/keyhouse/keyhouse/pkg/idempotency"
	"github.com/keyhouse/keyhouse/pkg/license"
	"github.com/keyhouse/keyhouse/pkg/signing"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	releasesv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/releases/v1"
	"github.com/keyhouse/keyhouse/services/releases/internal/store"
)

// The subscription check and the product claim of a hosted registration have no
// end-to-end test while billing reports every subscription active; these pin them.

type fakeStore struct {
	Store
	registered []*store.NewRelease
	latest     *store.Release
	refuse     error // the store's own refusal (a duplicate, the limit, an outage)
}

func (f *fakeStore) Latest(context.Context, string, string, string, string) (*store.Release, error) {
	return f.latest, nil
}

// Register refuses, or runs beforeCommit and keeps r unless it fails, as the transaction
// of store.Store.Register does.
func (f *fakeStore) Register(ctx context.Context, _, _ string, _ []byte, r *store.NewRelease, _ int, beforeCommit func(context.Context) error) (int32, error) {
	if f.refuse != nil {
		return 0, f.refuse
	}
	if beforeCommit != nil {
		if err := beforeCommit(ctx); err != nil {
			return 0, err
		}
	}
	f.registered = append(f.registered, r)
	return int32(len(f.registered)), nil
}

type fakeLicensing struct {
	Licensing
	keyring  *signing.Keyring
	claims   []string
	checks   int
	owned    bool // another tenant owns the product
	keyCalls int
}

func (f *fakeLicensing) License(context.Context, string, string) (*licensingv1.License, error) {
	return &licensingv1.License{TenantId: "t1", ProductId: "App", Status: "active"}, nil
}

func (f *fakeLicensing) ClaimProduct(_ context.Context, tenant, productID string) error {
	f.claims = append(f.claims, tenant+"/"+productID)
	if f.owned {
		return license.ErrProductOwned
	}
	return nil
}

func (f *fakeLicensing) ProductOwned(context.Context, string, string) (bool, error) {
	f.checks++
	if f.owned {
		return false, license.ErrProductOwned
	}
	return false, nil
}

// Keyring is the keyring kept; the fake keeps whatever licensing has.
func (f *fakeLicensing) Keyring(context.Context) (*signing.Keyring, error) {
	return f.keyring, nil
}

// CurrentKeyring counts the signings (each asks for the key that signs now).
func (f *fakeLicensing) CurrentKeyring(context.Context) (*signing.Keyring, error) {
	f.keyCalls++
	return f.keyring, nil
}

type fakeEntitlements struct {
	active bool
	calls  int
}

func (f *fakeEntitlements) ActivePlan(context.Context, string) (int, error) {
	f.calls++
	if !f.active {
		return 0, billingclient.ErrSubscriptionInactive
	}
	return 0, nil
}

var testKeyring = func() *signing.Keyring {
	k, err := signing.NewKeyring()
	if err != nil {
		panic(err)
	}
	return k
}()

func register(t *testing.T, multiTenant, active, owned bool, refuse ...error) (*fakeStore, *fakeLicensing, *fakeEntitlements, error) {
	t.Helper()
	st, lic, ent := &fakeStore{}, &fakeLicensing{keyring: testKeyring, owned: owned}, &fakeEntitlements{active: active}
	if len(refuse) > 0 {
		st.refuse = refuse[0]
	}
	s := New(Config{MultiTenant: multiTenant}, st, lic, ent)
	ctx := auth.WithPrincipal(context.Background(), auth.Principal{TenantID: "t1"})
	_, err := s.RegisterRelease(ctx, &releasesv1.RegisterReleaseRequest{
		ProductId: "App", Version: "1.0.0", ArtifactUrl: "https://example.com/app.zip",
	})
	return st, lic, ent, err
}

func TestHostedRegistrationNeedsAnActiveSubscription(t *testing.T) {
	st, lic, _, err := register(t, true, false, false)
	if err != billingclient.ErrSubscriptionInactive || err.(*apierr.Error).Message != "Subscription is not active" {
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
	st, lic, _, err = register(t, true, true, true)
	if err != license.ErrProductOwned || len(st.registered) != 0 || len(lic.claims) != 0 {
		t.Fatalf("owned product: %v, registered %d, claims %v", err, len(st.registered), lic.claims)
	}
}

// A registration the store refuses (or fails) claims nothing: the ownership is checked
// without a claim, and the claim runs only in the release's transaction.
func TestRefusedRegistrationClaimsNothing(t *testing.T) {
	for _, refusal := range []error{store.ErrDuplicate, store.ErrLimit, idempotency.ErrReused, apierr.Unavailable("Releases database unavailable")} {
		st, lic, _, err := register(t, true, true, false, refusal)
		if err == nil || lic.checks != 1 || len(lic.claims) != 0 || len(st.registered) != 0 {
			t.Fatalf("%v: err %v, checks %d, claims %v, registered %d", refusal, err, lic.checks, lic.claims, len(st.registered))
		}
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

// Within one second every answer about a release is the same manifest: it is signed once,
// and issued_at is that second.
func TestManifestIsSignedOncePerReleaseAndSecond(t *testing.T) {
	st := &fakeStore{latest: &store.Release{ID: 7, ProductID: "App", Version: "2.0.0", Channel: "stable", ArtifactURL: "https://example.com/a"}}
	lic := &fakeLicensing{keyring: testKeyring}
	s := New(Config{}, st, lic, &fakeEntitlements{})
	now := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	s.now = func() time.Time { return now }
	req := &releasesv1.CheckUpdateRequest{Key: "k", ProductId: "app", CurrentVersion: "1.0.0"}
	answer := func() *releasesv1.Manifest {
		t.Helper()
		resp, err := s.CheckUpdate(context.Background(), req)
		if err != nil || !resp.GetUpdateAvailable() {
			t.Fatalf("%v %v", resp, err)
		}
		return resp.GetRelease()
	}
	first := answer()
	now = now.Add(999 * time.Millisecond)
	second := answer()
	if lic.keyCalls != 1 || second.GetSignature() != first.GetSignature() || !second.GetIssuedAt().AsTime().Equal(first.GetIssuedAt().AsTime()) {
		t.Fatalf("same second: %d signings, %v vs %v", lic.keyCalls, first, second)
	}
	want := `{"product_id":"App","version":"2.0.0","channel":"stable","platform":"","artifact_url":"https://example.com/a","checksum":"","release_notes":"","issued_at":"2026-11-23T10:00:00Z"}`
	if err := testKeyring.VerifyRSA([]byte(want), second.GetSignature()); err != nil {
		t.Fatalf("signature over %s: %v", want, err)
	}
	now = now.Add(time.Millisecond)
	third := answer()
	if lic.keyCalls != 2 || third.GetIssuedAt().AsTime().Unix() != first.GetIssuedAt().AsTime().Unix()+1 || third.GetSignature() == first.GetSignature() {
		t.Fatalf("next second: %d signings, issued_at %v", lic.keyCalls, third.GetIssuedAt().AsTime())
	}
	// Another release in the same slot of the cache is signed for itself.
	st.latest = &store.Release{ID: 7 + sigCacheSlots, ProductID: "App", Version: "3.0.0", Channel: "stable", ArtifactURL: "https://example.com/b"}
	if other := answer(); other.GetVersion() != "3.0.0" || other.GetSignature() == third.GetSignature() || lic.keyCalls != 3 {
		t.Fatalf("colliding release: %v after %d signings", other, lic.keyCalls)
	}
}

// When licensing's signing key changes (a rotation's promotion), the next manifest is
// signed with the new key, even within the second whose signature with the old key is
// cached: a manifest never verifies only with a key GET /v1/public-key no longer serves.
func TestManifestAfterTheSigningKeyChangedIsSignedWithTheNewKey(t *testing.T) {
	st := &fakeStore{latest: &store.Release{ID: 7, ProductID: "App", Version: "2.0.0", Channel: "stable", ArtifactURL: "https://example.com/a"}}
	lic := &fakeLicensing{keyring: testKeyring}
	s := New(Config{}, st, lic, &fakeEntitlements{})
	now := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	s.now = func() time.Time { return now }
	req := &releasesv1.CheckUpdateRequest{Key: "k", ProductId: "app", CurrentVersion: "1.0.0"}
	want := []byte(`{"product_id":"App","version":"2.0.0","channel":"stable","platform":"","artifact_url":"https://example.com/a","checksum":"","release_notes":"","issued_at":"2026-11-23T10:00:00Z"}`)
	signature := func() string {
		t.Helper()
		resp, err := s.CheckUpdate(context.Background(), req)
		if err != nil || !resp.GetUpdateAvailable() {
			t.Fatalf("%v %v", resp, err)
		}
		return resp.GetRelease().GetSignature()
	}
	if err := testKeyring.VerifyRSA(want, signature()); err != nil {
		t.Fatal(err)
	}
	rotated, err := signing.NewKeyring()
	if err != nil {
		t.Fatal(err)
	}
	lic.keyring = rotated
	if err := rotated.VerifyRSA(want, signature()); err != nil {
		t.Fatalf("the manifest after the key changed, in the same second: %v", err)
	}
}
