package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/pkg/licensecache"
	"github.com/keyhouse/keyhouse/pkg/tenantpurge"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	"github.com/keyhouse/keyhouse/stack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// internalLicensing is the licensing service at addr as another service calls it (the
// admin key and the tenant it acts for in metadata: actingFor).
func internalLicensing(t *testing.T, addr string) licensingv1.LicensingInternalServiceClient {
	t.Helper()
	return licensingv1.NewLicensingInternalServiceClient(dialAddr(t, addr))
}

func actingFor(s *stack.Stack, tenant string) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+s.AdminKey, "x-keyhouse-tenant", tenant), cancel
}

func issueFor(s *stack.Stack, lic licensingv1.LicensingInternalServiceClient, tenant, prod string) (string, error) {
	ctx, cancel := actingFor(s, tenant)
	defer cancel()
	r, err := lic.IssueLicenseForTenant(ctx, &licensingv1.IssueLicenseForTenantRequest{
		License: &licensingv1.IssueLicenseRequest{Tier: "pro", ProductId: prod, IssuedTo: "buyer@example.com"}})
	return r.GetKey(), err
}

func expectTenantNotFound(t *testing.T, what string, err error) {
	t.Helper()
	if st, _ := status.FromError(err); st.Code() != codes.NotFound || st.Message() != "Tenant not found" {
		t.Fatalf("%s: %v, want NotFound \"Tenant not found\"", what, err)
	}
}

// An internal caller (storefront's issuance, releases' claims) naming a tenant the
// installation does not have, a typo, "default" on a hosted installation, or one deleted,
// is refused with "Tenant not found": nothing is issued, no product is claimed, so the
// real tenant can still issue that product.
func TestInternalCallersCannotIssueOrClaimForATenantThatDoesNotExist(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	lic := internalLicensing(t, s.Env("LICENSING_ADDR"))
	real := newTenant(t, s)
	gone, goneID := hostedTenant(t, s)
	issueLicense(t, gone, map[string]any{"tier": "pro", "product_id": product("before-delete"), "issued_to": "x@example.com"})
	admin(t, s).Delete("/v1/operator/tenants/"+goneID, nil).Expect(t, 200)
	conn := dbConn(t, s)
	eventually(t, "the deleted tenant purged everywhere", func() bool { return len(tenantRows(t, conn, goneID)) == 0 })

	for _, tenant := range []string{fmt.Sprint("t_typo", time.Now().UnixNano()), "default", goneID} {
		prod := product("ghost")
		key, err := issueFor(s, lic, tenant, prod)
		expectTenantNotFound(t, "IssueLicenseForTenant for "+tenant, err)
		if key != "" {
			t.Fatalf("a key was issued for %s", tenant)
		}
		ctx, cancel := actingFor(s, tenant)
		_, err = lic.ClaimProduct(ctx, &licensingv1.ClaimProductRequest{ProductId: prod})
		cancel()
		expectTenantNotFound(t, "ClaimProduct for "+tenant, err)
		// The product is nobody's: the real tenant issues it.
		issueLicense(t, real, map[string]any{"tier": "pro", "product_id": prod, "issued_to": "x@example.com"})
	}
	if rows := tenantRows(t, conn, goneID); len(rows) != 0 {
		t.Fatalf("rows of the deleted tenant written after its purge: %v", rows)
	}
}

// Activations purged a deleted tenant while licensing, down, still holds its license: a
// buyer's activation of a license activations holds in its cache is refused (the license
// is gone), and once licensing is back and has purged too, operations.md's check finds no
// row of the tenant.
func TestABuyerCannotActivateADeletedTenantsLicenseThatLicensingStillHolds(t *testing.T) {
	t.Parallel()
	// Cached copies live a minute whatever the caches' liveness: past the default second,
	// a copy is served only while heartbeats keep coming every few hundred milliseconds,
	// which a loaded machine may miss, and the activations below need theirs.
	s := startStack(t, map[string]string{"MULTI_TENANT": "true", "LICENSE_CACHE_TTL": "1m"})
	t.Cleanup(s.Stop)
	conn := dbConn(t, s)
	tn, id := hostedTenant(t, s)
	p := product("orphan")
	key := issueLicense(t, tn, map[string]any{"tier": "pro", "product_id": p, "issued_to": "x@example.com", "max_activations": 10})
	buyer := anon(t, s)
	seat(t, buyer, key, "a")
	// A license with no seat, which activations then holds in its cache (a deactivation
	// looks the license up). The purge's seat.deactivated drops key from the caches, so
	// this one is the license sure to be held here when licensing is down. Its lookup
	// waits past the window in which the gateway names a key it just wrote on its calls,
	// which has activations drop it and ask licensing again.
	idle := issueLicense(t, tn, map[string]any{"tier": "pro", "product_id": p, "issued_to": "y@example.com"})
	time.Sleep(licensecache.DefaultTTL + 100*time.Millisecond)
	buyer.Post("/v1/deactivate-license", map[string]string{"key": idle, "token": "act_" + strings.Repeat("0", 43)}).ExpectBody(t, `{"deactivated":false}`)
	s.Service("licensing").Stop()
	admin(t, s).Delete("/v1/operator/tenants/"+id, nil).Expect(t, 200)
	eventually(t, "activations purged the tenant", func() bool { return tenantRows(t, conn, id)[`"activations"."seats"`] == 0 })
	buyer.Post("/v1/activate-license", map[string]string{"key": idle, "instance_id": "b"}).ExpectError(t, 404, "License key not found")
	// key left the cache with its seat, or is about to: with licensing down its activation
	// is refused as not found, or as unavailable. Either way no seat is made (the check
	// for the tenant's rows below).
	if r := buyer.Post("/v1/activate-license", map[string]string{"key": key, "instance_id": "b"}); r.Status != 503 {
		r.ExpectError(t, 404, "License key not found")
	} else {
		r.ExpectError(t, 503, "Licensing service unavailable, retry")
	}
	if err := s.RestartService(t.Context(), "licensing"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "no row of the tenant left", func() bool { return len(tenantRows(t, conn, id)) == 0 })
	buyer.Post("/v1/activate-license", map[string]string{"key": key, "instance_id": "c"}).ExpectError(t, 404, "License key not found")
	if rows := tenantRows(t, conn, id); len(rows) != 0 {
		t.Fatalf("rows of the deleted tenant: %v", rows)
	}
}

// Tenants deleted while their buyers activate (through two gateways, on two activations
// replicas), their storefront issues (internal calls to two licensing replicas) and they
// import: once every service has settled (the second purge included), operations.md's
// check finds no row of any of them.
func TestDeletingTenantsUnderConcurrentWritesAcrossReplicasLeavesNoRow(t *testing.T) {
	t.Parallel()
	s := startStack(t, map[string]string{"MULTI_TENANT": "true"})
	t.Cleanup(s.Stop)
	conn := dbConn(t, s)
	activations2, err := s.StartServiceReplica(t.Context(), "activations", nil)
	if err != nil {
		t.Fatal(err)
	}
	licensing2, err := s.StartServiceReplica(t.Context(), "licensing", nil)
	if err != nil {
		t.Fatal(err)
	}
	gateway2, err := s.StartGateway(t.Context(), 0, map[string]string{"ACTIVATIONS_ADDR": activations2, "LICENSING_ADDR": licensing2})
	if err != nil {
		t.Fatal(err)
	}
	gateways := []string{s.URL, gateway2}
	issuers := []licensingv1.LicensingInternalServiceClient{internalLicensing(t, s.Env("LICENSING_ADDR")), internalLicensing(t, licensing2)}
	past := time.Now().Add(-48 * time.Hour).UTC().Format(time.RFC3339)

	var deleted []string
	var afterDelete atomic.Int64 // writes answered 200 after the delete answered
	for round := range 6 {
		tn, id := hostedTenant(t, s)
		prod := product(fmt.Sprint("race", round))
		keys := []string{
			issueLicense(t, tn, map[string]any{"tier": "pro", "product_id": prod, "issued_to": "x@example.com"}),
			issueLicense(t, tn, map[string]any{"tier": "pro", "product_id": prod, "issued_to": "y@example.com"}),
		}
		var stop, gone atomic.Bool
		var wg sync.WaitGroup
		ok := func() {
			if gone.Load() {
				afterDelete.Add(1)
			}
		}
		for w := range 4 {
			wg.Go(func() {
				buyer := newClient(t, gateways[w%2], "")
				for i := 0; !stop.Load(); i++ {
					r, err := buyer.Try("POST", "/v1/activate-license", map[string]any{"key": keys[i%2], "instance_id": fmt.Sprintf("i%d-%d", w, i)})
					if err == nil && r.Status == 200 {
						ok()
					}
				}
			})
		}
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				if _, err := issueFor(s, issuers[i%2], id, prod); err == nil {
					ok()
				}
			}
		})
		wg.Go(func() {
			vendor := newClient(t, gateways[round%2], tn.Token)
			for i := 0; !stop.Load() && i < 15; i++ {
				r, err := vendor.Try("POST", "/v1/licenses/import", map[string]any{"licenses": []map[string]any{{
					"key": fmt.Sprintf("IMPORTED-%s-%d", id, i), "tier": "pro", "product_id": prod,
					"issued_to": "z@example.com", "expires_at": past}}})
				if err == nil && r.Status == 200 {
					ok()
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
		time.Sleep(time.Second)
		admin(t, s).Delete("/v1/operator/tenants/"+id, nil).Expect(t, 200)
		gone.Store(true)
		time.Sleep(2 * time.Second)
		stop.Store(true)
		wg.Wait()
		deleted = append(deleted, id)
	}
	t.Logf("writes that succeeded after their tenant's delete answered: %d", afterDelete.Load())
	// Settled: every service has purged each tenant twice, the second time once the
	// deletion was tenantpurge.SecondPurgeAt old.
	time.Sleep(tenantpurge.SecondPurgeAt)
	for _, id := range deleted {
		eventually(t, "no row of "+id+" left", func() bool { return len(tenantRows(t, conn, id)) == 0 })
	}
}

// A deleted tenant's products stay claimed by no tenant. A product id is what an
// installed app checks a license, a lease or a release manifest against, under the
// installation's signing key that every tenant's licenses share: freed, the tenant that
// claimed it next could issue licenses and sign releases that the deleted tenant's apps,
// still installed, accept. Tenants racing for it right after the purge, through two
// gateways on two licensing replicas, in any spelling, all get the refusal another
// tenant's product gets, and the deleted tenant keeps no row.
func TestADeletedTenantsProductsStayClaimed(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	gateways := []string{s.URL, secondGateway(t, s, "licensing", "LICENSING_ADDR")}
	gone, goneID := hostedTenant(t, s)
	prod := product("deleted-vendor")
	issueLicense(t, gone, lic(prod))
	registerRelease(t, gone, rel(prod, "1.0.0"))
	admin(t, s).Delete("/v1/operator/tenants/"+goneID, nil).Expect(t, 200)
	conn := dbConn(t, s)
	eventually(t, "the deleted tenant purged everywhere", func() bool { return len(tenantRows(t, conn, goneID)) == 0 })

	const owned = `{"error":"product_id is owned by a different tenant"}`
	spellings := []string{prod, strings.ToUpper(prod), " " + prod + " "}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var answers []string
	for i := range 4 {
		token := newTenant(t, s).Token
		for j, spelling := range spellings {
			c := newClient(t, gateways[(i+j)%2], token)
			wg.Go(func() {
				for _, try := range []struct {
					path string
					body map[string]any
				}{{"/v1/issue-license", lic(spelling)}, {"/v1/register-release", rel(spelling, fmt.Sprint("2.0.", i))}} {
					r, err := c.Try("POST", try.path, try.body)
					mu.Lock()
					if err != nil {
						answers = append(answers, err.Error())
					} else {
						answers = append(answers, fmt.Sprintf("%s %d %s", try.path, r.Status, r.Body))
					}
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	for _, a := range answers {
		if !strings.HasSuffix(a, " 403 "+owned) {
			t.Errorf("a claim of the deleted tenant's product: %s, want 403 %s", a, owned)
		}
	}
	other := newTenant(t, s)
	other.Do("PUT", "/v1/products/"+prod+"/policies/pro", map[string]any{}).ExpectError(t, 404, errProductUnknown)
	item := importItem(prod, 1, "HEIR-"+prod)
	other.Post("/v1/licenses/import", importBody([]map[string]any{item}, "skip")).Expect(t, 200).
		ExpectBody(t, `{"imported":0,"unchanged":0,"skipped":0,"invalid":1,"results":[`+
			`{"index":0,"key":"HEIR-`+prod+`","result":"invalid","error":"product_id is owned by a different tenant"}]}`)
	if rows := tenantRows(t, conn, goneID); len(rows) != 0 {
		t.Fatalf("rows of the deleted tenant: %v", rows)
	}
}
