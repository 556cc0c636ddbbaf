package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/stack"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	_ "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/accounts/v1"
	_ "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	apiv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/api/v1"
	_ "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/billing/v1"
	_ "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/events/v1"
	_ "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	_ "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/releases/v1"
	_ "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/storefront/v1"
)

// createAPIKey makes an extra API key through c and returns a client holding it and the
// key's id.
func createAPIKey(t testing.TB, c *Client, name, scope string) (*Client, string) {
	t.Helper()
	m := c.Post("/v1/api-keys", map[string]any{"name": name, "scope": scope}).Expect(t, 200).JSON(t)
	key, _ := m["api_key"].(string)
	id, _ := m["id"].(string)
	if key == "" || id == "" {
		t.Fatalf("no api_key or id in %v", m)
	}
	return newClient(t, c.Base, key), id
}

var apiKeyID = regexp.MustCompile(`^ak_[a-z2-7]{26}$`)

func TestAPIKeysAreShownOnceListedWithoutTheKeyAndDeleted(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"self", "hosted"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			s := sharedStack(t, mode)
			owner := admin(t, s)
			if mode == "hosted" {
				owner = newTenant(t, s)
			}
			expires := time.Now().Add(48 * time.Hour).UTC().Truncate(time.Second)
			resp := owner.Post("/v1/api-keys", map[string]any{"name": "CI deploys", "scope": "full", "expires_at": expires.Format(time.RFC3339)}).Expect(t, 200)
			if got := strings.Join(resp.Keys(t), ","); got != "id,name,prefix,scope,created_at,last_used_at,expires_at,api_key" {
				t.Fatalf("fields %s", got)
			}
			if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
				t.Fatalf("Cache-Control %q: an answer with a key must not be stored", cc)
			}
			created := resp.JSON(t)
			key := created["api_key"].(string)
			id := created["id"].(string)
			if !apiKeyID.MatchString(id) || !strings.HasPrefix(key, "kh_") || created["prefix"] != key[:11] ||
				created["scope"] != "full" || created["name"] != "CI deploys" || created["last_used_at"] != nil ||
				created["expires_at"] != expires.Format(time.RFC3339) {
				t.Fatalf("created %s", resp.Body)
			}

			// The new key works next to the owner's credential, which keeps working.
			extra := newClient(t, s.URL, key)
			extra.Get("/v1/list-licenses").Expect(t, 200)
			owner.Get("/v1/list-licenses").Expect(t, 200)

			list := owner.Get("/v1/api-keys").Expect(t, 200)
			if strings.Contains(string(list.Body), key) || strings.Contains(string(list.Body), key[11:]) {
				t.Fatalf("the list shows the key: %s", list.Body)
			}
			// Self-hosted, the implicit tenant's list is shared with the other tests.
			got := listedKey(t, list.Body, id)
			if got == nil || got["id"] != id || got["prefix"] != key[:11] || got["last_used_at"] == nil || got["created_at"] != created["created_at"] {
				t.Fatalf("listed %v (last_used_at is set by the use above)", got)
			}
			if got := strings.Join((&Response{Body: listedKeyJSON(t, list.Body, id)}).Keys(t), ","); got != "id,name,prefix,scope,created_at,last_used_at,expires_at" {
				t.Fatalf("listed fields %s", got)
			}

			owner.Delete("/v1/api-keys/"+id, nil).ExpectBody(t, `{"id":"`+id+`","deleted":true}`)
			extra.Get("/v1/list-licenses").ExpectError(t, 403, "Unauthorized")
			owner.Delete("/v1/api-keys/"+id, nil).ExpectError(t, 404, "API key not found")
			if listedKey(t, owner.Get("/v1/api-keys").Expect(t, 200).Body, id) != nil {
				t.Fatal("a deleted key is still listed")
			}
		})
	}
}

// listedKeyJSON returns the JSON of the key with id in a GET /v1/api-keys answer, or nil.
func listedKeyJSON(t *testing.T, body []byte, id string) json.RawMessage {
	t.Helper()
	var listed struct {
		APIKeys []json.RawMessage `json:"api_keys"`
	}
	if err := json.Unmarshal(body, &listed); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	for _, raw := range listed.APIKeys {
		var k struct{ ID string }
		if json.Unmarshal(raw, &k) == nil && k.ID == id {
			return raw
		}
	}
	return nil
}

// listedKey is listedKeyJSON decoded.
func listedKey(t *testing.T, body []byte, id string) map[string]any {
	t.Helper()
	raw := listedKeyJSON(t, body, id)
	if raw == nil {
		return nil
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestAPIKeyCreateRefusesBadInputNamingTheField(t *testing.T) {
	t.Parallel()
	tenant := newTenant(t, hosted(t))
	cases := []struct {
		body any
		want string
	}{
		{map[string]any{"scope": "full"}, "name is required"},
		{map[string]any{"name": "  ", "scope": "full"}, "name is required"},
		{map[string]any{"name": strings.Repeat("n", 201), "scope": "full"}, "name must be at most 200 characters"},
		{map[string]any{"name": "x"}, `scope must be "full" or "read"`},
		{map[string]any{"name": "x", "scope": "admin"}, `scope must be "full" or "read"`},
		{map[string]any{"name": "x", "scope": "read", "expires_at": "2001-01-01T00:00:00Z"}, "expires_at must be in the future"},
		{map[string]any{"name": "x", "scope": "read", "expires_at": "2030-01-01"}, "expires_at must be an ISO 8601 timestamp (e.g. 2027-01-31T00:00:00Z) or null"},
		{map[string]any{"name": "x", "scope": "read", "expires_at": "2030-01-02T03:04:05+24:00"}, "expires_at must be an ISO 8601 timestamp (e.g. 2027-01-31T00:00:00Z) or null"},
		{map[string]any{"name": "x", "scope": "read", "expires_at": 5}, "expires_at must be an ISO 8601 timestamp (e.g. 2027-01-31T00:00:00Z) or null"},
		{`{"name": 5, "scope": "read"}`, "Invalid JSON body: invalid value for string field name: 5"},
	}
	for _, tc := range cases {
		tenant.Post("/v1/api-keys", tc.body).ExpectError(t, 400, tc.want)
	}
	tenant.Get("/v1/api-keys").ExpectBody(t, `{"api_keys":[]}`)
	// Another tenant's key is not found.
	_, id := createAPIKey(t, tenant, "mine", "read")
	newTenant(t, hosted(t)).Delete("/v1/api-keys/"+id, nil).ExpectError(t, 404, "API key not found")
}

func TestAtMostTwentyAPIKeysPerTenantUnderConcurrentCreates(t *testing.T) {
	t.Parallel()
	tenant := newTenant(t, hosted(t))
	const n = 24
	statuses := make(chan *Response, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			statuses <- newClient(t, tenant.Base, tenant.Token).Post("/v1/api-keys", map[string]any{"name": fmt.Sprint("k", i), "scope": "read"})
		})
	}
	wg.Wait()
	close(statuses)
	created := 0
	for r := range statuses {
		switch r.Status {
		case 200:
			created++
		default:
			r.ExpectError(t, 400, "A tenant may have at most 20 API keys: delete one first")
		}
	}
	if created != 20 {
		t.Fatalf("%d keys created, want exactly 20", created)
	}
	var listed struct {
		APIKeys []any `json:"api_keys"`
	}
	if err := json.Unmarshal(tenant.Get("/v1/api-keys").Expect(t, 200).Body, &listed); err != nil || len(listed.APIKeys) != 20 {
		t.Fatalf("listed %d keys, %v", len(listed.APIKeys), err)
	}
}

func TestAnExpiredAPIKeyStopsWorking(t *testing.T) {
	t.Parallel()
	tenant := newTenant(t, hosted(t))
	sent := time.Now().Add(4 * time.Second).UTC()
	// Expiries are kept at whole seconds: the fraction sent is dropped.
	expires := sent.Truncate(time.Second)
	created := tenant.Post("/v1/api-keys", map[string]any{"name": "short", "scope": "full", "expires_at": sent.Format(time.RFC3339Nano)}).
		Expect(t, 200).JSON(t)
	if created["expires_at"] != expires.Format(time.RFC3339) {
		t.Fatalf("expires_at %v, want %s (the whole second)", created["expires_at"], expires.Format(time.RFC3339))
	}
	key := created["api_key"].(string)
	short := newClient(t, tenant.Base, key)
	if r := short.Get("/v1/list-licenses"); r.Status != 200 && time.Now().Before(expires) {
		t.Fatalf("a live key was refused: %d %s", r.Status, r.Body)
	}
	time.Sleep(time.Until(expires) + 100*time.Millisecond)
	short.Get("/v1/list-licenses").ExpectError(t, 403, "Unauthorized")
	short.Get("/v1/events").ExpectError(t, 403, "Unauthorized")
}

// tenantRoute is a route of the OpenAPI document that takes a tenant credential.
type tenantRoute struct {
	method, path, grpcMethod string
	readOnly                 bool
}

// tenantRoutes reads the route table (the OpenAPI document the gateway serves and
// limits by) and each route's read_only declaration from its method's proto descriptor,
// so the tests below cover every tenant route, present and future.
func tenantRoutes(t *testing.T, s *stack.Stack) []tenantRoute {
	t.Helper()
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(anon(t, s).Get("/v1/openapi.json").Expect(t, 200).Body, &doc); err != nil {
		t.Fatal(err)
	}
	var routes []tenantRoute
	for path, ops := range doc.Paths {
		for method, raw := range ops {
			var op struct {
				Access string `json:"x-keyhouse-access"`
				GRPC   string `json:"x-keyhouse-grpc-method"`
			}
			if json.Unmarshal(raw, &op) != nil || op.Access != "tenant" {
				continue
			}
			if op.GRPC == "" {
				t.Fatalf("%s %s: a tenant route without a gRPC method cannot declare read_only", method, path)
			}
			name := strings.Replace(strings.TrimPrefix(op.GRPC, "/"), "/", ".", 1)
			d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(name))
			if err != nil {
				t.Fatalf("%s %s: %s: %v", method, path, op.GRPC, err)
			}
			ro := proto.GetExtension(d.(protoreflect.MethodDescriptor).Options(), apiv1.E_ReadOnly).(bool)
			routes = append(routes, tenantRoute{strings.ToUpper(method), path, op.GRPC, ro})
		}
	}
	sort.Slice(routes, func(i, j int) bool { return routes[i].path+routes[i].method < routes[j].path+routes[j].method })
	if len(routes) < 40 {
		t.Fatalf("only %d tenant routes in the document", len(routes))
	}
	return routes
}

var pathParam = regexp.MustCompile(`\{[^}]+\}`)

func TestAReadKeyIsRefusedOnEveryWritingRoute(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"self", "hosted"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			s := sharedStack(t, mode)
			owner := admin(t, s)
			if mode == "hosted" {
				owner = newTenant(t, s)
			}
			reader, readerID := createAPIKey(t, owner, "dashboards", "read")
			t.Cleanup(func() { owner.Delete("/v1/api-keys/"+readerID, nil) })
			writes := 0
			for _, r := range tenantRoutes(t, s) {
				// Both ways (addendum §13): a read key may call every GET and nothing else.
				if r.readOnly != (r.method == http.MethodGet) {
					t.Errorf("%s %s (%s): read_only %v, want it exactly on the GET routes", r.method, r.path, r.grpcMethod, r.readOnly)
				}
				path := pathParam.ReplaceAllString(r.path, "x")
				var body any
				if r.method != http.MethodGet {
					body = map[string]any{}
				}
				resp := reader.Do(r.method, path, body)
				refused := resp.Status == 403 && string(resp.Body) == `{"error":"Unauthorized"}`
				switch {
				case r.method == http.MethodGet && refused:
					t.Errorf("%s %s refused a read key: %d %s, want every GET open to it", r.method, r.path, resp.Status, resp.Body)
				case !r.readOnly && !refused:
					t.Errorf("%s %s with a read key: %d %s, want 403 Unauthorized", r.method, r.path, resp.Status, resp.Body)
				case r.readOnly && refused:
					t.Errorf("%s %s is read-only but refused a read key", r.method, r.path)
				case !r.readOnly:
					writes++
				}
			}
			if writes < 25 {
				t.Fatalf("only %d writing routes checked", writes)
			}
			// What a read key may do, it does: the answer is the owner's. The list is of a
			// product of this test's own: other tests issue licenses on the shared stack
			// between the two reads.
			p := product("readscope")
			issueLicense(t, owner, lic(p))
			reader.Get("/v1/list-licenses?product_id="+p).ExpectBody(t, string(owner.Get("/v1/list-licenses?product_id="+p).Expect(t, 200).Body))
		})
	}
}

// everyService is one reading route per service behind the gateway, so a credential's
// fate is checked on each service's own interceptor.
var everyService = []string{
	"/v1/list-licenses",       // licensing
	"/v1/recent-activations",  // activations
	"/v1/list-releases",       // releases
	"/v1/storefront/mappings", // storefront
	"/v1/events",              // events
	"/v1/billing/status",      // billing
	"/v1/webhook-endpoints",   // events (the other service)
	"/v1/api-keys",            // billing (the keys themselves)
}

func TestTwoKeysOverlapAndADeletedOneStopsAtOnceOnEveryServiceAndGateway(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	second, err := s.StartGateway(context.Background(), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	stopsWithTest(t, s, second)
	tenant := newTenant(t, s)
	oldKey, oldID := createAPIKey(t, tenant, "backend v1", "full")
	newKey, _ := createAPIKey(t, tenant, "backend v2", "full")
	clients := func(c *Client) []*Client {
		return []*Client{newClient(t, s.URL, c.Token), newClient(t, second, c.Token)}
	}
	for _, c := range append(clients(oldKey), clients(newKey)...) {
		for _, path := range everyService {
			c.Get(path).Expect(t, 200)
		}
	}
	// The delete goes through the second gateway; the next calls, in parallel through
	// both, find the old key dead and the new one alive on every service.
	newClient(t, second, tenant.Token).Delete("/v1/api-keys/"+oldID, nil).Expect(t, 200)
	var wg sync.WaitGroup
	for _, c := range clients(oldKey) {
		for _, path := range everyService {
			wg.Go(func() { c.Get(path).ExpectError(t, 403, "Unauthorized") })
		}
	}
	for _, c := range clients(newKey) {
		for _, path := range everyService {
			wg.Go(func() { c.Get(path).Expect(t, 200) })
		}
	}
	wg.Wait()
	// The key rotate-api-key rotates is untouched by all of it.
	tenant.Get("/v1/list-licenses").Expect(t, 200)
}

func TestAPIKeyEventsNameTheKeyButNeverShowIt(t *testing.T) {
	t.Parallel()
	tenant := newTenant(t, hosted(t))
	reader, id := createAPIKey(t, tenant, "metrics", "read")
	tenant.Delete("/v1/api-keys/"+id, nil).Expect(t, 200)
	deadline := time.Now().Add(60 * time.Second)
	for {
		p := listEvents(t, newClient(t, tenant.Base, tenant.Token), url.Values{"type": {"api_key."}})
		if len(p.Events) > 2 {
			t.Fatalf("events %v", types(p.Events))
		}
		if len(p.Events) == 2 {
			inMadeOrder(p.Events)
			for i, typ := range []string{"api_key.created", "api_key.deleted"} {
				e := p.Events[i]
				if e.Type != typ || e.Actor["type"] != "api_key" || e.Data["id"] != id || e.Data["name"] != "metrics" || e.Data["scope"] != "read" || len(e.Data) != 3 {
					t.Fatalf("event %d: %+v", i, e)
				}
			}
			if body := tenant.Get("/v1/events?limit=1000").Expect(t, 200).Body; strings.Contains(string(body), reader.Token) {
				t.Fatal("an event holds the API key")
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 60 s: events %v", types(p.Events))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
