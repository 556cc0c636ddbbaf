package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/keyhouse/keyhouse/devinfra/testkit"
	"github.com/keyhouse/keyhouse/stack"
)

// Bad input at the edge (issue 9's black-box probe): every case is a clear 4xx with an
// {"error": …} body, never a 500, and nothing is applied.

func TestInvalidUTF8InThePathOrQueryIsA400(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a, c := admin(t, s), anon(t, s)
	const badPath = `{"error":"Invalid URL: the path is not UTF-8"}`
	for _, path := range []string{
		"/v1/export-license/%ff%fe",
		"/v1/export-license/%ff%fe/file",
		"/v1/export-license/%ff%fe/offline",
	} {
		c.Get(path).Expect(t, 400).ExpectBody(t, badPath)
	}
	for _, path := range []string{"/v1/list-activations/%ff", "/v1/admin/license/%C3%28", "/v1/release/%ff"} {
		a.Get(path).Expect(t, 400).ExpectBody(t, badPath)
	}
	a.Get("/v1/list-licenses?issued_to=%ff").ExpectError(t, 400, "Invalid value for query parameter issued_to")
	a.Get("/v1/list-licenses?product_id=ok&issued_to=a%fe").ExpectError(t, 400, "Invalid value for query parameter issued_to")
	a.Get("/v1/list-licenses?%ff=1").ExpectError(t, 400, "Invalid URL: the query is not UTF-8")
	// The same routes still answer valid UTF-8 as before, rate-limit headers included.
	r := c.Get("/v1/export-license/" + url.PathEscape("ключ"))
	r.ExpectError(t, 404, errNotFound)
	if r.Header.Get("X-RateLimit-Limit") != "500" {
		t.Fatalf("rate-limit headers: %v", r.Header)
	}
	a.Get("/v1/list-licenses?issued_to="+url.QueryEscape("Zoë")).Expect(t, 200)
}

func TestTrailingDataAfterTheJSONValueIsRefusedAndNotApplied(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a, c := admin(t, s), anon(t, s)
	key := issueLicense(t, a, lic(product("trailing"), "limits", map[string]any{"users": 100}))
	tok := seat(t, c, key, "host-a")
	for _, body := range []string{
		`{"key":"` + key + `"} garbage`,
		`{"key":"` + key + `"}{"key":"B"}`,
		`{"key":"` + key + `"} {}`,
		`{"key":"` + key + `"}]`,
	} {
		c.Post("/v1/verify-license", body).ExpectError(t, 400, "Invalid JSON body")
	}
	track := `{"key":"` + key + `","token":"` + tok + `","metric":"users","increment":5}`
	c.Post("/v1/track-usage", track+` {"key":"B"}`).ExpectError(t, 400, "Invalid JSON body")
	c.Post("/v1/track-usage", track+track).ExpectError(t, 400, "Invalid JSON body")
	// White space around the one value is fine, and nothing above was applied.
	c.Post("/v1/track-usage", "\n "+track+" \r\n").ExpectBody(t, `{"ok":true,"metric":"users","usage":5}`)
}

func TestAStringWhereAPIMDSaysNumberIsA400(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a, c := admin(t, s), anon(t, s)
	key := issueLicense(t, a, lic(product("string-number"), "limits", map[string]any{"users": 100}))
	tok := seat(t, c, key, "host-a")
	body := `{"key":"` + key + `","token":"` + tok + `","metric":"users","increment":"5"}`
	c.Post("/v1/track-usage", body).ExpectError(t, 400, `Invalid JSON body: invalid value for double field increment: "5"`)
	trackUsage(c, key, tok, "users").ExpectBody(t, `{"ok":true,"metric":"users","usage":1}`)

	p := product("string-id")
	id := registerRelease(t, a, rel(p, "1.0.0"))
	a.Post("/v1/unpublish-release", `{"id":"`+strconv.Itoa(id)+`"}`).ExpectError(t, 400, `Invalid JSON body: invalid value for int32 field id: "`+strconv.Itoa(id)+`"`)
	a.Get("/v1/release/"+strconv.Itoa(id)).Expect(t, 200)
	if st := a.Get("/v1/release/" + strconv.Itoa(id)).JSON(t)["status"]; st != "published" {
		t.Fatalf("release %d is %v after a refused unpublish", id, st)
	}
	a.Post("/v1/unpublish-release", `{"id":`+strconv.Itoa(id)+`}`).ExpectBody(t, `{"id":`+strconv.Itoa(id)+`,"status":"unpublished"}`)

	// The integers, plain and wrapped (google.protobuf.Int64Value), as the OpenAPI
	// document types them: integer. The body is refused before the endpoint is looked up.
	lp := product("string-int64")
	a.Do("PUT", "/v1/products/"+lp+"/policies/pro", `{"lease_ttl_seconds":"3600"}`).
		ExpectError(t, 400, `Invalid JSON body: invalid value for int32 field lease_ttl_seconds: "3600"`)
	a.Do("PUT", "/v1/products/"+lp+"/policies/pro", `{"lease_ttl_seconds":3600,"renew_after_seconds":"60"}`).
		ExpectError(t, 400, `Invalid JSON body: invalid value for int32 field renew_after_seconds: "60"`)
	if policies := a.Get("/v1/products/"+lp+"/policies").Expect(t, 200).JSON(t)["policies"]; len(policies.([]any)) != 0 {
		t.Fatalf("a refused policy was stored: %v", policies)
	}
	a.Post("/v1/lease-keys/rotate", `{"retire_after_seconds":"3600"}`).
		ExpectError(t, 400, `Invalid JSON body: invalid value for int64 field retire_after_seconds: "3600"`)
	a.Post("/v1/webhook-endpoints/we_none/roll-secret", `{"expire_old_after_seconds":"3600"}`).
		ExpectError(t, 400, `Invalid JSON body: invalid value for int64 field expire_old_after_seconds: "3600"`)
	a.Post("/v1/webhook-endpoints/we_none/roll-secret", `{"expire_old_after_seconds":3600}`).ExpectError(t, 404, "Webhook endpoint not found")
}

// A wrong type in a wrapper-typed field, a map, a list or an object, and a string escape
// the decoder cannot read, are refused naming the field the client sent (the decoder's
// parser named a wrapper's inner "value", or nothing, and quoted the bytes after a bad
// escape, which can be another field's secret). Nothing is applied.
func TestATypeErrorNamesTheFieldTheClientSent(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a, c := admin(t, s), anon(t, s)
	p := product("type-error")
	key := issueLicense(t, a, lic(p, "limits", map[string]any{"users": 100}))
	tok := seat(t, c, key, "host-a")
	for _, tc := range []struct {
		client      *Client
		path, body  string
		wantRefusal string
	}{
		{a, "/v1/webhook-endpoints/we_none/update", `{"enabled":1}`, "invalid value for bool field enabled: 1"},
		{a, "/v1/webhook-endpoints/we_none/update", `{"url":5}`, "invalid value for string field url: 5"},
		{a, "/v1/webhook-endpoints/we_none/update", `{"events":"license.issued"}`, `invalid value for array field events: "license.issued"`},
		{a, "/v1/webhook-endpoints/we_none/roll-secret", `{"expire_old_after_seconds":true}`, "invalid value for int64 field expire_old_after_seconds: true"},
		{a, "/v1/webhook-endpoints", `{"url":"https://192.0.2.10/hook","events":["*"],"description":7}`, "invalid value for string field description: 7"},
		{a, "/v1/webhook-endpoints", `{"url":"https://192.0.2.10/hook","events":"*"}`, `invalid value for array field events: "*"`},
		{a, "/v1/issue-license", `{"tier":"pro","product_id":"` + p + `","issued_to":"t@example.com","limits":1}`, "invalid value for object field limits: 1"},
		{a, "/v1/admin/update-license-terms", `{"key":"` + key + `","limits":[1]}`, "invalid value for object field limits: [1]"},
		{a, "/v1/licenses/import", `{"licenses":1}`, "invalid value for array field licenses: 1"},
		{c, "/v1/leases", `{"key":"` + key + `","token":"` + tok + `","components":1}`, "invalid value for object field components: 1"},
		{c, "/v1/leases", `{"key":"` + key + `","token":"` + tok + `","components":{"cpu":1}}`, "invalid value for string field components: 1"},
		// A lone surrogate before another member: that member (here the token) is not quoted.
		{c, "/v1/leases", `{"key":"\ud800","token":"` + tok + `"}`, "invalid escape in string field key"},
		{c, "/v1/activate-license", `{"instance_id":"a\udc00","key":"` + key + `"}`, "invalid escape in string field instance_id"},
		{a, "/v1/admin/update-license-terms", `{"key":"` + key + `","limits":{"users":"\ud800"},"max_activations":9}`, "invalid escape in string field limits"},
	} {
		tc.client.Post(tc.path, tc.body).ExpectError(t, 400, "Invalid JSON body: "+tc.wantRefusal)
	}
	// An array or object where a number belongs is quoted whole, not as its "[" or "{".
	a.Do("PUT", "/v1/products/"+p+"/policies/pro", `{"lease_ttl_seconds":[],"renew_after_seconds":60}`).
		ExpectError(t, 400, "Invalid JSON body: invalid value for int32 field lease_ttl_seconds: []")
	// An import item's mistyped field is that item's problem, not the call's (import.md):
	// the item is invalid, naming the field, and nothing is imported for it.
	resp := a.Post("/v1/licenses/import", `{"licenses":[{"key":"IMPORTED-1","limits":1}]}`).Expect(t, 200)
	if got := string(resp.Body); !strings.Contains(got, `"invalid":1`) || !strings.Contains(got, `"error":"limits must be an object"`) {
		t.Fatalf("an import item with limits 1: %s", got)
	}
	// Nothing above was applied: the license keeps its terms.
	details := a.Get("/v1/admin/license/"+key).Expect(t, 200).JSON(t)
	if details["max_activations"] != float64(1) || fmt.Sprint(details["limits"]) != "map[users:100]" {
		t.Fatalf("after refused bodies: %v", details)
	}
}

func TestGzipBodiesAreDecodedOtherEncodingsAre415(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a, c := admin(t, s), anon(t, s)
	key := issueLicense(t, a, lic(product("gzip")))
	plain := c.Post("/v1/verify-license", `{"key":"`+key+`"}`).Expect(t, 200)
	zipped := c.Do(http.MethodPost, "/v1/verify-license", testkit.Gzip(t, `{"key":"`+key+`"}`), "Content-Encoding", "gzip").Expect(t, 200)
	if !bytes.Equal(plain.Body, zipped.Body) {
		t.Fatalf("gzip answer %s, plain %s", zipped.Body, plain.Body)
	}
	c.Do(http.MethodPost, "/v1/verify-license", testkit.Gzip(t, `{"key":"nope"}`), "Content-Encoding", "gzip").
		ExpectBody(t, `{"valid":false,"error":"License key not found"}`)
	c.Do(http.MethodPost, "/v1/verify-license", `{"key":"`+key+`"}`, "Content-Encoding", "gzip").ExpectError(t, 400, "Invalid gzip body")
	c.Do(http.MethodPost, "/v1/verify-license", `{"key":"`+key+`"}`, "Content-Encoding", "br").
		ExpectError(t, 415, "Unsupported Content-Encoding: use gzip or none")
	// The 1 MiB cap holds for what the gzip body expands to.
	bomb := `{"key":"` + strings.Repeat("A", 2<<20) + `"}`
	c.Do(http.MethodPost, "/v1/verify-license", testkit.Gzip(t, bomb), "Content-Encoding", "gzip").ExpectError(t, 413, "Request body too large")
}

// A gzip body that does not decompress (not gzip at all, or a stream cut short) is the
// same 400 on the routes that read their raw bytes as on every other: validate-license
// and the two webhooks answered 500. validate-license answers valid false for a body it
// cannot validate; one it cannot read at all is refused as on every route, like an
// unsupported encoding (415) or a body over the cap (413).
func TestABadGzipBodyIsA400OnTheRawBodyRoutesToo(t *testing.T) {
	t.Parallel()
	whole := testkit.Gzip(t, `{"key":"K","instance_id":"host"}`)
	bad := map[string][]byte{"not gzip": []byte("nope"), "truncated": whole[:len(whole)-10]}
	for mode, s := range map[string]*stack.Stack{"self-hosted": selfHosted(t), "hosted": hosted(t)} {
		for name, body := range bad {
			for _, path := range []string{"/v1/validate-license", "/v1/webhooks/billing", "/v1/webhooks/storefront/wh_probe", "/v1/verify-license"} {
				t.Run(mode+" "+name+" "+path, func(t *testing.T) {
					anon(t, s).Do(http.MethodPost, path, body, "Content-Encoding", "gzip").ExpectError(t, 400, "Invalid gzip body")
				})
			}
		}
	}
	// A gzip body that does decompress is validated as the plain one is.
	s := selfHosted(t)
	a, c := admin(t, s), anon(t, s)
	key := issueLicense(t, a, lic(product("gzip-validate")))
	seat(t, c, key, "host-a")
	c.Do(http.MethodPost, "/v1/validate-license", testkit.Gzip(t, `{"key":"`+key+`","instance_id":"host-a"}`), "Content-Encoding", "gzip").
		ExpectBody(t, `{"valid":true}`)
}

func TestHeadAnswersAsGetWithoutABody(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	c := anon(t, s)
	for _, path := range []string{"/", "/v1/public-key", "/v1/export-license/nope", "/v1/no-such-route"} {
		get := c.Get(path)
		head := c.Do(http.MethodHead, path, nil)
		if head.Status != get.Status || len(head.Body) != 0 {
			t.Fatalf("HEAD %s: %d with %d body bytes; GET: %d", path, head.Status, len(head.Body), get.Status)
		}
		for _, h := range []string{"Content-Type", "X-RateLimit-Limit"} {
			if head.Header.Get(h) != get.Header.Get(h) {
				t.Fatalf("HEAD %s: %s %q, GET %q", path, h, head.Header.Get(h), get.Header.Get(h))
			}
		}
	}
}

// A client that sends its headers and then stops sending the body it announced gets a
// 408 once the gateway's read timeout passes, not a 503 (a server fault).
func TestAStalledRequestBodyIsA408(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ip := newClient(t, s.URL, "").IP
	_, err = io.WriteString(conn, "POST /v1/verify-license HTTP/1.1\r\nHost: keyhouse\r\nContent-Type: application/json\r\n"+
		"X-Forwarded-For: "+ip+"\r\nContent-Length: 100\r\n\r\n{\"key\":")
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(2 * time.Minute))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 408 || string(body) != `{"error":"Request body not received in time"}` {
		t.Fatalf("stalled body: %d %s", resp.StatusCode, body)
	}
}

func TestErrorMessagesCapTheInputTheyEcho(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a, c := admin(t, s), anon(t, s)
	key := issueLicense(t, a, lic(product("echo"), "limits", map[string]any{"users": 5}))
	tok := seat(t, c, key, "host-a")
	huge := strings.Repeat("é", 400_000)
	for _, r := range []*Response{
		trackUsage(c, key, tok, huge).Expect(t, 403),
		a.Post("/v1/issue-license", lic(product("echo"), "limits", map[string]any{huge: 1})).Expect(t, 400),
		trackUsage(c, key, tok, "users", "increment", huge).Expect(t, 400),
	} {
		msg, _ := r.JSON(t)["error"].(string)
		if n := utf8.RuneCountInString(msg); n > 201 || !strings.HasSuffix(msg, "é…") {
			t.Fatalf("error of %d characters: %.80s…", n, msg)
		}
	}
	trackUsage(c, key, tok, "seats").ExpectError(t, 403, "Metric not allowed: seats")
}

func TestAnEmptyStatusFilterIsA400(t *testing.T) {
	t.Parallel()
	a := admin(t, selfHosted(t))
	a.Get("/v1/list-licenses?status=").ExpectError(t, 400, "status must be active or revoked")
	a.Get("/v1/list-licenses?status=active").Expect(t, 200)
	a.Get("/v1/list-licenses").Expect(t, 200)
	a.Get("/v1/list-releases?status=").ExpectError(t, 400, "status must be published or unpublished")
	a.Get("/v1/list-releases?status=published").Expect(t, 200)
}

// One decoder, one wording: every body it cannot read is "Invalid JSON body…", whatever
// went wrong and whichever route.
func TestMalformedBodiesShareOneWording(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a, c := admin(t, s), anon(t, s)
	for body, want := range map[string]string{
		`{"key":"\ud800"}`:    "Invalid JSON body: invalid escape in string field key",
		"{\"key\":\"a\x01\"}": `Invalid JSON body: invalid character '\x01' in string literal`,
		`{"key":"a",`:         "Invalid JSON body: unexpected end of input",
		`{"key" "a"}`:         "Invalid JSON body: invalid character '\"' after object key",
		`{"key":5}`:           "Invalid JSON body: invalid value for string field key: 5",
	} {
		c.Post("/v1/verify-license", body).ExpectError(t, 400, want)
		c.Post("/v1/activate-license", body).ExpectError(t, 400, want)
		a.Post("/v1/revoke-license", body).ExpectError(t, 400, want)
	}
}
