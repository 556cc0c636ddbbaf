package e2e

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"
)

// readScopeFixture is one hosted tenant with an object behind every path parameter of the
// OpenAPI document, each made by the owner; the creates that honour the Idempotency-Key
// were sent with one (idem), so a read key can be caught replaying them.
type readScopeFixture struct {
	owner, reader *Client
	tenant        string
	params        map[string]string // "prefix {param}" -> value; see path
	bodies        map[string]any    // "METHOD path" -> a body the owner could send
	idem          map[string]string // "METHOD path" -> the Idempotency-Key the owner used
}

func newReadScopeFixture(t *testing.T) *readScopeFixture {
	t.Helper()
	s := hosted(t)
	owner, tenant := hostedTenant(t, s)
	reader, _ := createAPIKey(t, owner, "support", "read")
	f := &readScopeFixture{owner: owner, reader: reader, tenant: tenant, params: map[string]string{}, idem: map[string]string{}}
	p := product("read-scope")
	hook := "https://192.0.2.10/read-scope"
	f.bodies = map[string]any{
		"POST /v1/issue-license":                      lic(p, "max_activations", 3, "limits", map[string]any{"users": 5}),
		"POST /v1/register-release":                   map[string]any{"product_id": p, "version": "1.0.0", "artifact_url": "https://example.com/a.zip"},
		"POST /v1/api-keys":                           map[string]any{"name": "target", "scope": "full"},
		"POST /v1/webhook-endpoints":                  map[string]any{"url": hook, "events": []string{"release.unpublished"}},
		"POST /v1/storefront/webhooks":                map[string]any{"provider": "stripe"},
		"POST /v1/storefront/mappings":                map[string]any{"service_ref": "price_read_scope", "product_id": p, "tier": "pro", "duration_days": 30},
		"POST /v1/lease-keys/rotate":                  map[string]any{"retire_after_seconds": 3600},
		"POST /v1/webhook-endpoints/{id}/roll-secret": map[string]any{"expire_old_after_seconds": 60},
	}
	// The keyed creates first, each with its Idempotency-Key: their answers name the
	// objects the other routes are called on.
	create := func(route string) map[string]any {
		t.Helper()
		method, path, _ := strings.Cut(route, " ")
		f.idem[route] = uniq("read-scope-")
		return owner.Do(method, f.path(path), f.bodies[route], "Idempotency-Key", f.idem[route]).Expect(t, 200).JSON(t)
	}
	key := fmt.Sprint(create("POST /v1/issue-license")["key"])
	f.params["key"] = key
	f.params["product_id"] = p
	f.params["tier"] = "pro"
	releaseID := create("POST /v1/register-release")["id"]
	f.params["/v1/release/ id"] = fmt.Sprint(releaseID)
	f.params["/v1/api-keys/ id"] = fmt.Sprint(create("POST /v1/api-keys")["id"])
	f.params["/v1/webhook-endpoints/ id"] = fmt.Sprint(create("POST /v1/webhook-endpoints")["id"])
	f.params["webhook_id"] = fmt.Sprint(create("POST /v1/storefront/webhooks")["webhook_id"])
	f.params["/v1/storefront/mappings/ id"] = fmt.Sprint(create("POST /v1/storefront/mappings")["id"])
	create("POST /v1/lease-keys/rotate")
	create("POST /v1/webhook-endpoints/{id}/roll-secret")
	owner.Post("/v1/activate-license", map[string]string{"key": key, "instance_id": "laptop-1"}).Expect(t, 200)
	owner.Do(http.MethodPut, f.path("/v1/products/{product_id}/policies/{tier}"), map[string]any{"floating": true}).Expect(t, 200)
	owner.Post("/v1/storefront/mail-settings", map[string]any{"sender_name": "Acme"}).Expect(t, 200)
	events := eventsOf(t, owner, key, 2)
	f.params["event_id"] = events[0].ID
	f.params["/v1/events/ id"] = events[0].ID
	endpoint := f.params["/v1/webhook-endpoints/ id"]
	for route, body := range map[string]any{
		"POST /v1/admin/deactivate-by-instance-id":         map[string]any{"key": key, "instance_id": "laptop-1"},
		"POST /v1/admin/reissue-token":                     map[string]any{"key": key, "instance_id": "laptop-1"},
		"POST /v1/admin/reset-usage":                       map[string]any{"key": key},
		"POST /v1/admin/update-license-terms":              map[string]any{"key": key, "max_activations": 9},
		"POST /v1/admin/update-notes":                      map[string]any{"key": key, "notes": "changed"},
		"POST /v1/billing/checkout":                        map[string]any{"plan": "pro"},
		"DELETE /v1/delete-license":                        map[string]any{"key": key},
		"POST /v1/events/redact":                           map[string]any{"license_key": key},
		"POST /v1/events/{event_id}/redeliver":             map[string]any{"endpoint_id": endpoint},
		"POST /v1/licenses/import":                         map[string]any{"licenses": []any{map[string]any{"product_id": p, "tier": "pro", "issued_to": "imported@example.com"}}},
		"PUT /v1/products/{product_id}/policies/{tier}":    map[string]any{"floating": false, "lease_ttl_seconds": 60},
		"POST /v1/revoke-license":                          map[string]any{"key": key, "revoked": true},
		"POST /v1/storefront/mail-settings":                map[string]any{"sender_name": "Mallory"},
		"POST /v1/storefront/webhooks/{webhook_id}/secret": map[string]any{"signing_secret": "whsec_read_scope"},
		"POST /v1/unpublish-release":                       map[string]any{"id": releaseID},
		"POST /v1/webhook-endpoints/{id}/update":           map[string]any{"enabled": false, "description": "changed"},
	} {
		f.bodies[route] = body
	}
	return f
}

// path fills a route's parameters with the fixture's objects: {id} by the route's prefix.
func (f *readScopeFixture) path(route string) string {
	return pathParam.ReplaceAllStringFunc(route, func(m string) string {
		name := strings.Trim(m, "{}")
		if name == "id" {
			prefix := route[:strings.Index(route, m)]
			for k, v := range f.params {
				if p, ok := strings.CutSuffix(k, " id"); ok && strings.HasPrefix(prefix, p) {
					return url.PathEscape(v)
				}
			}
		}
		if v, ok := f.params[name]; ok {
			return url.PathEscape(v)
		}
		return "unknown"
	})
}

var lastUsedAt = regexp.MustCompile(`"last_used_at":("[^"]*"|null)`)

// state is everything the owner can read, route by route: every GET of the document with
// the fixture's objects, and the tenant's public lease keys. last_used_at is left out: a
// read moves it (at most once a minute), and that is not a write.
func (f *readScopeFixture) state(t *testing.T, routes []tenantRoute) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, r := range routes {
		if r.method != http.MethodGet {
			continue
		}
		path := f.path(r.path)
		if r.path == "/v1/events" {
			path += "?limit=1000"
		}
		resp := f.owner.Get(path)
		if resp.Status != 200 {
			t.Fatalf("the owner's GET %s: %d %s", path, resp.Status, resp.Body)
		}
		out[r.path] = lastUsedAt.ReplaceAllString(string(resp.Body), `"last_used_at":…`)
	}
	lk := "/v1/lease-keys?tenant_id=" + f.tenant
	out[lk] = string(f.owner.Get(lk).Expect(t, 200).Body)
	return out
}

// settled is the state once the events of the fixture's writes have all been logged: the
// same twice in a row.
func (f *readScopeFixture) settled(t *testing.T, routes []tenantRoute) map[string]string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	prev := f.state(t, routes)
	for {
		time.Sleep(time.Second)
		cur := f.state(t, routes)
		if fmt.Sprint(cur) == fmt.Sprint(prev) {
			return cur
		}
		if time.Now().After(deadline) {
			t.Fatal("the tenant's state did not settle in 60 s")
		}
		prev = cur
	}
}

// TestAReadKeyChangesNothingOnAnyRoute sends every writing route of the OpenAPI document,
// with real objects in its path and a body the owner could send, through a read key, and
// the keyed creates again with the owner's own Idempotency-Key: each is refused with 403
// Unauthorized (addendum §13), no stored answer is replayed, and everything the owner can
// read is the same afterwards. Every GET answers the read key as it answers the owner.
func TestAReadKeyChangesNothingOnAnyRoute(t *testing.T) {
	t.Parallel()
	f := newReadScopeFixture(t)
	routes := tenantRoutes(t, hosted(t))
	before := f.settled(t, routes)
	writes := 0
	for _, r := range routes {
		route := r.method + " " + r.path
		path := f.path(r.path)
		if r.method == http.MethodGet {
			if r.path == "/v1/events" {
				path += "?limit=1000"
			}
			got := lastUsedAt.ReplaceAllString(string(f.reader.Get(path).Expect(t, 200).Body), `"last_used_at":…`)
			if got != before[r.path] {
				t.Errorf("GET %s: the read key reads %s, the owner %s", path, got, before[r.path])
			}
			continue
		}
		writes++
		body := f.bodies[route]
		if body == nil {
			body = map[string]any{}
		}
		var headers []string
		if k, ok := f.idem[route]; ok {
			headers = []string{"Idempotency-Key", k}
		}
		resp := f.reader.Do(r.method, path, body, headers...)
		if resp.Status != 403 || string(resp.Body) != `{"error":"Unauthorized"}` {
			t.Errorf("%s %s with a read key (Idempotency-Key %v): %d %s, want 403 Unauthorized", r.method, path, headers, resp.Status, resp.Body)
		}
	}
	if writes < 30 || len(f.idem) < 8 {
		t.Fatalf("only %d writing routes, %d replays checked", writes, len(f.idem))
	}
	after := f.state(t, routes)
	for route, was := range before {
		if after[route] != was {
			t.Errorf("GET %s changed under a read key:\nbefore %s\nafter  %s", route, was, after[route])
		}
	}
}

// consoleForms are the console's form actions (console.go's POST routes but sign-in),
// with the fixture's objects in their paths and the fields each form sends.
func (f *readScopeFixture) consoleForms() map[string]url.Values {
	key := "/console/licenses/" + url.PathEscape(f.params["key"])
	endpoint := "/console/webhooks/" + f.params["/v1/webhook-endpoints/ id"]
	hook := "/console/storefront/webhooks/" + f.params["webhook_id"]
	seat := url.Values{"instance_id": {"laptop-1"}, "confirm": {"yes"}}
	return map[string]url.Values{
		"/console/logout":         {},
		"/console/licenses":       {"tier": {"pro"}, "product_id": {f.params["product_id"]}, "issued_to": {"console@example.com"}},
		key + "/revoke":           {"revoked": {"true"}, "confirm": {"yes"}},
		key + "/delete":           {"confirm": {"yes"}},
		key + "/terms":            {"max_activations": {"9"}},
		key + "/notes":            {"notes": {"changed"}},
		key + "/seats/deactivate": seat,
		key + "/seats/reissue":    seat,
		key + "/usage/reset":      {"confirm": {"yes"}},
		key + "/portal/reset":     {},
		"/console/releases":       {"product_id": {f.params["product_id"]}, "version": {"2.0.0"}, "artifact_url": {"https://example.com/b.zip"}},
		"/console/releases/" + f.params["/v1/release/ id"] + "/unpublish": {},
		"/console/leases/rotate":                                           {"retire_after_seconds": {"3600"}},
		"/console/products/" + f.params["product_id"] + "/policies":        {"tier": {"pro"}, "lease_ttl_seconds": {"60"}},
		"/console/products/" + f.params["product_id"] + "/policies/delete": {"tier": {"pro"}},
		"/console/billing/checkout":                                        {"plan": {"pro"}},
		"/console/storefront/webhooks":                                     {"provider": {"stripe"}},
		hook + "/secret":                                                   {"signing_secret": {"whsec_console"}},
		hook + "/disable":                                                  {},
		"/console/storefront/mappings":                                     {"product_id": {f.params["product_id"]}, "tier": {"pro"}, "service_ref": {"price_console"}},
		"/console/storefront/mappings/" + f.params["/v1/storefront/mappings/ id"] + "/delete": {},
		"/console/events/" + f.params["event_id"] + "/redeliver":                              {"endpoint_id": {f.params["/v1/webhook-endpoints/ id"]}},
		"/console/webhooks":       {"url": {"https://192.0.2.10/console"}, "events": {"license."}},
		endpoint + "/update":      {"description": {"changed"}},
		endpoint + "/ping":        {},
		endpoint + "/enable":      {},
		endpoint + "/disable":     {},
		endpoint + "/roll-secret": {},
		endpoint + "/delete":      {"confirm": {"yes"}},
		endpoint + "/redeliver":   {"event_id": {f.params["event_id"]}},
		"/console/api-keys":       {"name": {"console"}, "scope": {"full"}},
		"/console/api-keys/" + f.params["/v1/api-keys/ id"] + "/delete": {},
		"/console/settings/rotate-key":                                  {},
		"/console/settings/password":                                    {"password": {"correct horse battery"}, "confirm": {"correct horse battery"}},
		"/console/settings/portal":                                      {"enabled": {"false"}},
		"/console/settings/mail":                                        {"sender_name": {"Mallory"}},
	}
}

// TestAReadKeyOpensNoConsolePage: a read key cannot sign in to the console (addendum
// §13), neither through the sign-in form nor by being sent as the session cookie itself
// (whose CSRF token anyone holding the value can derive): every page sends it to sign-in,
// and every form action, forged with that token, is refused and changes nothing.
func TestAReadKeyOpensNoConsolePage(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	f := newReadScopeFixture(t)
	routes := tenantRoutes(t, s)
	before := f.settled(t, routes)

	login := newWebClient(t, s)
	form := login.get("/console/login").expect(t, 200, "Sign in")
	login.post("/console/login", url.Values{"csrf": {form.csrf(t)}, "mode": {"key"}, "api_key": {f.reader.Token}}).expect(t, 401, "Invalid credentials")

	c := newWebClient(t, s)
	u, _ := url.Parse(s.URL + "/console/")
	toLogin := func(method, path string, p *page) {
		t.Helper()
		// Set again for the next request: a refused one clears it.
		defer c.http.Jar.SetCookies(u, []*http.Cookie{{Name: "kh_session", Value: f.reader.Token, Path: "/console"}})
		if p.Status != http.StatusSeeOther || !strings.HasPrefix(p.Header.Get("Location"), "/console/login") {
			t.Errorf("%s %s with a read key as the session: %d to %q, want a redirect to sign-in: %.300s", method, path, p.Status, p.Header.Get("Location"), p.Body)
		}
	}
	c.http.Jar.SetCookies(u, []*http.Cookie{{Name: "kh_session", Value: f.reader.Token, Path: "/console"}})
	for _, path := range []string{"/console/", "/console/licenses", "/console/licenses/" + url.PathEscape(f.params["key"]), "/console/api-keys", "/console/settings", "/console/webhooks", "/console/storefront", "/console/export"} {
		toLogin(http.MethodGet, path, c.get(path))
	}
	csrf := derive(f.reader.Token, "keyhouse-console-csrf-v1")
	for path, fields := range f.consoleForms() {
		fields.Set("csrf", csrf)
		toLogin(http.MethodPost, path, c.post(path, fields))
	}
	after := f.state(t, routes)
	for route, was := range before {
		if after[route] != was {
			t.Errorf("GET %s changed under a read key in the console:\nbefore %s\nafter  %s", route, was, after[route])
		}
	}
}

// derive is the console's CSRF derivation (console/session.go): HMAC-SHA256 of label
// under the session token, base64url. Anyone holding the token can compute it.
func derive(secret, label string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(label))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}
