package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/stack"
)

// Issue 25, "every byte handled": the probe's cases (and their neighbours) answer a clear
// 4xx naming the field, or the page's own 404/400, never a 500; nothing is applied.

var controlKeys = []struct{ name, json, want string }{
	{"newline", `x\n`, "key must not contain control characters"},
	{"NUL", `x\u0000`, "key must not contain NUL characters"},
	{"carriage return", `\r`, "key must not contain control characters"},
	{"U+0001", `\u0001`, "key must not contain control characters"},
	{"U+001F", `\u001f`, "key must not contain control characters"},
	{"DEL", `\u007f`, "key must not contain control characters"},
	{"C1 next line", `x\u0085`, "key must not contain control characters"},
}

func TestEveryByte_RESTKeysPathsAndQueries(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a, c := admin(t, s), anon(t, s)
	key := issueLicense(t, a, lic(product("bytes")))
	for _, k := range controlKeys {
		t.Run(k.name, func(t *testing.T) {
			a.Do(http.MethodDelete, "/v1/delete-license", `{"key":"`+k.json+`"}`).ExpectError(t, 400, k.want)
			a.Post("/v1/admin/update-notes", `{"key":"`+k.json+`","notes":"n"}`).ExpectError(t, 400, k.want)
			a.Post("/v1/revoke-license", `{"key":"`+k.json+`","revoked":true}`).ExpectError(t, 400, k.want)
			c.Post("/v1/verify-license", `{"key":"`+k.json+`"}`).ExpectError(t, 400, k.want)
			c.Post("/v1/activate-license", `{"key":"`+k.json+`","instance_id":"host"}`).ExpectError(t, 400, k.want)
			// validate-license answers valid false for anything it cannot validate.
			c.Post("/v1/validate-license", `{"key":"`+k.json+`","instance_id":"host"}`).Expect(t, 200).ExpectBody(t, `{"valid":false}`)
		})
	}
	// The same key with a control character in another field, and notes keep their lines.
	c.Post("/v1/activate-license", `{"key":"`+key+`","instance_id":"a\tb"}`).ExpectError(t, 400, "instance_id must not contain control characters")
	a.Post("/v1/admin/update-notes", `{"key":"`+key+`","notes":"line 1\nline 2"}`).Expect(t, 200)
	// Nothing was deleted or revoked on the way.
	c.Post("/v1/verify-license", `{"key":"`+key+`"}`).Expect(t, 200)

	const badPath = `{"error":"Invalid URL: the path contains a control character"}`
	for _, path := range []string{"/v1/export-license/x%0A", "/v1/export-license/%7F/file", "/v1/list-activations/x%00", "/v1/admin/license/%0D"} {
		a.Get(path).Expect(t, 400).ExpectBody(t, badPath)
	}
	a.Get("/v1/list-licenses?issued_to=a%01").ExpectError(t, 400, "Invalid value for query parameter issued_to")
	a.Get("/v1/list-licenses?%01=1").ExpectError(t, 400, "Invalid URL: a query parameter name contains a control character")
	c.Post("/v1/webhooks/storefront/%ff", `{}`).ExpectError(t, 400, "Invalid URL: the path is not UTF-8")
	c.Post("/v1/webhooks/storefront/wh%0A", `{}`).ExpectError(t, 400, "Invalid URL: the path contains a control character")
}

// net/http's own refusals, through the real gateway, are JSON (addendum §6).
func TestEveryByte_NetHTTPErrorsAreJSON(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	addr := strings.TrimPrefix(s.URL, "http://")
	for _, tc := range []struct{ request, want string }{
		{"GARBAGE\r\n\r\n", `400 {"error":"Bad request"}`},
		{"GET / HTTP/1.1\r\n\r\n", `400 {"error":"Bad request: missing required Host header"}`},
		{"GET / HTTP/1.1\r\nHost: x\r\nno colon\r\n\r\n", `400 {"error":"Bad request"}`},
		{"GET / HTTP/9.9\r\nHost: x\r\n\r\n", `505 {"error":"HTTP version not supported: unsupported protocol version"}`},
		{"POST /v1/verify-license HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: zip\r\n\r\n", `501 {"error":"Not implemented"}`},
	} {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(conn, tc.request)
		_ = conn.SetReadDeadline(time.Now().Add(time.Minute))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("%q: %v", tc.request, err)
		}
		body, _ := io.ReadAll(resp.Body)
		conn.Close()
		if got := fmt.Sprintf("%d %s", resp.StatusCode, body); got != tc.want || resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%q: %s (%s), want %s", tc.request, got, resp.Header.Get("Content-Type"), tc.want)
		}
	}
}

// The console's and portal's paths, queries and forms: the probe's 11 cases of 500.
func TestEveryByte_ConsoleAndPortal(t *testing.T) {
	s := hosted(t)
	tenant := newTenant(t, s)
	key := issueLicense(t, tenant, lic(product("bytes-console")))

	// The portal is public: a path it cannot read is its plain 404.
	buyer := newWebClient(t, s)
	for _, path := range []string{"/portal/%ff%fe", "/portal/x%0A", "/portal/%00", "/portal/%ff/deactivate"} {
		buyer.get(path).expect(t, 404, "This link is not valid")
	}
	buyer.post("/portal/%ff%fe/deactivate", url.Values{"instance_id": {"x"}}).expect(t, 404, "This link is not valid")

	// Sign-in form fields.
	login := newWebClient(t, s)
	token := login.get("/console/login").expect(t, 200).csrf(t)
	login.post("/console/login", url.Values{"csrf": {token}, "mode": {"password"}, "email": {"a@example.com"}, "password": {"\xff"}}).
		expect(t, 400, "password is not valid UTF-8")
	login.post("/console/login", url.Values{"csrf": {token}, "mode": {"key"}, "api_key": {"k\x01"}}).
		expect(t, 400, "api_key must not contain control characters")

	c := newWebClient(t, s)
	csrf := c.signIn(tenant.Token)
	for _, tc := range []struct {
		path string
		form url.Values
		want string
	}{
		{"/console/licenses/" + key + "/notes", url.Values{"notes": {"\xff"}}, "notes is not valid UTF-8"},
		{"/console/licenses/" + key + "/notes", url.Values{"notes": {"a\x00"}}, "notes must not contain NUL characters"},
		{"/console/licenses", url.Values{"tier": {"\xff"}, "product_id": {"p"}, "issued_to": {"x"}}, "tier is not valid UTF-8"},
		{"/console/licenses", url.Values{"tier": {"pro"}, "product_id": {"p\n"}, "issued_to": {"x"}}, "product_id must not contain control characters"},
		{"/console/releases", url.Values{"product_id": {"p"}, "version": {"\xff"}}, "version is not valid UTF-8"},
		{"/console/storefront/webhooks/wh_1/secret", url.Values{"signing_secret": {"whsec_\xff"}}, "signing_secret is not valid UTF-8"},
		{"/console/settings/password", url.Values{"password": {"\xff\xfe"}, "confirm": {"\xff\xfe"}}, "confirm is not valid UTF-8"},
		{"/console/billing/checkout", url.Values{"plan": {"\xff"}}, "plan is not valid UTF-8"},
		{"/console/licenses/" + key + "/seats/deactivate", url.Values{"instance_id": {"\x7f"}}, "instance_id must not contain control characters"},
	} {
		tc.form.Set("csrf", csrf)
		c.post(tc.path, tc.form).expect(t, 400, tc.want)
	}
	for _, path := range []string{"/console/licenses/%ff", "/console/licenses/%ff%fe/delete", "/console/licenses/x%0A"} {
		c.get(path).expect(t, 404, "Not found")
	}
	c.get("/console/licenses?issued_to=%ff").expect(t, 400, "issued_to is not valid UTF-8")
	c.get("/console/storefront?outcome=%01").expect(t, 400, "outcome must not contain control characters")
	// Nothing above changed the license; the console still works.
	c.get("/console/licenses/"+key).expect(t, 200, key)
}

// A /v1 path with an empty, . or .. segment is a JSON 400 in the words of the other URL
// refusals; it was http.ServeMux's 307 with an HTML body, which sent a POST on to the
// route its cleaned path named (/v1/webhook-endpoints/../update to /v1/update).
func TestEveryByte_DotAndEmptyPathSegmentsAreA400(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a := admin(t, s)
	const badPath = "Invalid URL: the path has an empty, . or .. segment"
	for _, tc := range []struct{ method, path string }{
		{http.MethodGet, "/v1/products/../policies"},
		{http.MethodPost, "/v1/webhook-endpoints/../update"},
		{http.MethodGet, "//v1/list-licenses"},
		{http.MethodGet, "/v1/./list-licenses"},
		{http.MethodPost, "/console/../v1/issue-license"},
	} {
		r := a.Do(tc.method, tc.path, nil)
		if r.Header.Get("Location") != "" {
			t.Errorf("%s %s: redirected to %s", tc.method, tc.path, r.Header.Get("Location"))
		}
		r.ExpectError(t, 400, badPath)
	}
	a.Get("/v1/list-licenses").Expect(t, 200)
}

// Two Authorization headers are a 400, whichever comes first: the edge judged the first
// (valid then wrong was a 200, wrong then valid a 403), and a proxy in front may judge
// the other (Authorization is not a list header, RFC 9110).
func TestEveryByte_TwoAuthorizationHeadersAreA400(t *testing.T) {
	t.Parallel()
	self, multi := selfHosted(t), hosted(t)
	for mode, s := range map[string]*stack.Stack{"self-hosted": self, "hosted": multi} {
		who := admin(t, s)
		if s == multi {
			who = newTenant(t, s)
		}
		valid := "Bearer " + who.Token
		for _, order := range [][]string{{valid, "Bearer wrong"}, {"Bearer wrong", valid}, {valid, valid}} {
			for _, route := range []struct{ method, path, body string }{
				{http.MethodGet, "/v1/list-licenses", ""},
				{http.MethodPost, "/v1/verify-license", `{"key":"NOPE"}`},
			} {
				req, err := http.NewRequest(route.method, s.URL+route.path, strings.NewReader(route.body))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("X-Forwarded-For", anon(t, s).IP)
				for _, v := range order {
					req.Header.Add("Authorization", v)
				}
				resp, err := httpClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if got := fmt.Sprintf("%d %s", resp.StatusCode, body); got != `400 {"error":"Authorization must be sent once"}` {
					t.Errorf("%s %s %s with %d Authorization headers: %s", mode, route.method, route.path, len(order), got)
				}
			}
		}
		who.Get("/v1/list-licenses").Expect(t, 200) // one header is judged as before
	}
}
