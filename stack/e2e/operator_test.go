package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
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
		{"DELETE", "/v1/operator/tenants/t_x"},
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
	productID := product("suspend")
	key := issueLicense(t, tenant, map[string]any{"tier": "pro", "product_id": productID, "issued_to": "holder@example.com", "max_activations": 3})
	registerRelease(t, tenant, rel(productID, "2.0.0"))
	app := anon(t, s)
	laptop := seat(t, app, key, "laptop-1")
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
		// The tenant's own side of releases and leases stops with the rest.
		wg.Go(func() {
			newClient(t, s.URL, c.Token).Post("/v1/register-release", rel(productID, "3.0.0")).ExpectError(t, 403, "Tenant is suspended")
		})
		wg.Go(func() {
			newClient(t, s.URL, c.Token).Post("/v1/lease-keys/rotate", map[string]any{}).ExpectError(t, 403, "Tenant is suspended")
		})
	}
	wg.Wait()
	if p := web.get("/console/licenses"); p.Status != 403 || !strings.Contains(p.Body, "Tenant is suspended") {
		t.Fatalf("the console of a suspended tenant: %d", p.Status)
	}
	// Its apps' public checks keep working (docs/operations.md): verify, validate, activate,
	// check-update, leases (and the keys that verify them), the portal.
	if v := app.Post("/v1/verify-license", map[string]string{"key": key}).Expect(t, 200).JSON(t); v["valid"] != true {
		t.Fatalf("verify-license of a suspended tenant's license: %v", v)
	}
	if !validate(t, app, key, "laptop-1") {
		t.Fatal("validate-license refused a seat of a suspended tenant's license")
	}
	seat(t, app, key, "laptop-2")
	if v := update(t, app, check(key, productID, "1.0.0")); v != "2.0.0" {
		t.Fatalf("check-update of a suspended tenant's app offered %q, want 2.0.0", v)
	}
	leased := lease(app, map[string]any{"key": key, "token": laptop}).Expect(t, 200).JSON(t)
	if _, _, err := verifyLease(leased["lease"].(string), leaseKeys(t, app, "?tenant_id="+id)); err != nil {
		t.Fatalf("a suspended tenant's lease does not verify with its published keys: %v", err)
	}
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

// tenantRows counts, per table, the rows of tenant in every schema's tables that have a
// tenant_id column: what a deleted tenant must leave none of.
func tenantRows(t *testing.T, conn *pgx.Conn, tenant string) map[string]int {
	t.Helper()
	ctx := context.Background()
	rows, err := conn.Query(ctx, `SELECT c.table_schema, c.table_name FROM information_schema.columns c
		JOIN information_schema.tables t USING (table_schema, table_name)
		WHERE c.column_name = 'tenant_id' AND t.table_type = 'BASE TABLE'
		  AND c.table_schema NOT IN ('pg_catalog', 'information_schema')`)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var schema, table string
		err := r.Scan(&schema, &table)
		return pgx.Identifier{schema, table}.Sanitize(), err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(tables) < 20 {
		t.Fatalf("only %d tables with a tenant_id: %v", len(tables), tables)
	}
	counts := map[string]int{}
	for _, table := range tables {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM `+table+` WHERE tenant_id = $1`, tenant).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			counts[table] = n
		}
	}
	return counts
}

// A deleted tenant leaves no row in any schema, events and webhooks included, even when a
// service was down at that moment; its credentials stop at once; another tenant keeps
// everything.
func TestDeletingATenantForgetsItEverywhereEvenWithAServiceDown(t *testing.T) {
	t.Parallel()
	s := startStack(t, map[string]string{"MULTI_TENANT": "true", "WEBHOOK_ALLOW_PRIVATE_NETWORKS": "true"})
	t.Cleanup(s.Stop)
	receiver := newWebhookReceiver(t)
	populate := func(c *Client, name string) string {
		prod := product("gone-" + name)
		key := issueLicense(t, c, map[string]any{"tier": "pro", "product_id": prod, "issued_to": "holder@example.com", "max_activations": 3})
		seat(t, anon(t, s), key, "laptop")
		c.Post("/v1/register-release", map[string]any{"product_id": prod, "version": "1.0.0", "platform": "linux",
			"artifact_url": "https://example.com/a", "checksum": "sha256:00"}).Expect(t, 200)
		c.Post("/v1/webhook-endpoints", map[string]any{"url": receiver.URL + "/hook", "events": []string{"*"}}).Expect(t, 200)
		c.Post("/v1/storefront/webhooks", map[string]string{"provider": "stripe"}).Expect(t, 200)
		putPolicy(t, c, prod, "pro", map[string]any{"lease_ttl_seconds": 600})
		createAPIKey(t, c, "backend", "full")
		web := newWebClient(t, s)
		web.signIn(c.Token)
		portalPath(t, web, key)
		c.Post("/v1/admin/update-notes", map[string]any{"key": key, "notes": "n"}).Expect(t, 200)
		return key
	}
	gone, goneID := hostedTenant(t, s)
	kept, keptID := hostedTenant(t, s)
	goneKey := populate(gone, "a")
	keptKey := populate(kept, "b")
	extra, _ := createAPIKey(t, gone, "other", "read")

	conn, err := pgx.Connect(context.Background(), s.Env("DATABASE_URL"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	// Every service holds rows of the tenant (the event log once it caught up).
	eventually(t, "the tenant's rows in every schema", func() bool {
		schemas := map[string]bool{}
		for table := range tenantRows(t, conn, goneID) {
			schemas[strings.Split(table, ".")[0]] = true
		}
		return len(schemas) == 6
	})

	s.Service("activations").Stop()
	admin(t, s).Delete("/v1/operator/tenants/"+goneID, nil).ExpectBody(t, `{"tenant_id":"`+goneID+`","deleted":true}`)
	admin(t, s).Delete("/v1/operator/tenants/"+goneID, nil).ExpectError(t, 404, "Tenant not found")
	admin(t, s).Get("/v1/operator/tenants/"+goneID).ExpectError(t, 404, "Tenant not found")
	// Its credentials stop at once.
	gone.Get("/v1/list-licenses").ExpectError(t, 403, "Unauthorized")
	extra.Get("/v1/list-licenses").ExpectError(t, 403, "Unauthorized")

	if err := s.RestartService(t.Context(), "activations"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "no row of the deleted tenant in any schema", func() bool {
		return len(tenantRows(t, conn, goneID)) == 0
	})
	r := anon(t, s).Post("/v1/verify-license", map[string]string{"key": goneKey})
	r.Expect(t, 404).ExpectBody(t, `{"valid":false,"error":"License key not found"}`)
	// The other tenant keeps all it had.
	kept.Get("/v1/list-licenses").Expect(t, 200)
	if !validate(t, anon(t, s), keptKey, "laptop") {
		t.Fatal("the other tenant's seat is gone")
	}
	left := tenantRows(t, conn, keptID)
	for _, table := range []string{`"licensing"."licenses"`, `"activations"."seats"`, `"releases"."releases"`, `"events"."webhook_endpoints"`, `"storefront"."webhooks"`, `"billing"."api_keys"`} {
		if left[table] == 0 {
			t.Errorf("the other tenant lost its rows of %s (has %v)", table, left)
		}
	}
}
