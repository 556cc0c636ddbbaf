package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/license"
	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	"github.com/keyhouse/keyhouse/services/activations/internal/store"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
)

// fakeProducts is licensing's product ownership: owners by product_id, claims recorded.
type fakeProducts struct {
	owners map[string]string
	claims []string
}

func (f *fakeProducts) ClaimProduct(_ context.Context, tenant, productID string) error {
	f.claims = append(f.claims, productID)
	if owner, ok := f.owners[productID]; ok && owner != tenant {
		return license.ErrProductOwned
	}
	f.owners[productID] = tenant
	return nil
}

func (f *fakeProducts) ProductOwned(_ context.Context, tenant, productID string) (bool, error) {
	owner, ok := f.owners[productID]
	if ok && owner != tenant {
		return false, license.ErrProductOwned
	}
	return ok, nil
}

// fakePolicies is the policy SQL of LeaseStore, nothing stored.
type fakePolicies struct {
	LeaseStore
}

func (fakePolicies) PutPolicy(_ context.Context, _ string, p store.Policy) (store.Policy, error) {
	return p, nil
}

func (fakePolicies) Policies(context.Context, string, string) ([]store.Policy, error) {
	return nil, nil
}

func (fakePolicies) DeletePolicy(context.Context, string, string, string) (bool, error) {
	return false, nil
}

// A product no tenant owns is read and refused without being claimed; only a valid PUT
// claims it; another tenant's is not found; a blank product_id is 400 naming it before
// licensing is asked.
func TestPoliciesClaimAProductOnlyOnAValidWrite(t *testing.T) {
	products := &fakeProducts{owners: map[string]string{"theirs": "t2"}}
	x := NewLeases(fakePolicies{}, nil, products, LeaseConfig{MultiTenant: true, MinLeaseTTL: time.Minute})
	ctx := as("t1")

	list, err := x.ListLeasePolicies(ctx, &activationsv1.ListLeasePoliciesRequest{ProductId: "free"})
	if err != nil || len(list.GetPolicies()) != 0 {
		t.Fatalf("list of a free product: %v %v", list, err)
	}
	_, err = x.DeleteLeasePolicy(ctx, &activationsv1.DeleteLeasePolicyRequest{ProductId: "free", Tier: "pro"})
	wantAPIError(t, err, codes.NotFound, "Policy not found")
	_, err = x.PutLeasePolicy(ctx, &activationsv1.PutLeasePolicyRequest{ProductId: "free", Tier: "pro", LeaseTtlSeconds: proto.Int32(1)})
	wantAPIError(t, err, codes.InvalidArgument, "lease_ttl_seconds must be between 60 and 7776000")
	if len(products.claims) != 0 || products.owners["free"] != "" {
		t.Fatalf("claimed by a read or a refusal: claims %v, owner %q", products.claims, products.owners["free"])
	}

	if _, err := x.PutLeasePolicy(ctx, &activationsv1.PutLeasePolicyRequest{ProductId: "free", Tier: "pro"}); err != nil {
		t.Fatal(err)
	}
	if products.owners["free"] != "t1" {
		t.Fatalf("a valid PUT did not claim: owner %q", products.owners["free"])
	}

	_, err = x.ListLeasePolicies(ctx, &activationsv1.ListLeasePoliciesRequest{ProductId: "theirs"})
	wantAPIError(t, err, codes.NotFound, "Product not found")
	_, err = x.DeleteLeasePolicy(ctx, &activationsv1.DeleteLeasePolicyRequest{ProductId: "theirs", Tier: "pro"})
	wantAPIError(t, err, codes.NotFound, "Product not found")
	_, err = x.PutLeasePolicy(ctx, &activationsv1.PutLeasePolicyRequest{ProductId: "theirs", Tier: "pro"})
	wantAPIError(t, err, codes.NotFound, "Product not found")

	claims := len(products.claims)
	for _, blank := range []string{"", " ", "\t "} {
		_, err = x.ListLeasePolicies(ctx, &activationsv1.ListLeasePoliciesRequest{ProductId: blank})
		wantAPIError(t, err, codes.InvalidArgument, "product_id is required")
		_, err = x.DeleteLeasePolicy(ctx, &activationsv1.DeleteLeasePolicyRequest{ProductId: blank, Tier: " "})
		wantAPIError(t, err, codes.InvalidArgument, "product_id is required")
		_, err = x.PutLeasePolicy(ctx, &activationsv1.PutLeasePolicyRequest{ProductId: blank, Tier: "pro", LeaseTtlSeconds: proto.Int32(3600)})
		wantAPIError(t, err, codes.InvalidArgument, "product_id is required")
	}
	if len(products.claims) != claims {
		t.Fatalf("a blank product_id reached licensing: %v", products.claims[claims:])
	}
}

// A tier of white space only is 400 "tier is required" on PUT and DELETE, as an empty one
// is (licensing refuses such a tier, so no license could follow the policy), and claims
// nothing.
func TestPoliciesRefuseABlankTier(t *testing.T) {
	products := &fakeProducts{owners: map[string]string{}}
	x := NewLeases(fakePolicies{}, nil, products, LeaseConfig{MultiTenant: true, MinLeaseTTL: time.Minute})
	ctx := as("t1")
	for _, blank := range []string{"", " ", "\t "} {
		_, err := x.PutLeasePolicy(ctx, &activationsv1.PutLeasePolicyRequest{ProductId: "free", Tier: blank})
		wantAPIError(t, err, codes.InvalidArgument, "tier is required")
		_, err = x.DeleteLeasePolicy(ctx, &activationsv1.DeleteLeasePolicyRequest{ProductId: "free", Tier: blank})
		wantAPIError(t, err, codes.InvalidArgument, "tier is required")
	}
	if len(products.claims) != 0 || len(products.owners) != 0 {
		t.Fatalf("a blank tier claimed: claims %v, owners %v", products.claims, products.owners)
	}
}

func wantAPIError(t *testing.T, err error, code codes.Code, msg string) {
	t.Helper()
	if !apierr.Is(err, code) || err.Error() != msg {
		t.Fatalf("got %v, want %v %q", err, code, msg)
	}
}

// A policy's product_id and tier are capped as a license's are (200 characters): a longer
// tier could never match a license, so it is refused, naming the field, and claims nothing.
func TestPoliciesCapProductAndTierAsLicensesDo(t *testing.T) {
	products := &fakeProducts{owners: map[string]string{}}
	x := NewLeases(fakePolicies{}, nil, products, LeaseConfig{MultiTenant: true, MinLeaseTTL: time.Minute})
	ctx := as("t1")
	long := strings.Repeat("é", 201)
	_, err := x.PutLeasePolicy(ctx, &activationsv1.PutLeasePolicyRequest{ProductId: "free", Tier: long})
	wantAPIError(t, err, codes.InvalidArgument, "tier must be at most 200 characters")
	_, err = x.DeleteLeasePolicy(ctx, &activationsv1.DeleteLeasePolicyRequest{ProductId: "free", Tier: long})
	wantAPIError(t, err, codes.InvalidArgument, "tier must be at most 200 characters")
	_, err = x.PutLeasePolicy(ctx, &activationsv1.PutLeasePolicyRequest{ProductId: long, Tier: "pro"})
	wantAPIError(t, err, codes.InvalidArgument, "product_id must be at most 200 characters")
	_, err = x.ListLeasePolicies(ctx, &activationsv1.ListLeasePoliciesRequest{ProductId: long})
	wantAPIError(t, err, codes.InvalidArgument, "product_id must be at most 200 characters")
	if len(products.claims) != 0 {
		t.Fatalf("an over-long field claimed: %v", products.claims)
	}
	if _, err := x.PutLeasePolicy(ctx, &activationsv1.PutLeasePolicyRequest{ProductId: strings.Repeat("p", 200), Tier: long[:200*2]}); err != nil {
		t.Fatalf("200 characters each: %v", err)
	}
}
