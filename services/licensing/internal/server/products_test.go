package server

import (
	"testing"

	"github.com/keyhouse/keyhouse/pkg/license"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
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
