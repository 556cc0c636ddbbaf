package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/license"
	"github.com/keyhouse/keyhouse/pkg/signing"
	apiv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/api/v1"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	"github.com/keyhouse/keyhouse/services/licensing/internal/store"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

func issueReq(product string) *licensingv1.IssueLicenseRequest {
	return &licensingv1.IssueLicenseRequest{Tier: "pro", ProductId: product, IssuedTo: "buyer@example.com"}
}

func revokeReq(key string, revoke bool) *licensingv1.RevokeLicenseRequest {
	return &licensingv1.RevokeLicenseRequest{Key: key, Revoked: proto.Bool(revoke)}
}

// The hosted quota counts the tenant's active, unexpired licenses: revoked and expired
// ones and other tenants' do not hold quota, and landing exactly on the quota is allowed.
func TestQuotaCountsOnlyTheTenantsActiveUnexpiredLicenses(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, true)
	fx.billing.quota = 3
	fx.seed("t1")
	fx.seed("t1", revoked)
	fx.seed("t1", expiredAt(-time.Second))
	fx.seed("t1", expiredAt(0)) // the expiry instant counts as expired
	fx.seed("t2")
	fx.seed("t2")
	for i := 0; i < 2; i++ {
		if _, err := fx.srv.IssueLicense(as("t1"), issueReq("app")); err != nil {
			t.Fatalf("issue %d under quota: %v", i+2, err)
		}
	}
	before := fx.store.count()
	_, err := fx.srv.IssueLicense(as("t1"), issueReq("app"))
	wantErr(t, err, "License issuance quota exceeded")
	if fx.store.count() != before {
		t.Fatal("a refused issuance stored a license")
	}
	// The other tenant's quota is its own.
	if _, err := fx.srv.IssueLicense(as("t2"), issueReq("app2")); err != nil {
		t.Fatalf("other tenant: %v", err)
	}
}

func TestQuotaZeroMeansUnlimited(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, true)
	fx.billing.quota = 0
	for i := 0; i < 20; i++ {
		if _, err := fx.srv.IssueLicense(as("t1"), issueReq("app")); err != nil {
			t.Fatal(err)
		}
	}
}

// Self-hosted has no plan: issuance and reactivation never ask billing, so billing being
// down changes nothing.
func TestSelfHostedNeverAsksBilling(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, false)
	fx.billing.err = apierr.Unavailable("Billing service unavailable, retry")
	if _, err := fx.srv.IssueLicense(as("default"), issueReq("app")); err != nil {
		t.Fatal(err)
	}
	key := fx.seed("default", revoked)
	if _, err := fx.srv.RevokeLicense(as("default"), revokeReq(key, false)); err != nil {
		t.Fatal(err)
	}
	if fx.billing.calls != 0 {
		t.Fatalf("billing asked %d times", fx.billing.calls)
	}
}

// A tenant that may not issue claims no product and stores nothing, whether its
// subscription is inactive or billing does not answer.
func TestIssuanceRefusedByBillingLeavesNoTrace(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		set  func(*fakeBilling)
		want string
	}{
		{"inactive subscription", func(b *fakeBilling) { b.active = false }, "Subscription is not active"},
		{"billing down", func(b *fakeBilling) { b.err = apierr.Unavailable("Billing service unavailable, retry") }, "Billing service unavailable, retry"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fx := newFixture(t, true)
			tc.set(fx.billing)
			_, err := fx.srv.IssueLicense(as("t1"), issueReq("claimed-by-nobody"))
			wantErr(t, err, tc.want)
			if fx.store.count() != 0 || len(fx.store.owners) != 0 {
				t.Fatalf("licenses %d, owners %v", fx.store.count(), fx.store.owners)
			}
		})
	}
}

// Reactivation (revoked → active) is issuance's twin: it needs an active subscription and
// room in the quota, and an expired license stays revoked.
func TestReactivationRules(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		seed    []func(*store.License)
		billing func(*fakeBilling)
		others  int // other active licenses of the tenant
		want    string
	}{
		{"within quota", nil, func(b *fakeBilling) { b.quota = 2 }, 1, ""},
		{"quota full", nil, func(b *fakeBilling) { b.quota = 2 }, 2, "License issuance quota exceeded"},
		{"unlimited plan", nil, func(b *fakeBilling) { b.quota = 0 }, 50, ""},
		{"expired", []func(*store.License){expiredAt(-time.Hour)}, func(b *fakeBilling) { b.quota = 5 }, 0, "License has expired"},
		{"expires at this instant", []func(*store.License){expiredAt(0)}, func(b *fakeBilling) { b.quota = 5 }, 0, "License has expired"},
		{"subscription inactive", nil, func(b *fakeBilling) { b.active = false }, 0, "Subscription is not active"},
		{"billing down", nil, func(b *fakeBilling) { b.err = apierr.Unavailable("Billing service unavailable, retry") }, 0, "Billing service unavailable, retry"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fx := newFixture(t, true)
			tc.billing(fx.billing)
			for i := 0; i < tc.others; i++ {
				fx.seed("t1")
			}
			key := fx.seed("t1", append([]func(*store.License){revoked}, tc.seed...)...)
			resp, err := fx.srv.RevokeLicense(as("t1"), revokeReq(key, false))
			row := fx.store.row("t1", key)
			if tc.want == "" {
				if err != nil || resp.GetStatus() != license.StatusActive || row.Status != license.StatusActive || row.RevokedAt != nil {
					t.Fatalf("reactivate: %v, %v, row %+v", resp, err, row)
				}
				return
			}
			wantErr(t, err, tc.want)
			if row.Status != license.StatusRevoked || row.RevokedAt == nil {
				t.Fatalf("a refused reactivation changed the row: %+v", row)
			}
		})
	}
}

// Revoking never asks billing: a tenant must be able to stop a license whatever its plan.
func TestRevocationNeedsNoSubscription(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, true)
	fx.billing.err = apierr.Unavailable("Billing service unavailable, retry")
	key := fx.seed("t1")
	if _, err := fx.srv.RevokeLicense(as("t1"), revokeReq(key, true)); err != nil {
		t.Fatal(err)
	}
	if fx.billing.calls != 0 {
		t.Fatal("revocation asked billing")
	}
	_, err := fx.srv.RevokeLicense(as("t1"), revokeReq(key, true))
	wantErr(t, err, "License is already revoked")
	// Another tenant's key is not found.
	_, err = fx.srv.RevokeLicense(as("t2"), revokeReq(key, true))
	wantErr(t, err, "License key not found")
}

// The three exports hand out only usable licenses, with verify-license's messages; a key
// typed by hand finds its license.
func TestExportRefusals(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, false)
	ok := fx.seed("default")
	revokedKey := fx.seed("default", revoked)
	expired := fx.seed("default", expiredAt(-time.Second))
	revokedAndExpired := fx.seed("default", revoked, expiredAt(-time.Hour))
	exports := map[string]func(key string) error{
		"export": func(key string) error {
			_, err := fx.srv.ExportLicense(as(""), &licensingv1.ExportLicenseRequest{Key: key})
			return err
		},
		"offline": func(key string) error {
			_, err := fx.srv.ExportLicenseOffline(as(""), &licensingv1.ExportLicenseOfflineRequest{Key: key})
			return err
		},
		"file": func(key string) error {
			_, err := fx.srv.ExportLicenseFile(as(""), &licensingv1.ExportLicenseFileRequest{Key: key})
			return err
		},
	}
	for name, export := range exports {
		for _, tc := range []struct{ key, want string }{
			{ok, ""},
			{strings.ToLower(strings.ReplaceAll(ok, "-", "")), ""},
			{revokedKey, "License is not active"},
			{expired, "License has expired"},
			{revokedAndExpired, "License is not active"},
			{"NO-SUCH-KEY", "License key not found"},
		} {
			err := export(tc.key)
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || err.Error() != tc.want) {
				t.Errorf("%s %s: got %v, want %q", name, tc.key, err, tc.want)
			}
		}
	}
}

// verify-license-file checks the signature over what was presented, then the license as
// it is now: revoked or deleted since the export is "Revoked or not found", expired since
// is "Expired", each with valid false and the reason beside the error.
func TestVerifyLicenseFileRefusesWhatChangedSinceTheExport(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, false)
	ctx := as("")
	until := clock.Add(time.Hour)
	key := fx.seed("default", func(l *store.License) { l.ExpiresAt = &until; l.Limits = map[string]float64{"seats": 3} })
	exp, err := fx.srv.ExportLicense(ctx, &licensingv1.ExportLicenseRequest{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	expires, err := signing.FormatTime(until)
	if err != nil {
		t.Fatal(err)
	}
	claim := func(tier string) *licensingv1.VerifyLicenseFileRequest {
		return &licensingv1.VerifyLicenseFileRequest{
			Key: structpb.NewStringValue(exp.GetKey()), Tier: structpb.NewStringValue(tier),
			ProductId: structpb.NewStringValue(exp.GetProductId()), Sig: structpb.NewStringValue(exp.GetSig()),
			ExpiresAt: structpb.NewStringValue(expires), Limits: structpb.NewStructValue(exp.GetLimits()),
		}
	}
	verify := func(req *licensingv1.VerifyLicenseFileRequest) error {
		_, err := fx.srv.VerifyLicenseFile(ctx, req)
		return err
	}
	if err := verify(claim("pro")); err != nil {
		t.Fatalf("fresh export: %v", err)
	}
	wantFileFailure(t, verify(claim("enterprise")), codes.PermissionDenied, "Invalid signature")

	fx.srv.now = func() time.Time { return until }
	wantFileFailure(t, verify(claim("pro")), codes.PermissionDenied, "Expired")
	fx.srv.now = func() time.Time { return clock }

	if _, err := fx.srv.RevokeLicense(as("default"), revokeReq(key, true)); err != nil {
		t.Fatal(err)
	}
	wantFileFailure(t, verify(claim("pro")), codes.PermissionDenied, "Revoked or not found")
	if _, err := fx.srv.DeleteLicense(as("default"), &licensingv1.DeleteLicenseRequest{Key: key}); err != nil {
		t.Fatal(err)
	}
	wantFileFailure(t, verify(claim("pro")), codes.PermissionDenied, "Revoked or not found")
}

func wantFileFailure(t *testing.T, err error, code codes.Code, msg string) {
	t.Helper()
	ae, ok := err.(*apierr.Error)
	if !ok || ae.Code != code || ae.Message != msg {
		t.Fatalf("got %v, want %v %q", err, code, msg)
	}
	for _, d := range ae.GRPCStatus().Details() {
		if f, ok := d.(*apiv1.ErrorFields); ok && len(f.GetBefore()) == 2 &&
			f.GetBefore()[0].GetJsonValue() == "false" && f.GetBefore()[1].GetJsonValue() == `"`+msg+`"` {
			return
		}
	}
	t.Fatalf("%q does not carry valid false and the reason", msg)
}

// verify-license: a body without key is a 400 naming it (addendum §6), an empty key an
// unknown string; every failure carries valid false.
func TestVerifyLicenseMissingAndEmptyKey(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, false)
	_, err := fx.srv.VerifyLicense(as(""), &licensingv1.VerifyLicenseRequest{})
	if !apierr.Is(err, codes.InvalidArgument) || err.Error() != "key is required" {
		t.Fatalf("missing key: %v", err)
	}
	_, err = fx.srv.VerifyLicense(as(""), &licensingv1.VerifyLicenseRequest{Key: proto.String("")})
	if !apierr.Is(err, codes.NotFound) {
		t.Fatalf("empty key: %v", err)
	}
}

// A refused delete (another tenant's key) deletes nothing; the tenant's own delete does
// (its store emits license.deleted in the same transaction: the store's tests pin that).
func TestDeleteRemovesOnlyTheTenantsOwnLicense(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, true)
	key := fx.seed("t1")
	if _, err := fx.srv.DeleteLicense(as("t2"), &licensingv1.DeleteLicenseRequest{Key: key}); err == nil || err.Error() != "License key not found" {
		t.Fatalf("other tenant's delete: %v", err)
	}
	if len(fx.store.deletions("t1")) != 0 || len(fx.store.deletions("t2")) != 0 || fx.store.row("t1", key) == nil {
		t.Fatal("a refused delete changed something")
	}
	if _, err := fx.srv.DeleteLicense(as("t1"), &licensingv1.DeleteLicenseRequest{Key: key}); err != nil {
		t.Fatal(err)
	}
	if d := fx.store.deletions("t1"); len(d) != 1 || d[0] != key || fx.store.row("t1", key) != nil {
		t.Fatalf("deletions %v", d)
	}
}

// admin/stats leaves out the seats of licenses deleted lately: activations may not have
// purged them yet (it, or NATS, was down when the license went).
func TestStatsLeaveOutTheSeatsOfDeletedLicenses(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, true)
	gone, kept := fx.seed("t1"), fx.seed("t1")
	fx.seed("t2")
	if _, err := fx.srv.DeleteLicense(as("t1"), &licensingv1.DeleteLicenseRequest{Key: gone}); err != nil {
		t.Fatal(err)
	}
	st, err := fx.srv.GetStats(as("t1"), &licensingv1.GetStatsRequest{})
	if err != nil || st.GetTotalLicenses() != 1 {
		t.Fatalf("stats %v, %v", st, err)
	}
	if len(fx.seats.exclude) != 1 || fx.seats.exclude[0] != gone {
		t.Fatalf("activations asked to exclude %v, want [%s] (not %s)", fx.seats.exclude, gone, kept)
	}
	if _, err := fx.srv.GetStats(as("t2"), &licensingv1.GetStatsRequest{}); err != nil || len(fx.seats.exclude) != 0 {
		t.Fatalf("another tenant's stats exclude %v (%v)", fx.seats.exclude, err)
	}
}

func termsReq(key string, expires *structpb.Value) *licensingv1.UpdateLicenseTermsRequest {
	return &licensingv1.UpdateLicenseTermsRequest{Key: key, ExpiresAt: expires}
}

// An update of terms that makes an expired license unexpired again (a revival) counts
// against the quota again, so hosted it is reactivation's twin: an active subscription
// and room in the quota. Any other update never depends on billing.
func TestRevivalByTermsRules(t *testing.T) {
	t.Parallel()
	future := structpb.NewStringValue(clock.Add(24 * time.Hour).Format(time.RFC3339))
	past := structpb.NewStringValue(clock.Add(-time.Minute).Format(time.RFC3339))
	perpetual := structpb.NewNullValue()
	seats := &licensingv1.UpdateLicenseTermsRequest{MaxActivations: structpb.NewNumberValue(7)}
	cases := []struct {
		name    string
		seed    []func(*store.License)
		req     *licensingv1.UpdateLicenseTermsRequest // key filled in
		billing func(*fakeBilling)
		others  int // other active licenses of the tenant
		want    string
	}{
		{"revival within quota", []func(*store.License){expiredAt(-time.Hour)}, termsReq("", future), func(b *fakeBilling) { b.quota = 2 }, 1, ""},
		{"revival to perpetual within quota", []func(*store.License){expiredAt(-time.Hour)}, termsReq("", perpetual), func(b *fakeBilling) { b.quota = 2 }, 1, ""},
		{"revival at a full quota", []func(*store.License){expiredAt(-time.Hour)}, termsReq("", perpetual), func(b *fakeBilling) { b.quota = 2 }, 2, "License issuance quota exceeded"},
		{"revival of a license expiring at this instant", []func(*store.License){expiredAt(0)}, termsReq("", future), func(b *fakeBilling) { b.quota = 1 }, 1, "License issuance quota exceeded"},
		{"revival on an unlimited plan", []func(*store.License){expiredAt(-time.Hour)}, termsReq("", future), func(b *fakeBilling) { b.quota = 0 }, 50, ""},
		{"revival, subscription inactive", []func(*store.License){expiredAt(-time.Hour)}, termsReq("", future), func(b *fakeBilling) { b.active = false }, 0, "Subscription is not active"},
		{"revival, billing down", []func(*store.License){expiredAt(-time.Hour)}, termsReq("", future), func(b *fakeBilling) { b.err = apierr.Unavailable("Billing service unavailable, retry") }, 0, "Billing service unavailable, retry"},
		// No revival: allowed whatever billing says.
		{"expired kept expired", []func(*store.License){expiredAt(-time.Hour)}, termsReq("", past), func(b *fakeBilling) { b.active = false }, 5, ""},
		{"expired, only the cap", []func(*store.License){expiredAt(-time.Hour)}, seats, func(b *fakeBilling) { b.active = false }, 5, ""},
		{"active license extended", []func(*store.License){expiredAt(time.Hour)}, termsReq("", future), func(b *fakeBilling) { b.active = false }, 5, ""},
		{"active perpetual at a full quota", nil, termsReq("", future), func(b *fakeBilling) { b.quota = 1 }, 3, ""},
		{"revoked and expired, extended", []func(*store.License){revoked, expiredAt(-time.Hour)}, termsReq("", perpetual), func(b *fakeBilling) { b.err = apierr.Unavailable("Billing service unavailable, retry") }, 5, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fx := newFixture(t, true)
			tc.billing(fx.billing)
			for i := 0; i < tc.others; i++ {
				fx.seed("t1")
			}
			key := fx.seed("t1", tc.seed...)
			before := fx.store.row("t1", key)
			req := proto.Clone(tc.req).(*licensingv1.UpdateLicenseTermsRequest)
			req.Key = key
			resp, err := fx.srv.UpdateLicenseTerms(as("t1"), req)
			row := fx.store.row("t1", key)
			if tc.want == "" {
				if err != nil || resp.GetKey() != key {
					t.Fatalf("update: %v, %v", resp, err)
				}
				return
			}
			wantErr(t, err, tc.want)
			if (row.ExpiresAt == nil) != (before.ExpiresAt == nil) || (row.ExpiresAt != nil && !row.ExpiresAt.Equal(*before.ExpiresAt)) {
				t.Fatalf("a refused revival changed the row: %+v", row)
			}
		})
	}
}

// Self-hosted has no quota: a revival never asks billing.
func TestSelfHostedRevivalNeverAsksBilling(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, false)
	fx.billing.err = apierr.Unavailable("Billing service unavailable, retry")
	key := fx.seed("default", expiredAt(-time.Hour))
	if _, err := fx.srv.UpdateLicenseTerms(as("default"), termsReq(key, structpb.NewNullValue())); err != nil {
		t.Fatal(err)
	}
	if fx.billing.calls != 0 {
		t.Fatalf("billing asked %d times", fx.billing.calls)
	}
}

// staleStore answers Get with the license as it was (a cache, or a read just before a
// concurrent update committed).
type staleStore struct {
	*fakeStore
	stale *store.License
}

func (s staleStore) Get(_ context.Context, _, _ string) (*store.License, error) {
	c := *s.stale
	return &c, nil
}

// The row locked in the transaction decides, not the license read before it: a license
// that looked unexpired but is expired when locked is a revival all the same.
func TestRevivalIsDecidedOnTheLockedRow(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, true)
	fx.billing.quota = 1
	fx.seed("t1")
	key := fx.seed("t1", expiredAt(-time.Minute))
	stale := fx.store.row("t1", key)
	later := clock.Add(time.Hour)
	stale.ExpiresAt = &later
	srv := New(Config{MultiTenant: true, Keyring: testKeyring}, staleStore{fx.store, stale}, fx.billing, fx.seats)
	srv.now = fx.srv.now
	_, err := srv.UpdateLicenseTerms(as("t1"), termsReq(key, structpb.NewNullValue()))
	wantErr(t, err, "License issuance quota exceeded")
	if fx.billing.calls != 1 {
		t.Fatalf("billing asked %d times, want once (on the retry)", fx.billing.calls)
	}
	if row := fx.store.row("t1", key); row.ExpiresAt == nil {
		t.Fatal("the refused revival made the license perpetual")
	}
	// With room, the same stale read revives it.
	fx.billing.quota = 2
	if _, err := srv.UpdateLicenseTerms(as("t1"), termsReq(key, structpb.NewNullValue())); err != nil {
		t.Fatal(err)
	}
}
