package server

import (
	"context"
	"testing"

	"github.com/keyhouse/keyhouse/pkg/idempotency"
	"github.com/keyhouse/keyhouse/pkg/license"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	"google.golang.org/grpc/metadata"
)

// CheckProductOwner answers as ClaimProduct does (the caller's, another tenant's, a blank
// product_id) but leaves a product no tenant owns free: the next claim, by anyone, wins.
func TestCheckProductOwnerClaimsNothing(t *testing.T) {
	fx := newFixture(t, true)
	check := func(tenant, productID string) (bool, error) {
		resp, err := fx.srv.CheckProductOwner(as(tenant), &licensingv1.CheckProductOwnerRequest{ProductId: productID})
		return resp.GetOwned(), err
	}
	if owned, err := check("t1", "free"); owned || err != nil {
		t.Fatalf("a free product: owned %v err %v", owned, err)
	}
	if _, err := fx.srv.ClaimProduct(as("t2"), &licensingv1.ClaimProductRequest{ProductId: "free"}); err != nil {
		t.Fatalf("the free product was taken by a check: %v", err)
	}
	if owned, err := check("t2", " FREE "); !owned || err != nil {
		t.Fatalf("the owner's product: owned %v err %v", owned, err)
	}
	_, err := check("t1", "free")
	wantErr(t, err, license.ErrProductOwned.Error())
	for _, blank := range []string{"", " \t"} {
		_, err := check("t1", blank)
		wantErr(t, err, "product_id is required")
	}
}

// An issuance refused after the ownership check (the quota, an Idempotency-Key reused with
// another request) claims nothing: the product stays free for the next tenant.
func TestRefusedIssuanceClaimsNothing(t *testing.T) {
	t.Parallel()
	withKey := func(tenant, key string) context.Context {
		return metadata.NewIncomingContext(as(tenant), metadata.Pairs(idempotency.Header, key))
	}
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, fx *fixture)
		ctx   context.Context
		want  string
	}{
		{"quota full", func(_ *testing.T, fx *fixture) { fx.billing.quota = 1; fx.seed("t1") }, as("t1"), "License issuance quota exceeded"},
		{"Idempotency-Key reused", func(t *testing.T, fx *fixture) {
			if _, err := fx.srv.IssueLicense(withKey("t1", "k-1"), issueReq("mine")); err != nil {
				t.Fatal(err)
			}
		}, withKey("t1", "k-1"), "Idempotency-Key reused with a different request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fx := newFixture(t, true)
			tc.setup(t, fx)
			before := fx.store.count()
			_, err := fx.srv.IssueLicense(tc.ctx, issueReq("free"))
			wantErr(t, err, tc.want)
			if owner, _ := fx.store.ProductOwner(context.Background(), "free"); owner != "" || fx.store.count() != before {
				t.Fatalf("a refused issuance: owner %q, licenses %d (before %d)", owner, fx.store.count(), before)
			}
			if _, err := fx.srv.IssueLicense(as("t2"), issueReq("free")); err != nil {
				t.Fatalf("the next tenant: %v", err)
			}
		})
	}
}

// An import claims the products of the licenses it writes, and only those: a call refused
// (409 on_conflict fail, the quota) claims nothing, and an item skipped, unchanged or
// invalid claims nothing for its product.
func TestImportClaimsOnlyTheProductsOfLicensesWritten(t *testing.T) {
	t.Parallel()
	item := func(key, product string, extra ...string) *licensingv1.ImportedLicense {
		l := &licensingv1.ImportedLicense{Key: key, ProductId: product, Tier: "pro", IssuedTo: "a@example.com"}
		if len(extra) > 0 {
			l.Tier = extra[0]
		}
		return l
	}
	owner := func(fx *fixture, product string) string {
		o, _ := fx.store.ProductOwner(context.Background(), product)
		return o
	}
	fx := newFixture(t, true)
	if _, err := fx.srv.ImportLicenses(as("t1"), &licensingv1.ImportLicensesRequest{Licenses: []*licensingv1.ImportedLicense{item("KEY-0000-A", "mine")}}); err != nil {
		t.Fatal(err)
	}
	// A conflict under on_conflict fail: nothing imported, nothing claimed.
	_, err := fx.srv.ImportLicenses(as("t1"), &licensingv1.ImportLicensesRequest{Licenses: []*licensingv1.ImportedLicense{
		item("KEY-0000-B", "free-409"), item("KEY-0000-A", "mine", "enterprise")}})
	wantErr(t, err, `licenses[1].key already exists with other terms; on_conflict is "fail", so nothing was imported`)
	// Skipped (the key exists with other terms) and invalid items claim nothing; the
	// written one does.
	resp, err := fx.srv.ImportLicenses(as("t1"), &licensingv1.ImportLicensesRequest{OnConflict: "skip", Licenses: []*licensingv1.ImportedLicense{
		item("KEY-0000-A", "free-skipped", "enterprise"), item("short", "free-invalid"), item("KEY-0000-C", "written")}})
	if err != nil || resp.GetImported() != 1 || resp.GetSkipped() != 1 || resp.GetInvalid() != 1 {
		t.Fatalf("import: %v, %v", resp, err)
	}
	// Over the quota: nothing imported, nothing claimed.
	fx.billing.quota = 2
	_, err = fx.srv.ImportLicenses(as("t1"), &licensingv1.ImportLicensesRequest{Licenses: []*licensingv1.ImportedLicense{item("KEY-0000-D", "free-quota")}})
	wantErr(t, err, "License issuance quota exceeded")
	for _, p := range []string{"free-409", "free-skipped", "free-invalid", "free-quota"} {
		if o := owner(fx, p); o != "" {
			t.Errorf("%s: owned by %q, after a refused or partly refused import", p, o)
		}
	}
	if owner(fx, "mine") != "t1" || owner(fx, "written") != "t1" {
		t.Fatalf("owners of the written licenses: %q %q", owner(fx, "mine"), owner(fx, "written"))
	}
}
