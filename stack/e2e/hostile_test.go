package e2e

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/keyhouse/keyhouse/stack"
)

// The sweep below sends every route of the OpenAPI document what a hostile client would:
// each body field with values of the wrong type, out of range or not text, bodies that are
// no JSON object, a gzip stream that is not one, and path parameters that are blank, NUL,
// not UTF-8 or "..". Whatever a route makes of them, the answer is a 4xx with a JSON
// {"error": …} (or the route's documented answer), never a 5xx other than a deliberate
// 503 with Retry-After. An outside probe found a 500 for a bad gzip stream on three routes
// that read their body themselves, and a 503 "unavailable, retry" for a blank product id;
// this keeps every route, including the ones added after it, to the rule.

// hostileRoute is one operation of the document: its body's fields by JSON type.
type hostileRoute struct {
	method, path string
	fields       map[string]string // field → "string", "integer", "number", "boolean", "object" or "array"
	hasBody      bool
}

// hostileValues are, for each JSON type of a field, values a client could send that are
// not of that type or not acceptable as one. None is null: protojson reads null as an
// absent field, which the required-fields test covers, and an absent field could make a
// body valid.
var hostileValues = map[string][]string{
	"string":  {`12345`, `true`, `{}`, `[]`, `"x\u0000y"`, `"\ud800"`, `"\ud800", "z": 1`, `"` + strings.Repeat("a", 70_000) + `"`},
	"integer": {`"5"`, `1.5`, `1e308`, `-1`, `18446744073709551616`, `true`, `{}`, `[]`, `"\ud800"`},
	"number":  {`"5"`, `1e400`, `true`, `{}`, `[]`},
	"boolean": {`1`, `"true"`, `{}`, `[]`},
	"object":  {`1`, `"x"`, `[]`, `true`, `{"a":{"b":[1,{"c":"\u0000"}]}}`, `{"` + strings.Repeat("k", 300) + `":1}`},
	"array":   {`1`, `"x"`, `{}`, `true`, `[null]`, `[{"a":1}]`, `[` + strings.Repeat(`"a",`, 2000) + `"a"]`},
}

// hostileBodies are whole bodies that are no JSON object, or are cut short.
var hostileBodies = []string{`[]`, `"x"`, `42`, `{} {}`, `{"a":`, "{\"a\":\"\xff\xfe\"}", `{"a":` + strings.Repeat(`[`, 10_000)}

// hostileSegments replace a path parameter: blank, NUL, not UTF-8, a parent step, long.
var hostileSegments = []string{"%20", "%00", "%ff", "..", strings.Repeat("x", 5_000)}

// hostileAllowed are the answers the contract gives on purpose that the sweep would
// otherwise flag, by route and status.
var hostileAllowed = map[string]string{
	// api.md: a self-hosted server without STRIPE_WEBHOOK_SECRET answers every call so.
	"POST /v1/webhooks/billing 503": "Billing webhooks are not configured on this server (STRIPE_WEBHOOK_SECRET)",
}

func TestEveryRouteAnswersHostileInputWithAJSON4xx(t *testing.T) {
	t.Parallel()
	routes := hostileRoutes(t, anon(t, selfHosted(t)).Get("/v1/openapi.json").Expect(t, 200).Body)
	if len(routes) < 60 {
		t.Fatalf("the document has %d operations; the sweep expects every /v1 route", len(routes))
	}
	// A stack of its own for the self-hosted sweep: a hostile body that some defect let
	// through could rotate or delete what the shared stack's other tests use. The hosted
	// sweep acts as a tenant of its own.
	self := startStack(t, nil)
	t.Cleanup(self.Stop)
	hostedStack := hosted(t)
	for _, mode := range []struct {
		name  string
		s     *stack.Stack
		token string
	}{
		{"self-hosted", self, self.AdminKey},
		{"hosted", hostedStack, newTenant(t, hostedStack).Token},
	} {
		// One mode after the other, not as parallel subtests: those would wait for the
		// package's -parallel slots behind every other test, with this stack idle.
		t.Run(mode.name, func(t *testing.T) {
			c := newClient(t, mode.s.URL, mode.token)
			params := map[string]string{"tier": "pro"}
			params["product_id"] = product("hostile")
			params["key"] = issueLicense(t, c, map[string]any{"tier": "pro", "product_id": params["product_id"], "issued_to": "hostile@example.com"})
			sent, flagged := sweepHostile(t, mode.s.URL, mode.token, routes, params)
			t.Logf("%d requests, %d answers out of the rule", sent, flagged)
		})
	}
}

// hostileRoutes reads the operations of the OpenAPI document (Swagger 2.0, as served).
func hostileRoutes(t *testing.T, raw []byte) []hostileRoute {
	t.Helper()
	type schema struct {
		Type string `json:"type"`
		Ref  string `json:"$ref"`
	}
	var doc struct {
		Paths map[string]map[string]struct {
			Parameters []struct {
				In     string `json:"in"`
				Schema schema `json:"schema"`
			} `json:"parameters"`
		} `json:"paths"`
		Definitions map[string]struct {
			Properties map[string]schema `json:"properties"`
		} `json:"definitions"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	var routes []hostileRoute
	for path, item := range doc.Paths {
		for method, op := range item {
			r := hostileRoute{method: strings.ToUpper(method), path: path, fields: map[string]string{}}
			for _, p := range op.Parameters {
				if p.In != "body" {
					continue
				}
				r.hasBody = true
				for name, f := range doc.Definitions[strings.TrimPrefix(p.Schema.Ref, "#/definitions/")].Properties {
					r.fields[name] = cmp.Or(f.Type, "object") // a $ref is a message
				}
			}
			routes = append(routes, r)
		}
	}
	slices.SortFunc(routes, func(a, b hostileRoute) int { return strings.Compare(a.path+a.method, b.path+b.method) })
	return routes
}

// sweepHostile sends every hostile request of routes, eight at a time, each from a client
// address of its own (so no rate limit answers in the route's place), and reports every
// answer out of the rule as a test error. It returns how many it sent and flagged.
func sweepHostile(t *testing.T, base, token string, routes []hostileRoute, params map[string]string) (sent, flagged int) {
	type request struct {
		method, route, path string
		body                []byte
		gzip                bool
		what                string
	}
	var requests []request
	for _, r := range routes {
		path := pathParam.ReplaceAllStringFunc(r.path, func(m string) string { return cmp.Or(params[m[1:len(m)-1]], "x") })
		for _, m := range pathParam.FindAllString(r.path, -1) {
			for _, seg := range hostileSegments {
				bad := strings.Replace(r.path, m, seg, 1)
				bad = pathParam.ReplaceAllStringFunc(bad, func(m string) string { return cmp.Or(params[m[1:len(m)-1]], "x") })
				var body []byte
				if r.hasBody {
					body = []byte(`{}`)
				}
				requests = append(requests, request{r.method, r.path, bad, body, false, "path parameter " + m + " = " + trimmed(seg)})
			}
		}
		var body []byte
		if r.hasBody {
			body = []byte(`{}`)
		}
		requests = append(requests, request{r.method, r.path, "/" + path, body, false, "a path that starts with //"})
		if r.method == http.MethodGet || r.method == http.MethodDelete && !r.hasBody {
			continue
		}
		for field, typ := range r.fields {
			for _, v := range hostileValues[typ] {
				requests = append(requests, request{r.method, r.path, path, []byte(`{"` + field + `":` + v + `}`), false, field + " = " + trimmed(v)})
			}
		}
		for _, b := range hostileBodies {
			requests = append(requests, request{r.method, r.path, path, []byte(b), false, "body " + trimmed(b)})
		}
		requests = append(requests, request{r.method, r.path, path, []byte("nope, not gzip"), true, "a body that is no gzip stream"})
	}

	var mu sync.Mutex
	next := make(chan request)
	var workers sync.WaitGroup
	for range 8 {
		workers.Go(func() {
			for q := range next {
				headers := []string{}
				if q.gzip {
					headers = append(headers, "Content-Encoding", "gzip")
				}
				c := newClient(t, base, token)
				c.HTTP = noRedirects
				r, err := c.Try(q.method, q.path, q.body, headers...)
				problem := ""
				if err != nil {
					problem, r = "no answer: "+err.Error(), &Response{}
				} else {
					problem = outOfRule(q.method, q.route, q.path, r)
				}
				if problem != "" {
					mu.Lock()
					flagged++
					mu.Unlock()
					t.Errorf("%s %s with %s: %s: %d %s", q.method, trimmed(q.path), q.what, problem, r.Status, trimmed(string(r.Body)))
				}
			}
		})
	}
	for _, q := range requests {
		next <- q
	}
	close(next)
	workers.Wait()
	return len(requests), flagged
}

// noRedirects shows the sweep a redirect instead of following it: a /v1 route answers
// its client, it does not send it elsewhere.
var noRedirects = &http.Client{Timeout: httpClient.Timeout, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// outOfRule says what is wrong with the answer to a request of route (the document's
// path) sent to path, or "".
func outOfRule(method, route, path string, r *Response) string {
	if msg, ok := hostileAllowed[fmt.Sprintf("%s %s %d", method, path, r.Status)]; ok && strings.Contains(string(r.Body), msg) {
		return ""
	}
	switch {
	case r.Status >= 500 && !(r.Status == http.StatusServiceUnavailable && r.Header.Get("Retry-After") != ""):
		return "a 5xx"
	case !strings.HasPrefix(route, "/v1/"):
		return "" // the probes and the landing page: no JSON API there
	case r.Status >= 300 && r.Status < 400:
		return "a redirect (" + r.Header.Get("Location") + ")"
	case r.Status < 300:
		return ""
	case !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json"):
		return "an error that is not JSON (" + r.Header.Get("Content-Type") + ")"
	}
	var body struct {
		Error *string `json:"error"`
	}
	if err := json.Unmarshal(r.Body, &body); err != nil || body.Error == nil || *body.Error == "" {
		return `an error without {"error": …}`
	}
	return ""
}

// trimmed shortens what a failure prints.
func trimmed(s string) string {
	if len(s) > 120 {
		return fmt.Sprintf("%s…(%d bytes)", s[:120], len(s))
	}
	return s
}
