package e2e

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// The support desk finds a tenant by its email, in any case; an email no tenant has
// lists none; the filter keeps its place among limit and starting_after.
func TestOperatorFindsATenantByEmail(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	n := time.Now().UnixNano()
	email := fmt.Sprintf("Support.Desk-%d@Example.com", n)
	created := admin(t, s).Post("/v1/operator/tenants", map[string]string{"name": "Desk", "email": email}).Expect(t, 200).JSON(t)
	hostedTenant(t, s) // another tenant, which the filter must leave out

	type page struct {
		Tenants []struct {
			TenantID string `json:"tenant_id"`
			Email    string `json:"email"`
		} `json:"tenants"`
		HasMore bool `json:"has_more"`
	}
	list := func(query string) page {
		t.Helper()
		var p page
		if err := json.Unmarshal(admin(t, s).Get("/v1/operator/tenants?"+query).Expect(t, 200).Body, &p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, spelling := range []string{email, strings.ToLower(email), strings.ToUpper(email)} {
		got := list("limit=1000&email=" + strings.ReplaceAll(spelling, "+", "%2B"))
		if len(got.Tenants) != 1 || got.Tenants[0].TenantID != created["tenant_id"] || got.Tenants[0].Email != email || got.HasMore {
			t.Fatalf("email=%s: %+v", spelling, got)
		}
	}
	if got := list(fmt.Sprintf("email=nobody-%d@example.com", n)); len(got.Tenants) != 0 || got.HasMore {
		t.Fatalf("an email no tenant has: %+v", got)
	}
	if got := list(fmt.Sprintf("email=%s&starting_after=%s", email, created["tenant_id"])); len(got.Tenants) != 0 {
		t.Fatalf("the page after the only match: %+v", got)
	}
}

// Every operator change to a tenant is one INFO line in billing's log, naming what and
// which tenant, never the email or the key; a refused create logs nothing.
func TestOperatorActionsAreLogged(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	a := admin(t, s)
	email := fmt.Sprintf("audit-%d@example.com", time.Now().UnixNano())
	created := a.Post("/v1/operator/tenants", map[string]string{"name": "Audit", "email": email}).Expect(t, 200).JSON(t)
	id := created["tenant_id"].(string)
	a.Post("/v1/operator/tenants", map[string]string{"name": "Again", "email": strings.ToUpper(email)}).
		ExpectError(t, 409, "A tenant with this email already exists")
	a.Post("/v1/operator/tenants/"+id+"/suspend", nil).Expect(t, 200)
	a.Post("/v1/operator/tenants/"+id+"/resume", nil).Expect(t, 200)
	a.Delete("/v1/operator/tenants/"+id, nil).Expect(t, 200)

	want := []string{"create", "suspend", "resume", "delete"}
	var actions []string
	eventually(t, "billing's audit lines", func() bool {
		actions = nil
		for _, l := range logLines(t, s.LogPath("billing")) {
			if l["msg"] != "operator action" || l["tenant_id"] != id {
				continue
			}
			line, _ := json.Marshal(l)
			if l["level"] != "INFO" || l["time"] == nil || strings.Contains(string(line), "@") || strings.Contains(string(line), created["api_key"].(string)) {
				t.Fatalf("audit line %s", line)
			}
			actions = append(actions, l["action"].(string))
		}
		return len(actions) >= len(want)
	})
	if !slices.Equal(actions, want) {
		t.Fatalf("audit actions %v, want %v", actions, want)
	}
}

// A policy's tier and product_id are capped as a license's (200 characters): a 201
// character tier, which no license could carry, is refused naming the field; a 200
// character one is taken, and a license of that tier follows it.
func TestLeasePolicyTierCapIsALicensesCap(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	tn, _ := hostedTenant(t, s)
	prod := product("tier-cap")
	tn.Do("PUT", "/v1/products/"+prod+"/policies/"+strings.Repeat("t", 201), map[string]any{"lease_ttl_seconds": 600}).
		ExpectBody(t, `{"error":"tier must be at most 200 characters"}`)
	tn.Do("PUT", "/v1/products/"+strings.Repeat("p", 201)+"/policies/pro", map[string]any{"lease_ttl_seconds": 600}).
		ExpectBody(t, `{"error":"product_id must be at most 200 characters"}`)
	tier := strings.Repeat("t", 200)
	tn.Do("PUT", "/v1/products/"+prod+"/policies/"+tier, map[string]any{"lease_ttl_seconds": 600}).Expect(t, 200)
	key := issueLicense(t, tn, map[string]any{"tier": tier, "product_id": prod, "issued_to": "cap@example.com"})
	c := anon(t, s)
	tok := seat(t, c, key, "m")
	l := lease(c, map[string]any{"key": key, "token": tok}).Expect(t, 200).JSON(t)
	expires, err := time.Parse(time.RFC3339, l["expires_at"].(string))
	if err != nil || time.Until(expires) > 11*time.Minute {
		t.Fatalf("the lease of a 200-character tier did not follow its policy (600 s): %v %v", l, err)
	}
}

// Storefront mappings are bounded at 200 per tenant, also for creates sent at once
// through two gateways over two storefront replicas: exactly the room left is taken, every
// other create is the 400 and stores nothing.
func TestStorefrontMappingsAreBoundedAcrossReplicas(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	tn, _ := hostedTenant(t, s)
	prod := product("mapping-bound")
	const limit, room = 200, 4
	mapping := func(i int) map[string]any {
		return map[string]any{"service_ref": fmt.Sprint("ref-", i), "product_id": prod, "tier": "pro"}
	}
	var c *Client
	for i := range limit - room {
		if i%100 == 0 { // the Admin-Info tier counts per client address
			c = newClient(t, s.URL, tn.Token)
		}
		c.Post("/v1/storefront/mappings", mapping(i)).Expect(t, 200)
	}
	second := secondGateway(t, s, "storefront", "STOREFRONT_ADDR")
	const creates = 12
	const refusal = `{"error":"A tenant may have at most 200 storefront mappings: delete one first"}`
	answers := postAtOnce(t, []string{s.URL, second}, tn.Token, creates, "/v1/storefront/mappings",
		func(i int) any { return mapping(limit + i) })
	stored := acceptedOrRefused(t, answers, refusal)
	var listed struct {
		Mappings []struct {
			ID int `json:"id"`
		} `json:"mappings"`
	}
	if err := json.Unmarshal(tn.Get("/v1/storefront/mappings").Expect(t, 200).Body, &listed); err != nil {
		t.Fatal(err)
	}
	if stored != room || len(listed.Mappings) != limit {
		t.Fatalf("%d of %d concurrent creates stored, %d mappings listed; want %d and %d", stored, creates, len(listed.Mappings), room, limit)
	}
	// Deleting one makes room for one.
	tn.Delete(fmt.Sprint("/v1/storefront/mappings/", listed.Mappings[0].ID), nil).Expect(t, 200)
	tn.Post("/v1/storefront/mappings", mapping(0)).Expect(t, 200)
	tn.Post("/v1/storefront/mappings", mapping(-1)).ExpectBody(t, refusal)
}
