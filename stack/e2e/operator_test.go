package e2e

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
)

// operatorTenantFields is the order of a tenant in the operator routes' answers.
const operatorTenantFields = "tenant_id,name,email,status,plan,subscription_status,licenses_used,created_at,suspended_at"

type operatorTenantPage struct {
	Tenants []map[string]any `json:"tenants"`
	HasMore bool             `json:"has_more"`
}

func TestOperatorTenantRoutesAreHostedOnlyAndAdminOnly(t *testing.T) {
	t.Parallel()
	routes := []struct{ method, path string }{
		{"GET", "/v1/operator/tenants"},
		{"GET", "/v1/operator/tenants/t_x"},
		{"POST", "/v1/operator/tenants/t_x/suspend"},
		{"POST", "/v1/operator/tenants/t_x/resume"},
	}
	self := admin(t, selfHosted(t))
	s := hosted(t)
	tenant := newTenant(t, s)
	for _, r := range routes {
		self.Do(r.method, r.path, nil).ExpectError(t, 400, "Tenant management is only available for hosted deployments")
		tenant.Do(r.method, r.path, nil).ExpectError(t, 403, "Unauthorized")
		anon(t, s).Do(r.method, r.path, nil).ExpectError(t, 403, "Unauthorized")
		if strings.Contains(r.path, "t_x") {
			admin(t, s).Do(r.method, r.path, nil).ExpectError(t, 404, "Tenant not found")
		}
	}
	c := admin(t, s)
	c.Get("/v1/operator/tenants?limit=0").ExpectError(t, 400, "limit must be an integer between 1 and 1000")
	c.Get("/v1/operator/tenants?limit=x").ExpectError(t, 400, "limit must be an integer between 1 and 1000")
	c.Get("/v1/operator/tenants?starting_after=t_nope").ExpectError(t, 400, "starting_after names no tenant")
}

func TestOperatorListsTenantsPagedWithPlanStatusAndLicensesUsed(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	mine := make([]*Client, 3)
	ids := make([]string, 3)
	for i := range mine {
		mine[i], ids[i] = hostedTenant(t, s)
	}
	for i := range 2 {
		issueLicense(t, mine[1], map[string]any{"tier": "pro", "product_id": product(fmt.Sprint("op", i)), "issued_to": "x@example.com"})
	}
	one := admin(t, s).Get("/v1/operator/tenants/"+ids[1]).Expect(t, 200)
	if got := strings.Join(one.Keys(t), ","); got != operatorTenantFields {
		t.Fatalf("fields %s", got)
	}
	m := one.JSON(t)
	if m["tenant_id"] != ids[1] || m["status"] != "active" || m["plan"] != nil || m["subscription_status"] != "active" ||
		m["licenses_used"] != float64(2) || m["suspended_at"] != nil || m["created_at"] == nil {
		t.Fatalf("tenant %s", one.Body)
	}

	// Two at a time from the start to the end: every tenant once, oldest first, ours in
	// the order they were made (other tests add tenants meanwhile: only after ours).
	var seen []string
	after := ""
	for pages := 0; ; pages++ {
		q := url.Values{"limit": {"2"}}
		if after != "" {
			q.Set("starting_after", after)
		}
		resp := admin(t, s).Get("/v1/operator/tenants?"+q.Encode()).Expect(t, 200)
		if got := strings.Join(resp.Keys(t), ","); got != "tenants,has_more" {
			t.Fatalf("page fields %s", got)
		}
		var p operatorTenantPage
		if err := json.Unmarshal(resp.Body, &p); err != nil || len(p.Tenants) > 2 {
			t.Fatalf("page %s", resp.Body)
		}
		for _, ten := range p.Tenants {
			seen = append(seen, ten["tenant_id"].(string))
		}
		if !p.HasMore {
			break
		}
		if len(p.Tenants) != 2 || pages > 10000 {
			t.Fatalf("a page with has_more holds %d tenants", len(p.Tenants))
		}
		after = seen[len(seen)-1]
	}
	pos := make([]int, len(ids))
	for i, id := range ids {
		pos[i] = slices.Index(seen, id)
		if pos[i] < 0 || slices.Index(seen[pos[i]+1:], id) >= 0 {
			t.Fatalf("tenant %s seen %d times", id, strings.Count(strings.Join(seen, ","), id))
		}
	}
	if !slices.IsSorted(pos) {
		t.Fatalf("our tenants at %v: not oldest first", pos)
	}
}

func TestASuspendedTenantsCredentialsAre403WhileItsAppsKeepWorking(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	tenant, id := hostedTenant(t, s)
	extra, _ := createAPIKey(t, tenant, "backend", "full")
	key := issueLicense(t, tenant, map[string]any{"tier": "pro", "product_id": product("suspend"), "issued_to": "holder@example.com", "max_activations": 3})
	app := anon(t, s)
	seat(t, app, key, "laptop-1")
	web := newWebClient(t, s)
	web.signIn(tenant.Token)
	portal := portalPath(t, web, key)

	resp := admin(t, s).Post("/v1/operator/tenants/"+id+"/suspend", nil).Expect(t, 200)
	if got := strings.Join(resp.Keys(t), ","); got != operatorTenantFields {
		t.Fatalf("fields %s", got)
	}
	if m := resp.JSON(t); m["status"] != "suspended" || m["suspended_at"] == nil {
		t.Fatalf("suspended %s", resp.Body)
	}
	// Again: no change, the first time stays.
	again := admin(t, s).Post("/v1/operator/tenants/"+id+"/suspend", nil).Expect(t, 200).JSON(t)
	if again["suspended_at"] != resp.JSON(t)["suspended_at"] {
		t.Fatalf("suspending twice moved suspended_at: %v", again)
	}
	var wg sync.WaitGroup
	for _, c := range []*Client{tenant, extra} {
		for _, path := range everyService {
			wg.Go(func() { newClient(t, s.URL, c.Token).Get(path).ExpectError(t, 403, "Tenant is suspended") })
		}
		wg.Go(func() {
			newClient(t, s.URL, c.Token).Post("/v1/issue-license", map[string]any{"tier": "pro", "product_id": product("suspend"), "issued_to": "x@example.com"}).
				ExpectError(t, 403, "Tenant is suspended")
		})
	}
	wg.Wait()
	if p := web.get("/console/licenses"); p.Status != 403 || !strings.Contains(p.Body, "Tenant is suspended") {
		t.Fatalf("the console of a suspended tenant: %d", p.Status)
	}
	// Its apps' public checks keep working: verify, validate, activate, the portal.
	app.Post("/v1/verify-license", map[string]string{"key": key}).Expect(t, 200)
	if !validate(t, app, key, "laptop-1") {
		t.Fatal("validate-license refused a seat of a suspended tenant's license")
	}
	seat(t, app, key, "laptop-2")
	newWebClient(t, s).get(portal).expect(t, 200)

	resumed := admin(t, s).Post("/v1/operator/tenants/"+id+"/resume", nil).Expect(t, 200).JSON(t)
	if resumed["status"] != "active" || resumed["suspended_at"] != nil {
		t.Fatalf("resumed %v", resumed)
	}
	for _, c := range []*Client{tenant, extra} {
		for _, path := range everyService {
			newClient(t, s.URL, c.Token).Get(path).Expect(t, 200)
		}
	}
}

func TestTenantEmailsAreUniqueUnderConcurrentSignups(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	email := uniq("founder") + "@example.com"
	const n = 8
	resps := make([]*Response, n)
	var wg sync.WaitGroup
	for i := range n {
		// The same address, in any case, is the same email.
		addr := email
		if i%2 == 1 {
			addr = strings.ToUpper(email[:1]) + email[1:]
		}
		wg.Go(func() {
			resps[i] = admin(t, s).Post("/v1/operator/tenants", map[string]string{"name": fmt.Sprint("Founder ", i), "email": addr})
		})
	}
	wg.Wait()
	created := 0
	for _, r := range resps {
		if r.Status == 200 {
			created++
			continue
		}
		r.ExpectError(t, 409, "A tenant with this email already exists")
	}
	if created != 1 {
		t.Fatalf("%d tenants created with one email, want exactly 1", created)
	}
}
