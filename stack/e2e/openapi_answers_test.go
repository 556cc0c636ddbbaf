package e2e

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/stack"
	"github.com/stripe/stripe-go/v76/webhook"
)

// TestOpenAPIAnswersMatchTheDocument holds every answer to the served document: on a stack
// in each mode it exercises every route of /v1/openapi.json with realistic data (limits,
// notes and expiry both null and set, seats, leases, releases, webhooks and their
// deliveries, events, API keys, the storefront, policies, lease keys, import, and hosted
// the billing and operator routes) and then sends each route a request it refuses, and
// checks each JSON answer against the schema the document gives that route and status:
// the JSON type (an int64 protojson writes as a string is a string), null only where the
// schema is nullable, required fields present, enum values, and no field the schema does
// not list unless it allows additionalProperties. A vendor generates typed clients from
// the document: each mismatch breaks one. Every route must answer 2xx at least once.
func TestOpenAPIAnswersMatchTheDocument(t *testing.T) {
	t.Parallel()
	raw := anon(t, selfHosted(t)).Get("/v1/openapi.json").Expect(t, 200).Body
	x := newAnswerChecker(t, raw)
	var wg sync.WaitGroup
	for _, mode := range []string{"self", "hosted"} {
		wg.Add(1)
		t.Run(mode, func(t *testing.T) {
			defer wg.Done()
			exerciseEveryRoute(t, x, mode)
			refuseEveryRoute(t, x, sharedStack(t, mode), mode)
		})
	}
	wg.Wait()
	x.report(t)
}

// answerChecker validates answers against the served document and records which routes
// answered 2xx and every mismatch.
type answerChecker struct {
	doc struct {
		Paths       map[string]map[string]json.RawMessage `json:"paths"`
		Definitions map[string]map[string]any             `json:"definitions"`
	}
	routes []docRoute

	mu         sync.Mutex
	mismatches map[string]bool // "METHOD route status pointer: expected …, got …"
	answered   map[string]bool // "METHOD route" that answered 2xx
	checked    int
}

type docParam struct {
	In string `json:"in"`
}

type docRoute struct {
	method, path string
	re           *regexp.Regexp
	params       int
	body         bool                      // the route takes a JSON body
	responses    map[string]map[string]any // status -> response object
}

func newAnswerChecker(t *testing.T, raw []byte) *answerChecker {
	x := &answerChecker{mismatches: map[string]bool{}, answered: map[string]bool{}}
	if err := json.Unmarshal(raw, &x.doc); err != nil {
		t.Fatal(err)
	}
	for path, item := range x.doc.Paths {
		for method, rawOp := range item {
			if method == "parameters" {
				continue
			}
			var op struct {
				Parameters []docParam                `json:"parameters"`
				Responses  map[string]map[string]any `json:"responses"`
			}
			if err := json.Unmarshal(rawOp, &op); err != nil {
				t.Fatal(err)
			}
			quoted := regexp.QuoteMeta(pathParam.ReplaceAllString(path, "PARAM"))
			re := regexp.MustCompile("^" + strings.ReplaceAll(quoted, "PARAM", "[^/]+") + "$")
			x.routes = append(x.routes, docRoute{
				method: strings.ToUpper(method), path: path, params: strings.Count(path, "{"),
				re: re, responses: op.Responses,
				body: slices.ContainsFunc(op.Parameters, func(p docParam) bool { return p.In == "body" }),
			})
		}
	}
	// Literal routes before templated ones: /v1/events/redact is not /v1/events/{id}.
	sort.Slice(x.routes, func(i, j int) bool { return x.routes[i].params < x.routes[j].params })
	return x
}

// route finds the document's route for a request.
func (x *answerChecker) route(method, path string) *docRoute {
	path, _, _ = strings.Cut(path, "?")
	for i := range x.routes {
		if r := &x.routes[i]; r.method == method && r.re.MatchString(path) {
			return r
		}
	}
	return nil
}

func (x *answerChecker) mismatch(format string, args ...any) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.mismatches[fmt.Sprintf(format, args...)] = true
}

// do sends a request through c and checks the answer; want (0: any) is the status the
// scenario expects, a different one fails the test.
func (x *answerChecker) do(t *testing.T, c *Client, want int, method, path string, body any, headers ...string) *Response {
	t.Helper()
	r := c.Do(method, path, body, headers...)
	if want != 0 && r.Status != want {
		t.Errorf("%s %s: status %d, want %d: %s", method, path, r.Status, want, r.Body)
	}
	x.check(method, path, r)
	return r
}

// check validates one answer.
func (x *answerChecker) check(method, path string, r *Response) {
	route := x.route(method, path)
	if route == nil {
		x.mismatch("%s %s: no route of the document matches", method, path)
		return
	}
	name := route.method + " " + route.path
	status := strconv.Itoa(r.Status)
	if r.Status/100 == 2 {
		x.mu.Lock()
		x.answered[name] = true
		x.mu.Unlock()
	}
	resp, ok := route.responses[status]
	if !ok {
		if r.Status == 500 || r.Status/100 == 2 {
			resp = route.responses["default"]
		}
		if resp == nil || r.Status/100 == 2 {
			x.mismatch("%s %s: status not documented (body %.200s)", name, status, r.Body)
			return
		}
	}
	schema, _ := resp["schema"].(map[string]any)
	if schema == nil || schema["type"] == "file" {
		return // not a JSON answer (the .lic file, the document itself)
	}
	dec := json.NewDecoder(bytes.NewReader(r.Body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		x.mismatch("%s %s: not JSON: %.200s", name, status, r.Body)
		return
	}
	x.mu.Lock()
	x.checked++
	x.mu.Unlock()
	x.validate(name+" "+status, schema, v, "")
}

// resolve follows $ref and merges allOf into one schema.
func (x *answerChecker) resolve(s map[string]any) map[string]any {
	if ref, ok := s["$ref"].(string); ok {
		return x.resolve(x.doc.Definitions[strings.TrimPrefix(ref, "#/definitions/")])
	}
	all, ok := s["allOf"].([]any)
	if !ok {
		return s
	}
	merged := map[string]any{}
	props := map[string]any{}
	var required []any
	for _, part := range append(all, s) {
		p, _ := part.(map[string]any)
		if _, isAll := p["allOf"]; !isAll {
			p = x.resolve(p)
		}
		for k, v := range p {
			switch k {
			case "allOf":
			case "properties":
				for name, ps := range v.(map[string]any) {
					props[name] = ps
				}
			case "required":
				required = append(required, v.([]any)...)
			default:
				merged[k] = v
			}
		}
	}
	if len(props) > 0 {
		merged["properties"] = props
	}
	if len(required) > 0 {
		merged["required"] = required
	}
	return merged
}

func nullable(s map[string]any) bool { return s["x-nullable"] == true || s["nullable"] == true }

// validate checks v against schema s at JSON pointer ptr: the subset of JSON Schema the
// document uses ($ref, allOf, type, format, x-nullable, items, properties, required,
// enum, additionalProperties).
func (x *answerChecker) validate(at string, s map[string]any, v any, ptr string) {
	outer := s
	s = x.resolve(s)
	where := ptr
	if where == "" {
		where = "/"
	}
	bad := func(expected string) {
		got := fmt.Sprintf("%v", v)
		if b, err := json.Marshal(v); err == nil {
			got = string(b)
		}
		if len(got) > 80 {
			got = got[:80] + "…"
		}
		x.mismatch("%s %s: expected %s, got %s", at, where, expected, got)
	}
	if v == nil {
		if !nullable(s) && !nullable(outer) {
			bad(fmt.Sprintf("%v (not nullable)", cmpOr(s["type"], "a value")))
		}
		return
	}
	if enum, ok := s["enum"].([]any); ok && !slices.ContainsFunc(enum, func(e any) bool { return fmt.Sprint(e) == fmt.Sprint(v) }) {
		bad(fmt.Sprintf("one of %v", enum))
	}
	typ, _ := s["type"].(string)
	if typ == "" && s["properties"] != nil {
		typ = "object"
	}
	format, _ := s["format"].(string)
	switch typ {
	case "object":
		m, ok := v.(map[string]any)
		if !ok {
			bad("object")
			return
		}
		props, _ := s["properties"].(map[string]any)
		for _, r := range asAnySlice(s["required"]) {
			if _, ok := m[r.(string)]; !ok {
				x.mismatch("%s %s/%s: expected the required field, got none", at, ptr, r)
			}
		}
		extra, _ := s["additionalProperties"].(map[string]any)
		allowExtra := s["additionalProperties"] == true || (props == nil && s["additionalProperties"] == nil)
		for k, fv := range m {
			if ps, ok := props[k].(map[string]any); ok {
				x.validate(at, ps, fv, ptr+"/"+k)
			} else if extra != nil {
				x.validate(at, extra, fv, ptr+"/"+k)
			} else if !allowExtra {
				x.mismatch("%s %s/%s: expected no such field (undocumented), got %.80s", at, ptr, k, mustJSON(fv))
			}
		}
	case "array":
		a, ok := v.([]any)
		if !ok {
			bad("array")
			return
		}
		items, _ := s["items"].(map[string]any)
		for i, it := range a {
			if items != nil {
				x.validate(at, items, it, ptr+"/"+strconv.Itoa(i))
			}
		}
	case "string":
		str, ok := v.(string)
		if !ok {
			bad("string" + fmtSuffix(format))
			return
		}
		switch format {
		case "int64", "uint64":
			if _, err := strconv.ParseInt(str, 10, 64); err != nil {
				bad("a decimal int64 string")
			}
		case "date-time":
			if _, err := time.Parse(time.RFC3339Nano, str); err != nil {
				bad("an RFC 3339 date-time")
			}
		}
	case "integer":
		n, ok := v.(json.Number)
		if _, err := strconv.ParseInt(string(n), 10, 64); !ok || err != nil {
			bad("integer" + fmtSuffix(format))
		}
	case "number":
		if _, ok := v.(json.Number); !ok {
			bad("number" + fmtSuffix(format))
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			bad("boolean")
		}
	}
}

func fmtSuffix(f string) string {
	if f == "" {
		return ""
	}
	return " (" + f + ")"
}

func cmpOr(v any, d string) any {
	if v == nil {
		return d
	}
	return v
}

func asAnySlice(v any) []any { s, _ := v.([]any); return s }

func mustJSON(v any) string { b, _ := json.Marshal(v); return string(b) }

// exempt names routes that cannot answer 2xx in the scenarios, and why.
var answerExempt = map[string]string{}

func (x *answerChecker) report(t *testing.T) {
	var list []string
	for m := range x.mismatches {
		list = append(list, m)
	}
	sort.Strings(list)
	for _, m := range list {
		t.Errorf("mismatch: %s", m)
	}
	for _, r := range x.routes {
		name := r.method + " " + r.path
		if why, ok := answerExempt[name]; ok {
			t.Logf("no 2xx asked of %s: %s", name, why)
		} else if !x.answered[name] {
			t.Errorf("%s never answered 2xx: exercise it", name)
		}
	}
	t.Logf("%d JSON answers checked, %d mismatches", x.checked, len(list))
}

// exerciseEveryRoute drives every route of the document to a 2xx answer on the mode's
// shared stack, with data that leaves optional fields both null and set.
func exerciseEveryRoute(t *testing.T, x *answerChecker, mode string) {
	s := sharedStack(t, mode)
	hostedMode := mode == "hosted"
	a, pub := admin(t, s), anon(t, s)
	tenantID, hookURL := "", "http://127.0.0.1:9/openapi-answers"
	var op *Client
	if hostedMode {
		a, tenantID = hostedTenant(t, s)
		op, hookURL = admin(t, s), "https://192.0.2.10/openapi-answers"
	}
	// Polls each go out as a client of their own: the Admin-Info budget is per client.
	poll := func() *Client { return newClient(t, s.URL, a.Token) }
	do := func(c *Client, want int, method, path string, body any, headers ...string) map[string]any {
		t.Helper()
		r := x.do(t, c, want, method, path, body, headers...)
		var m map[string]any
		_ = json.Unmarshal(r.Body, &m)
		return m
	}

	// Public and operational routes.
	do(pub, 200, "GET", "/", nil)
	do(pub, 200, "GET", "/healthz", nil)
	do(pub, 200, "GET", "/readyz", nil)
	do(pub, 200, "GET", "/v1/openapi.json", nil)
	do(pub, 200, "GET", "/v1/public-key", nil)
	do(pub, 200, "GET", "/v1/public-keys", nil)
	if hostedMode {
		do(op, 200, "GET", "/v1/admin/build-info", nil)
	} else {
		do(a, 200, "GET", "/v1/admin/build-info", nil)
	}

	// Licenses: one with every optional field set, one with none.
	p := product("openapi-answers-" + mode)
	future := time.Now().Add(90 * 24 * time.Hour).UTC().Format(time.RFC3339)
	full := do(a, 200, "POST", "/v1/issue-license", map[string]any{
		"tier": "pro", "product_id": p, "issued_to": "full@example.com", "limits": map[string]any{"users": 5, "projects": 2},
		"max_activations": 3, "notes": "every field set", "expires_at": future,
	}, "Idempotency-Key", uniq("oa-"))
	bare := do(a, 200, "POST", "/v1/issue-license", map[string]any{"tier": "free", "product_id": p, "issued_to": "bare@example.com"})
	gone := do(a, 200, "POST", "/v1/issue-license", map[string]any{"tier": "free", "product_id": p, "issued_to": "gone@example.com"})
	k1, _ := full["key"].(string)
	k2, _ := bare["key"].(string)
	k3, _ := gone["key"].(string)
	if k1 == "" || k2 == "" || k3 == "" {
		t.Fatalf("issue-license: %v %v %v", full, bare, gone)
	}
	act := do(pub, 200, "POST", "/v1/activate-license", map[string]any{"key": k1, "instance_id": "laptop-1"})
	tok, _ := act["token"].(string)
	act2 := do(pub, 200, "POST", "/v1/activate-license", map[string]any{"key": k2, "instance_id": "desktop-1"})
	tok2, _ := act2["token"].(string)
	do(pub, 200, "POST", "/v1/activate-license", map[string]any{"key": k1, "instance_id": "laptop-2"})
	do(pub, 200, "POST", "/v1/validate-license", map[string]any{"key": k1, "instance_id": "laptop-1"})
	do(pub, 200, "POST", "/v1/validate-license", map[string]any{"key": k2})
	do(pub, 200, "POST", "/v1/validate-license", map[string]any{"key": "NOPE-0000-0000"})
	do(pub, 200, "POST", "/v1/verify-license", map[string]any{"key": k1})
	do(pub, 200, "POST", "/v1/verify-license", map[string]any{"key": k2})
	do(pub, 200, "POST", "/v1/track-usage", map[string]any{"key": k1, "token": tok, "metric": "users", "increment": 2})
	// A metric the license's limits do not name: a 403 (api.md).
	do(pub, 403, "POST", "/v1/track-usage", map[string]any{"key": k2, "token": tok2, "metric": "users"}, "Idempotency-Key", uniq("oa-"))
	do(pub, 200, "POST", "/v1/usage-report", map[string]any{"key": k1})
	do(pub, 200, "POST", "/v1/usage-report", map[string]any{"key": k2})
	export := x.do(t, pub, 200, "GET", "/v1/export-license/"+k1, nil)
	x.do(t, pub, 200, "GET", "/v1/export-license/"+k2, nil)
	file := x.do(t, pub, 200, "GET", "/v1/export-license/"+k1+"/file", nil)
	do(pub, 200, "GET", "/v1/export-license/"+k1+"/offline", nil)
	do(pub, 200, "GET", "/v1/export-license/"+k2+"/offline", nil)
	do(pub, 200, "POST", "/v1/verify-license-file", string(export.Body))
	do(pub, 403, "POST", "/v1/verify-license-file", map[string]any{"key": k1, "tier": "pro", "product_id": p, "sig": "AAAA"})
	do(pub, 404, "POST", "/v1/verify-license", map[string]any{"key": "NOPE-0000-0000"})
	do(pub, 200, "POST", "/v1/verify-license-file-base64", map[string]any{"license_file": base64.StdEncoding.EncodeToString(file.Body)})
	for _, k := range []string{k1, k2} {
		do(a, 200, "GET", "/v1/admin/license/"+k, nil)
		do(a, 200, "GET", "/v1/list-activations/"+k, nil)
	}
	do(a, 200, "GET", "/v1/list-licenses?product_id="+p, nil)
	do(a, 200, "GET", "/v1/list-licenses?limit=5&expiring_within_days=365", nil)
	do(a, 200, "GET", "/v1/recent-activations?limit=5", nil)
	do(a, 200, "GET", "/v1/admin/stats", nil)
	do(a, 200, "POST", "/v1/admin/update-license-terms", map[string]any{"key": k2, "limits": map[string]any{"users": 1}, "max_activations": 2, "expires_at": future})
	do(a, 200, "POST", "/v1/admin/update-license-terms", map[string]any{"key": k2, "expires_at": nil})
	do(a, 200, "POST", "/v1/admin/update-notes", map[string]any{"key": k1, "notes": "changed"})
	do(a, 200, "POST", "/v1/admin/update-notes", map[string]any{"key": k2, "notes": ""})
	do(a, 200, "POST", "/v1/admin/reset-usage", map[string]any{"key": k1, "metric": "users"})
	do(a, 200, "POST", "/v1/admin/reset-usage", map[string]any{"key": k2})
	re := do(a, 200, "POST", "/v1/admin/reissue-token", map[string]any{"key": k1, "instance_id": "laptop-1"})
	if nt, ok := re["token"].(string); ok {
		tok = nt
	}

	// Policies, leases and lease keys.
	pol := "/v1/products/" + p + "/policies/"
	do(a, 200, "PUT", pol+"pro", map[string]any{"floating": false, "lease_ttl_seconds": 3600, "renew_after_seconds": 600, "entitlements": []string{"export"}})
	do(a, 200, "PUT", pol+"*", map[string]any{})
	do(a, 200, "PUT", pol+"free", map[string]any{"floating": true, "fingerprint_match": "any"})
	do(a, 200, "GET", pol+"pro", nil)
	do(a, 200, "GET", "/v1/products/"+p+"/policies", nil)
	do(pub, 200, "POST", "/v1/leases", map[string]any{"key": k1, "token": tok, "nonce": "n-1", "components": map[string]string{"cpu": "x"}})
	do(pub, 0, "POST", "/v1/leases", map[string]any{"key": k2, "instance_id": "floating-1"})
	do(a, 200, "DELETE", pol+"free", nil)
	leaseKeys := "/v1/lease-keys"
	if hostedMode {
		leaseKeys += "?tenant_id=" + tenantID
	}
	do(pub, 200, "GET", leaseKeys, nil)
	do(a, 200, "POST", "/v1/lease-keys/rotate", map[string]any{"retire_after_seconds": 3600})
	do(pub, 200, "GET", leaseKeys, nil)

	// The per-license-key Activation limit (20 per 15 minutes): a 429 and its body.
	busy := issueLicense(t, a, map[string]any{"tier": "free", "product_id": p, "issued_to": "busy@example.com"})
	var limited *Response
	for i := 0; i < 25 && (limited == nil || limited.Status != 429); i++ {
		limited = x.do(t, newClient(t, s.URL, ""), 0, "POST", "/v1/activate-license", map[string]any{"key": busy, "instance_id": "busy-1"})
	}
	if limited.Status != 429 {
		t.Errorf("25 activations of one key: %d %s, want a 429", limited.Status, limited.Body)
	}

	// Seats released both ways.
	do(pub, 200, "POST", "/v1/deactivate-license", map[string]any{"key": k2, "token": tok2})
	do(a, 200, "POST", "/v1/admin/deactivate-by-instance-id", map[string]any{"key": k1, "instance_id": "laptop-2"})

	// Releases.
	rel1 := do(a, 200, "POST", "/v1/register-release", map[string]any{
		"product_id": p, "version": "1.0.0", "artifact_url": "https://example.com/a-1.0.0.zip",
		"checksum": "sha256:" + strings.Repeat("ab", 32), "channel": "stable", "platform": "linux", "release_notes": "first",
	}, "Idempotency-Key", uniq("oa-"))
	rel2 := do(a, 200, "POST", "/v1/register-release", map[string]any{"product_id": p, "version": "1.1.0", "artifact_url": "https://example.com/a-1.1.0.zip"})
	do(a, 200, "GET", "/v1/list-releases?product_id="+p, nil)
	for _, rel := range []map[string]any{rel1, rel2} {
		if id, ok := rel["id"].(float64); ok {
			do(a, 200, "GET", fmt.Sprintf("/v1/release/%d", int(id)), nil)
		}
	}
	do(pub, 200, "POST", "/v1/check-update", map[string]any{"product_id": p, "current_version": "0.9.0", "key": k1, "channel": "stable", "platform": "linux"})
	// check-update requires a license key (api.md).
	do(pub, 404, "POST", "/v1/check-update", map[string]any{"product_id": p, "current_version": "0.9.0"})
	do(pub, 200, "POST", "/v1/check-update", map[string]any{"product_id": p, "current_version": "9.0.0", "key": k2})
	if id, ok := rel2["id"].(float64); ok {
		do(a, 200, "POST", "/v1/unpublish-release", map[string]any{"id": int(id)})
	}
	do(a, 200, "GET", "/v1/list-releases?product_id="+p+"&status=unpublished", nil)

	// Webhook endpoints, their deliveries and the events they carry.
	ep := do(a, 200, "POST", "/v1/webhook-endpoints", map[string]any{"url": hookURL, "events": []string{"*"}, "description": "answers"}, "Idempotency-Key", uniq("oa-"))
	ep2 := do(a, 200, "POST", "/v1/webhook-endpoints", map[string]any{"url": hookURL, "events": []string{"license."}})
	epID, _ := ep["id"].(string)
	ep2ID, _ := ep2["id"].(string)
	do(a, 200, "GET", "/v1/webhook-endpoints", nil)
	do(a, 200, "GET", "/v1/webhook-endpoints/"+epID, nil)
	do(a, 200, "GET", "/v1/webhook-endpoints/"+ep2ID, nil)
	do(a, 200, "POST", "/v1/webhook-endpoints/"+ep2ID+"/update", map[string]any{"description": "now described", "enabled": false})
	do(a, 200, "POST", "/v1/webhook-endpoints/"+epID+"/ping", map[string]any{})
	do(a, 409, "POST", "/v1/webhook-endpoints/"+ep2ID+"/ping", map[string]any{})
	reused := uniq("oa-")
	do(a, 200, "POST", "/v1/register-release", map[string]any{"product_id": p, "version": "0.1.0", "artifact_url": "https://example.com/a-0.1.0.zip"}, "Idempotency-Key", reused)
	do(a, 409, "POST", "/v1/register-release", map[string]any{"product_id": p, "version": "0.1.1", "artifact_url": "https://example.com/a-0.1.1.zip"}, "Idempotency-Key", reused)
	do(a, 200, "POST", "/v1/webhook-endpoints/"+epID+"/roll-secret", map[string]any{"expire_old_after_seconds": 60})
	do(a, 200, "POST", "/v1/revoke-license", map[string]any{"key": k3, "revoked": true})
	do(a, 409, "POST", "/v1/revoke-license", map[string]any{"key": k3, "revoked": true})
	// A revoked license, everywhere it is read.
	do(pub, 403, "POST", "/v1/verify-license", map[string]any{"key": k3})
	do(pub, 0, "POST", "/v1/check-update", map[string]any{"product_id": p, "current_version": "0.9.0", "key": k3})
	do(pub, 0, "POST", "/v1/activate-license", map[string]any{"key": k3, "instance_id": "late"})
	do(pub, 403, "GET", "/v1/export-license/"+k3, nil)
	do(pub, 403, "GET", "/v1/export-license/"+k3+"/offline", nil)
	revokedFile := x.do(t, pub, 0, "GET", "/v1/export-license/"+k3+"/file", nil)
	if revokedFile.Status == 200 {
		do(pub, 403, "POST", "/v1/verify-license-file-base64", map[string]any{"license_file": base64.StdEncoding.EncodeToString(revokedFile.Body)})
	}
	do(a, 200, "GET", "/v1/list-licenses?status=revoked&limit=5", nil)
	do(pub, 200, "POST", "/v1/validate-license", map[string]any{"key": k3})
	do(pub, 200, "POST", "/v1/usage-report", map[string]any{"key": k3})
	do(a, 200, "GET", "/v1/admin/license/"+k3, nil)
	do(a, 200, "DELETE", "/v1/delete-license", map[string]any{"key": k3})
	eventually(t, "the ping delivered", func() bool {
		d := do(poll(), 200, "GET", "/v1/webhook-endpoints/"+epID+"/deliveries?limit=50", nil)
		return len(asAnySlice(d["deliveries"])) > 0
	})
	do(a, 200, "GET", "/v1/events?license_key="+k1+"&limit=50", nil)
	evs := do(a, 200, "GET", "/v1/events?license_key="+k3+"&limit=50", nil)
	do(a, 200, "GET", "/v1/events?limit=2", nil)
	// The newest event, written after the endpoint existed: it is delivered to it.
	var eventID string
	for _, it := range asAnySlice(evs["events"]) {
		if m, ok := it.(map[string]any); ok {
			do(a, 200, "GET", "/v1/events/"+fmt.Sprint(m["id"]), nil)
			if eventID == "" {
				eventID = fmt.Sprint(m["id"])
			}
		}
	}
	if eventID == "" {
		t.Fatalf("no events of %s: %v", k3, evs)
	}
	// Its delivery is recorded once attempted: at once self-hosted (a refused connection),
	// after the attempt's timeout hosted (an unroutable address). Either mode's answers
	// cover the routes; the redelivery waits for the record.
	delivered := false
	for deadline := time.Now().Add(90 * time.Second); !delivered && time.Now().Before(deadline); time.Sleep(time.Second) {
		d := do(poll(), 200, "GET", "/v1/events/"+eventID+"/deliveries", nil)
		delivered = len(asAnySlice(d["deliveries"])) > 0
	}
	do(a, 200, "GET", "/v1/webhook-endpoints/"+epID+"/deliveries?limit=50", nil)
	if delivered {
		do(a, 200, "POST", "/v1/events/"+eventID+"/redeliver", map[string]any{"endpoint_id": epID})
	} else {
		t.Logf("%s: no delivery of %s recorded yet; redeliver is asked in the other mode", mode, eventID)
	}
	do(a, 200, "POST", "/v1/events/redact", map[string]any{"license_key": k3})
	do(a, 200, "DELETE", "/v1/webhook-endpoints/"+ep2ID, nil)
	t.Cleanup(func() { a.Delete("/v1/webhook-endpoints/"+epID, nil) })

	// API keys.
	k := do(a, 200, "POST", "/v1/api-keys", map[string]any{"name": uniq("oa-"), "scope": "read"}, "Idempotency-Key", uniq("oa-"))
	k2nd := do(a, 200, "POST", "/v1/api-keys", map[string]any{"name": uniq("oa-"), "scope": "full", "expires_at": future})
	// A key that has been used: its last_used_at is set.
	used := newClient(t, s.URL, fmt.Sprint(k["api_key"]))
	do(used, 0, "GET", "/v1/list-licenses?limit=1", nil)
	do(a, 200, "GET", "/v1/api-keys", nil)
	for _, key := range []map[string]any{k, k2nd} {
		do(a, 200, "DELETE", "/v1/api-keys/"+fmt.Sprint(key["id"]), nil)
	}

	// Import, an expired license among them.
	expired := uniq("OA-IMPORT-")
	do(a, 200, "POST", "/v1/licenses/import", map[string]any{"licenses": []map[string]any{
		importItem(p, 1, uniq("OA-IMPORT-")), importItem(p, 7, uniq("OA-IMPORT-")), importItem(p, 4, expired),
		{"key": uniq("OA-IMPORT-"), "product_id": p, "tier": "free", "issued_to": "min@example.com"},
	}})
	do(pub, 403, "POST", "/v1/verify-license", map[string]any{"key": expired})
	do(pub, 200, "POST", "/v1/validate-license", map[string]any{"key": expired})
	do(pub, 200, "POST", "/v1/usage-report", map[string]any{"key": expired})
	do(a, 200, "GET", "/v1/admin/license/"+expired, nil)
	do(a, 200, "GET", "/v1/list-licenses?status=active&limit=5", nil)
	do(a, 200, "POST", "/v1/licenses/import", map[string]any{"licenses": []map[string]any{{"key": k1, "product_id": p, "tier": "pro", "issued_to": "x@example.com"}}, "on_conflict": "skip"})

	// Storefront: mail settings, mappings, a connected Stripe webhook and a sale.
	do(a, 200, "GET", "/v1/storefront/mail-settings", nil)
	do(a, 200, "POST", "/v1/storefront/mail-settings", map[string]any{"product_name": "Answers Pro", "sender_name": "Answers", "reply_to": "help@example.com"})
	do(a, 200, "GET", "/v1/storefront/mail-settings", nil)
	wh := do(a, 200, "POST", "/v1/storefront/webhooks", map[string]any{"provider": "stripe"}, "Idempotency-Key", uniq("oa-"))
	whID, _ := wh["webhook_id"].(string)
	secret := "whsec_" + uniq("oa")
	do(a, 200, "POST", "/v1/storefront/webhooks/"+whID+"/secret", map[string]any{"signing_secret": secret})
	do(a, 200, "GET", "/v1/storefront/webhooks", nil)
	ref := uniq("svc-oa-")
	m1 := do(a, 200, "POST", "/v1/storefront/mappings", map[string]any{
		"service_ref": ref, "product_id": p, "tier": "pro", "duration_days": 30, "limits": map[string]any{"users": 3},
		"seats": 2, "renewal_grace_days": 3, "on_refund": "revoke",
	}, "Idempotency-Key", uniq("oa-"))
	m2 := do(a, 200, "POST", "/v1/storefront/mappings", map[string]any{"payment_link": uniq("plink_"), "product_id": p, "tier": "free"})
	do(a, 200, "GET", "/v1/storefront/mappings", nil)
	sess := newSession("", "buyer@example.com")
	sess.ServiceRef = ref
	evID := uniq("evt_oa_")
	payload := event(evID, "checkout.session.completed", sess)
	signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: secret})
	do(pub, 200, "POST", "/v1/webhooks/storefront/"+whID, payload, "Stripe-Signature", signed.Header)
	eventually(t, "the sale's delivery", func() bool {
		d := do(poll(), 200, "GET", "/v1/storefront/deliveries?limit=50", nil)
		for _, it := range asAnySlice(d["deliveries"]) {
			if m, ok := it.(map[string]any); ok && m["event_id"] == evID && m["outcome"] != "pending" {
				return true
			}
		}
		return false
	})
	do(a, 200, "GET", "/v1/storefront/deliveries?customer="+sess.Customer, nil)
	// A sale no mapping names: a delivery that did not fulfil.
	stray := newSession("", "stray@example.com")
	stray.ServiceRef = uniq("svc-none-")
	strayID := uniq("evt_oa_")
	payload = event(strayID, "checkout.session.completed", stray)
	signed = webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: secret})
	do(pub, 0, "POST", "/v1/webhooks/storefront/"+whID, payload, "Stripe-Signature", signed.Header)
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(time.Second) {
		d := do(poll(), 200, "GET", "/v1/storefront/deliveries?limit=50", nil)
		if slices.ContainsFunc(asAnySlice(d["deliveries"]), func(it any) bool {
			m, _ := it.(map[string]any)
			return m["event_id"] == strayID && m["outcome"] != "pending"
		}) {
			break
		}
	}
	do(a, 200, "GET", "/v1/storefront/deliveries?outcome=unmapped", nil)
	for _, m := range []map[string]any{m1, m2} {
		do(a, 200, "DELETE", "/v1/storefront/mappings/"+fmt.Sprint(m["id"]), nil)
	}
	do(a, 200, "POST", "/v1/storefront/webhooks/"+whID+"/disable", map[string]any{})

	if !hostedMode {
		return
	}
	// Hosted: billing, the operator, and rotating a tenant's own key.
	do(a, 200, "GET", "/v1/billing/status", nil)
	do(a, 200, "POST", "/v1/billing/checkout", map[string]any{"plan": "pro"})
	su := newSub(tenantID)
	for _, payload := range [][]byte{su.checkoutCompleted(time.Now()), su.event("updated", time.Now(), time.Now().Add(30*24*time.Hour))} {
		signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: testWebhookSecret, Timestamp: time.Now()})
		do(pub, 200, "POST", "/v1/webhooks/billing", payload, "Stripe-Signature", signed.Header)
	}
	eventually(t, "the subscription", func() bool {
		return do(poll(), 200, "GET", "/v1/billing/status", nil)["status"] == "active"
	})
	do(op, 200, "GET", "/v1/operator/tenants?limit=5", nil)
	created := do(op, 200, "POST", "/v1/operator/tenants", map[string]any{"name": "Answers", "email": uniq("oa") + "@example.com"}, "Idempotency-Key", uniq("oa-"))
	id, _ := created["tenant_id"].(string)
	do(op, 200, "GET", "/v1/operator/tenants/"+tenantID, nil)
	do(op, 200, "GET", "/v1/operator/tenants/"+id, nil)
	do(op, 200, "POST", "/v1/operator/tenants/"+id+"/suspend", nil)
	do(op, 200, "GET", "/v1/operator/tenants/"+id, nil)
	do(op, 200, "GET", "/v1/operator/tenants?limit=50", nil)
	do(op, 200, "POST", "/v1/operator/tenants/"+id+"/resume", nil)
	fresh := newClient(t, s.URL, fmt.Sprint(created["api_key"]))
	do(fresh, 200, "POST", "/v1/rotate-api-key", nil)
	do(op, 200, "DELETE", "/v1/operator/tenants/"+id, nil)
}

// refuseEveryRoute sends every route a request it refuses (no credential, an unknown
// id, a malformed body) and checks the error answers against the document.
func refuseEveryRoute(t *testing.T, x *answerChecker, s *stack.Stack, mode string) {
	for _, r := range x.routes {
		if r.path == "/v1/rotate-api-key" || r.method == "DELETE" && !strings.Contains(r.path, "{") {
			continue // nothing here may rotate or delete a shared credential or object
		}
		concrete := pathParam.ReplaceAllString(r.path, "nothing-here")
		var body any
		if r.method != http.MethodGet && r.method != http.MethodDelete {
			body = map[string]any{}
		}
		x.do(t, anon(t, s), 0, r.method, concrete, body)
		a := admin(t, s)
		if mode == "hosted" && !strings.HasPrefix(r.path, "/v1/operator/") {
			a = newClient(t, s.URL, "kh_not_a_key_0123456789")
		}
		x.do(t, a, 0, r.method, concrete, body)
		if body != nil {
			x.do(t, admin(t, s), 0, r.method, concrete, "{")
		}
		if r.body && mode == "self" {
			// Over the 1 MiB cap: 413 on every route with a body (addendum §6).
			x.do(t, admin(t, s), 413, r.method, concrete, `{"k":"`+strings.Repeat("x", 1<<20)+`"}`)
			x.do(t, admin(t, s), 415, r.method, concrete, "{}", "Content-Encoding", "br")
			x.do(t, admin(t, s), 400, r.method, concrete, "{}", "Content-Encoding", "gzip")
		}
	}
}
