package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// keyedCreate is a create that honours the Idempotency-Key (addendum §8), beyond
// issue-license, register-release, track-usage and storefront mappings (which their own
// tests cover): body and another body the same key must not be reused with, and how to
// count the objects it made (list answers the ids of what exists, id the id of the
// object one answer shows); remove deletes what a test made, so the shared stack's caps
// (20 API keys, 16 endpoints, one pending storefront webhook) stay free for other tests.
type keyedCreate struct {
	path        string
	body, other map[string]any
	list        func(t *testing.T, c *Client) []string
	id          func(answer map[string]any) string
	remove      func(t *testing.T, c *Client, id string)
}

// listed returns a list route's ids under field, each object's id read with id.
func listed(path, field string, id func(map[string]any) string) func(t *testing.T, c *Client) []string {
	return func(t *testing.T, c *Client) []string {
		t.Helper()
		var out []string
		items, _ := c.Get(path).Expect(t, 200).JSON(t)[field].([]any)
		for _, it := range items {
			out = append(out, id(it.(map[string]any)))
		}
		return out
	}
}

func field(name string) func(map[string]any) string {
	return func(m map[string]any) string { s, _ := m[name].(string); return s }
}

// keyedCreates are the tenant's creates that honour the header. url is a webhook URL the
// mode accepts (a private address is refused hosted); tenant is the hosted tenant's id
// ("" self-hosted), which the public lease-keys list is told hosted.
func keyedCreates(url, tenant string) []keyedCreate {
	leaseKeys := "/v1/lease-keys"
	if tenant != "" {
		leaseKeys += "?tenant_id=" + tenant
	}
	deleteAt := func(prefix string) func(t *testing.T, c *Client, id string) {
		return func(t *testing.T, c *Client, id string) { c.Delete(prefix+id, nil).Expect(t, 200) }
	}
	name := uniq("idem-")
	return []keyedCreate{
		{
			path: "/v1/api-keys", body: map[string]any{"name": name, "scope": "read"}, other: map[string]any{"name": name + "-2", "scope": "read"},
			list: listed("/v1/api-keys", "api_keys", field("id")), id: field("id"), remove: deleteAt("/v1/api-keys/"),
		},
		{
			path:  "/v1/webhook-endpoints",
			body:  map[string]any{"url": url, "events": []string{"release.unpublished"}},
			other: map[string]any{"url": url, "events": []string{"release.published"}},
			list:  listed("/v1/webhook-endpoints", "endpoints", field("id")), id: field("id"), remove: deleteAt("/v1/webhook-endpoints/"),
		},
		{
			path: "/v1/lease-keys/rotate", body: map[string]any{"retire_after_seconds": 3600}, other: map[string]any{"retire_after_seconds": 7200},
			list: listed(leaseKeys, "keys", field("kid")), id: field("kid"), remove: func(*testing.T, *Client, string) {},
		},
		{
			path: "/v1/storefront/webhooks", body: map[string]any{"provider": "stripe"}, other: map[string]any{"provider": " stripe"},
			list: listed("/v1/storefront/webhooks", "webhooks", field("webhook_id")), id: field("webhook_id"),
			remove: func(t *testing.T, c *Client, id string) {
				c.Post("/v1/storefront/webhooks/"+id+"/disable", map[string]any{}).Expect(t, 200)
			},
		},
	}
}

// countOf is how many of ids are id.
func countOf(ids []string, id string) int {
	n := 0
	for _, v := range ids {
		if v == id {
			n++
		}
	}
	return n
}

// postKeyTwice sends the Idempotency-Key header twice, which Client.Do cannot.
func postKeyTwice(t *testing.T, c *Client, path string, body any) *Response {
	t.Helper()
	enc, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, c.Base+path, bytes.NewReader(enc))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.Token)
	req.Header.Set("X-Forwarded-For", c.IP)
	req.Header.Add("Idempotency-Key", uniq("twice-a-"))
	req.Header.Add("Idempotency-Key", uniq("twice-b-"))
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return &Response{Status: resp.StatusCode, Header: resp.Header, Body: data}
}

// checkKeyedCreate holds one create to addendum §8 for client c: a retry with the same
// key and body answers the first answer byte for byte (an API key or a webhook secret
// included) and creates nothing; another body with that key is a 409; a key that cannot
// be honoured is a 400 and creates nothing. alone: c's tenant is this test's alone (a
// fresh hosted tenant), so the count of its objects is exact; the self-hosted tenant is
// shared with the tests running alongside, so only the one answered is counted.
func checkKeyedCreate(t *testing.T, c *Client, cr keyedCreate, alone bool) (first *Response) {
	t.Helper()
	before := len(cr.list(t, c))
	idem := uniq("create-")
	first = c.Do(http.MethodPost, cr.path, cr.body, "Idempotency-Key", idem).Expect(t, 200)
	c.Do(http.MethodPost, cr.path, cr.body, "Idempotency-Key", idem).ExpectBody(t, string(first.Body))
	c.Do(http.MethodPost, cr.path, cr.other, "Idempotency-Key", idem).ExpectError(t, 409, "Idempotency-Key reused with a different request")
	c.Do(http.MethodPost, cr.path, cr.other, "Idempotency-Key", "   ").ExpectError(t, 400, "Idempotency-Key must not be blank")
	c.Do(http.MethodPost, cr.path, cr.other, "Idempotency-Key", strings.Repeat("k", 256)).
		ExpectError(t, 400, "Idempotency-Key must be at most 255 characters")
	postKeyTwice(t, c, cr.path, cr.other).ExpectError(t, 400, "Idempotency-Key must be sent once")
	ids := cr.list(t, c)
	if id := cr.id(first.JSON(t)); countOf(ids, id) != 1 || (alone && len(ids) != before+1) {
		t.Fatalf("%s: %d objects after the retries, %d before; %s listed %d times, want once", cr.path, len(ids), before, id, countOf(ids, id))
	}
	return first
}

// Every create of a tenant's objects honours the Idempotency-Key, in both modes; hosted,
// a key is the tenant's own (another tenant's same key and body creates its own object),
// and the operator's tenant create honours it too.
func TestIdempotencyKeyOnEveryCreate(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"self", "hosted"} {
		t.Run(mode, func(t *testing.T) {
			s := sharedStack(t, mode)
			c, url, tenant := admin(t, s), "http://127.0.0.1:9/idem", ""
			if mode == "hosted" {
				c, tenant = hostedTenant(t, s)
				url = "https://192.0.2.10/idem" // documentation space: nothing it subscribes to fires here
			}
			for _, cr := range keyedCreates(url, tenant) {
				first := checkKeyedCreate(t, c, cr, mode == "hosted").JSON(t)
				switch cr.path {
				case "/v1/api-keys":
					// The key the replay showed is the live key the first answer showed.
					newClient(t, s.URL, first["api_key"].(string)).Get("/v1/api-keys").Expect(t, 200)
				case "/v1/webhook-endpoints":
					if sec, _ := first["secret"].(string); !strings.HasPrefix(sec, "whsec_") {
						t.Fatalf("the first answer shows no secret: %v", first)
					}
				}
				cr.remove(t, c, cr.id(first))
			}
			if mode != "hosted" {
				return
			}
			// Another tenant's same key and body is its own create.
			other := newTenant(t, s)
			idem := uniq("shared-")
			mine := c.Do(http.MethodPost, "/v1/api-keys", map[string]any{"name": "ci", "scope": "read"}, "Idempotency-Key", idem).Expect(t, 200).JSON(t)
			theirs := other.Do(http.MethodPost, "/v1/api-keys", map[string]any{"name": "ci", "scope": "read"}, "Idempotency-Key", idem).Expect(t, 200).JSON(t)
			if mine["id"] == theirs["id"] || mine["api_key"] == theirs["api_key"] {
				t.Fatalf("two tenants' same Idempotency-Key answered the same key: %v, %v", mine, theirs)
			}
			if ids := listed("/v1/api-keys", "api_keys", field("id"))(t, other); len(ids) != 1 || ids[0] != theirs["id"] {
				t.Fatalf("the other tenant's keys: %v, want its own %v", ids, theirs["id"])
			}

			// The operator's tenant create: a retry answers the first tenant, its key included.
			op := admin(t, s)
			n := dbCounter.Add(1)
			body := map[string]any{"name": fmt.Sprintf("Idem %d", n), "email": fmt.Sprintf("idem%d@example.com", n)}
			idem = uniq("tenant-")
			firstTenant := op.Do(http.MethodPost, "/v1/operator/tenants", body, "Idempotency-Key", idem).Expect(t, 200)
			op.Do(http.MethodPost, "/v1/operator/tenants", body, "Idempotency-Key", idem).ExpectBody(t, string(firstTenant.Body))
			body["name"] = "Another"
			op.Do(http.MethodPost, "/v1/operator/tenants", body, "Idempotency-Key", idem).ExpectError(t, 409, "Idempotency-Key reused with a different request")
			newClient(t, s.URL, firstTenant.JSON(t)["api_key"].(string)).Get("/v1/api-keys").Expect(t, 200)
		})
	}
}

// Concurrency is correctness: the same create with the same key sent at once through two
// gateways, each on its own replica of every service that creates, makes exactly one
// object, and every request answers that object. Hosted, on a tenant of its own, so the
// count of its objects is exact.
func TestIdempotencyKeyCreatesOnceAcrossTwoGateways(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	second := gatewayOnReplicas(t, s, map[string]string{
		"billing": "BILLING_ADDR", "events": "EVENTS_ADDR", "activations": "ACTIVATIONS_ADDR", "storefront": "STOREFRONT_ADDR",
	})
	tenant, tenantID := hostedTenant(t, s)
	clients := []*Client{tenant, newClient(t, second, tenant.Token)}
	const each = 4
	for _, cr := range keyedCreates("https://192.0.2.10/idem-race", tenantID) {
		before := len(cr.list(t, tenant))
		idem := uniq("race-")
		answers := make([]*Response, each*len(clients))
		var wg sync.WaitGroup
		for i := range answers {
			wg.Go(func() {
				r, err := clients[i%len(clients)].Try(http.MethodPost, cr.path, cr.body, "Idempotency-Key", idem)
				if err != nil {
					t.Error(err)
					return
				}
				answers[i] = r
			})
		}
		wg.Wait()
		if answers[0] == nil {
			t.Fatalf("%s: no first answer", cr.path)
		}
		for i, r := range answers {
			if r == nil {
				t.Fatalf("%s: answer %d missing", cr.path, i)
			}
			if r.Status != 200 || string(r.Body) != string(answers[0].Body) {
				t.Fatalf("%s: answer %d differs from the first\n got  %d %s\n want %d %s", cr.path, i, r.Status, r.Body, answers[0].Status, answers[0].Body)
			}
		}
		ids := cr.list(t, tenant)
		if id := cr.id(answers[0].JSON(t)); countOf(ids, id) != 1 || len(ids) != before+1 {
			t.Fatalf("%s: %d objects after %d concurrent requests with one key, %d before", cr.path, len(ids), len(answers), before)
		}
	}
}
