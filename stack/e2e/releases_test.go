package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/devinfra/testkit"
	"github.com/keyhouse/keyhouse/pkg/signing"
	"github.com/keyhouse/keyhouse/stack"
)

// rel is a minimal register-release body; extra fields are merged in.
func rel(productID, version string, extra ...any) map[string]any {
	body := map[string]any{
		"product_id": productID, "version": version,
		"artifact_url": "https://downloads.example.com/" + url.PathEscape(strings.TrimSpace(productID)) + "/" + url.PathEscape(version) + ".tar.gz",
	}
	for i := 0; i+1 < len(extra); i += 2 {
		body[extra[i].(string)] = extra[i+1]
	}
	return body
}

// registerRelease registers a release through the REST edge and returns its id.
func registerRelease(t testing.TB, c *Client, body map[string]any) int {
	t.Helper()
	resp := c.Post("/v1/register-release", body).Expect(t, 200)
	id, ok := resp.JSON(t)["id"].(float64)
	if !ok || id < 1 {
		t.Fatalf("register-release: %s", resp.Body)
	}
	return int(id)
}

// noUpdate is check-update's exact answer when there is nothing to offer.
const noUpdate = `{"update_available":false,"release":null}`

// manifestFields is api.md's order of the check-update release object.
const manifestFields = "product_id,version,channel,platform,artifact_url,checksum,release_notes,signature,issued_at"

// update calls check-update and returns the offered version, "" for no update (after
// checking that answer is exactly the no-update body).
func update(t testing.TB, c *Client, body map[string]any) string {
	t.Helper()
	resp := c.Post("/v1/check-update", body).Expect(t, 200)
	var out struct {
		UpdateAvailable bool `json:"update_available"`
		Release         *struct {
			Version string `json:"version"`
		} `json:"release"`
	}
	if err := json.Unmarshal(resp.Body, &out); err != nil {
		t.Fatal(err)
	}
	if out.Release == nil {
		resp.ExpectBody(t, noUpdate)
		return ""
	}
	if !out.UpdateAvailable {
		t.Fatalf("a release with update_available false: %s", resp.Body)
	}
	return out.Release.Version
}

// check is a check-update body.
func check(key, productID, current string, extra ...any) map[string]any {
	body := map[string]any{"key": key, "product_id": productID, "current_version": current}
	for i := 0; i+1 < len(extra); i += 2 {
		body[extra[i].(string)] = extra[i+1]
	}
	return body
}

func TestRegisterReleaseAndFetchIt(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a := admin(t, s)
	p := product("register")
	resp := a.Post("/v1/register-release", rel(p, "1.4.2", "platform", "linux-x64", "checksum", "sha256:abc123",
		"release_notes", "Fixes <b>&</b> \"quotes\"\nnew line é 🚀")).Expect(t, 200)
	id := int(resp.JSON(t)["id"].(float64))
	resp.ExpectBody(t, `{"id":`+strconv.Itoa(id)+`,"status":"published"}`)

	got := a.Get("/v1/release/"+strconv.Itoa(id)).Expect(t, 200)
	if keys := strings.Join(got.Keys(t), ","); keys != "id,product_id,version,channel,platform,artifact_url,checksum,release_notes,status,signature,created_at" {
		t.Fatalf("release/:id fields %s", keys)
	}
	var r map[string]any
	_ = json.Unmarshal(got.Body, &r)
	if r["id"] != float64(id) || r["product_id"] != p || r["version"] != "1.4.2" || r["channel"] != "stable" ||
		r["platform"] != "linux-x64" || r["checksum"] != "sha256:abc123" || r["status"] != "published" ||
		r["release_notes"] != "Fixes <b>&</b> \"quotes\"\nnew line é 🚀" {
		t.Fatalf("release %s", got.Body)
	}
	created, err := time.Parse(time.RFC3339Nano, r["created_at"].(string))
	if err != nil || !strings.HasSuffix(r["created_at"].(string), "Z") || time.Since(created) > time.Hour {
		t.Fatalf("created_at %v", r["created_at"])
	}
	// The stored signature covers the seven release fields (addendum §5).
	pub, err := signing.ParsePublicKeyPEM(anon(t, s).Get("/v1/public-key").JSON(t)["publicKey"].(string))
	if err != nil {
		t.Fatal(err)
	}
	payload := fmt.Sprintf(`{"product_id":%q,"version":"1.4.2","channel":"stable","platform":"linux-x64","artifact_url":%q,"checksum":"sha256:abc123","release_notes":"Fixes <b>&</b> \"quotes\"\nnew line é 🚀"}`,
		p, r["artifact_url"])
	if err := signing.VerifyRSA(pub, []byte(payload), r["signature"].(string)); err != nil {
		t.Fatalf("release signature over %s: %v", payload, err)
	}
	// Optional fields default: channel stable, the others empty strings.
	id2 := registerRelease(t, a, rel(p, "1.4.3"))
	d := a.Get("/v1/release/" + strconv.Itoa(id2)).JSON(t)
	if d["channel"] != "stable" || d["platform"] != "" || d["checksum"] != "" || d["release_notes"] != "" {
		t.Fatalf("defaults %v", d)
	}
	anon(t, s).Post("/v1/register-release", rel(p, "9.9.9")).ExpectError(t, 403, "Unauthorized")
	anon(t, s).Get("/v1/release/"+strconv.Itoa(id)).ExpectError(t, 403, "Unauthorized")
	newClient(t, s.URL, "wrong-key").Post("/v1/unpublish-release", map[string]any{"id": id}).ExpectError(t, 403, "Unauthorized")
}

func TestRegisterReleaseRejectsBadInput(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a := admin(t, s)
	p := product("bad-input")
	at := func(n int, s string) string { return strings.Repeat(s, n) }
	longURL := func(n int) string {
		return "https://downloads.example.com/" + at(n-len("https://downloads.example.com/"), "a")
	}
	for _, tc := range []struct {
		name string
		body any
		want string
	}{
		{"missing product_id", map[string]any{"version": "1.0.0", "artifact_url": "https://x.example/a"}, "product_id is required"},
		{"blank product_id", rel("  ", "1.0.0"), "product_id is required"},
		{"missing version", map[string]any{"product_id": p, "artifact_url": "https://x.example/a"}, "version is required"},
		{"missing artifact_url", map[string]any{"product_id": p, "version": "1.0.0"}, "artifact_url is required"},
		{"product_id over 200 code points", rel(at(201, "é"), "1.0.0"), "product_id must be at most 200 characters"},
		{"version over 100", rel(p, at(101, "1")), "version must be at most 100 characters"},
		{"channel over 100", rel(p, "1.0.0", "channel", at(101, "ß")), "channel must be at most 100 characters"},
		{"platform over 100", rel(p, "1.0.0", "platform", at(101, "x")), "platform must be at most 100 characters"},
		{"artifact_url over 2048", rel(p, "1.0.0", "artifact_url", longURL(2049)), "artifact_url must be at most 2048 characters"},
		{"checksum over 256", rel(p, "1.0.0", "checksum", at(257, "f")), "checksum must be at most 256 characters"},
		{"release_notes over 10000", rel(p, "1.0.0", "release_notes", at(10001, "😀")), "release_notes must be at most 10000 characters"},
		{"reserved prefix", rel("_service_app", "1.0.0"), "product_id uses a reserved prefix"},
		{"reserved prefix in another case", rel("  _SERVICE_app", "1.0.0"), "product_id uses a reserved prefix"},
		{"ftp url", rel(p, "1.0.0", "artifact_url", "ftp://files.example.com/a.zip"), "artifact_url must be a valid http(s) URL"},
		{"no scheme", rel(p, "1.0.0", "artifact_url", "downloads.example.com/a.zip"), "artifact_url must be a valid http(s) URL"},
		{"scheme-relative", rel(p, "1.0.0", "artifact_url", "//downloads.example.com/a.zip"), "artifact_url must be a valid http(s) URL"},
		{"no host", rel(p, "1.0.0", "artifact_url", "https:///a.zip"), "artifact_url must be a valid http(s) URL"},
		{"scheme only", rel(p, "1.0.0", "artifact_url", "http://"), "artifact_url must be a valid http(s) URL"},
		{"space", rel(p, "1.0.0", "artifact_url", "https://downloads.example.com/my app.zip"), "artifact_url must be a valid http(s) URL"},
		{"javascript", rel(p, "1.0.0", "artifact_url", "javascript:alert(1)"), "artifact_url must be a valid http(s) URL"},
		// The host is a DNS name (an IDN in punycode) or an IP literal, the port 1-65535.
		{"right-to-left override in the host", rel(p, "1.0.0", "artifact_url", "https://\u202eexe.cod/a"), "artifact_url must be a valid http(s) URL"},
		{"zero-width space in the host", rel(p, "1.0.0", "artifact_url", "https://exa\u200bmple.com/a"), "artifact_url must be a valid http(s) URL"},
		{"empty labels", rel(p, "1.0.0", "artifact_url", "https://.../"), "artifact_url must be a valid http(s) URL"},
		{"a hyphen for a host", rel(p, "1.0.0", "artifact_url", "https://-/"), "artifact_url must be a valid http(s) URL"},
		{"Unicode host", rel(p, "1.0.0", "artifact_url", "https://b\u00fccher.example/a"), "artifact_url must be a valid http(s) URL"},
		{"port over 65535", rel(p, "1.0.0", "artifact_url", "https://example.com:99999/a"), "artifact_url must be a valid http(s) URL"},
		{"port 0", rel(p, "1.0.0", "artifact_url", "https://example.com:0/a"), "artifact_url must be a valid http(s) URL"},
		{"bidi override in the path", rel(p, "1.0.0", "artifact_url", "https://example.com/\u202eexe.zip"), "artifact_url must be a valid http(s) URL"},
		{"no-break space", rel(p, "1.0.0", "artifact_url", "https://example.com/my\u00a0app.zip"), "artifact_url must be a valid http(s) URL"},
		// Control characters, a tab included, are the input policy's, as in every field.
		{"tab", rel(p, "1.0.0", "artifact_url", "https://example.com/my\tapp.zip"), "artifact_url must not contain control characters"},
		{"DEL", rel(p, "1.0.0", "artifact_url", "https://example.com/app\u007f.zip"), "artifact_url must not contain control characters"},
		{"NUL in a field", rel(p, "1.0.0", "release_notes", "a\u0000b"), "release_notes must not contain NUL characters"},
		{"NUL in the version", rel(p, "1.0.0\u0000"), "version must not contain NUL characters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a.Post("/v1/register-release", tc.body).ExpectError(t, 400, tc.want)
		})
	}
	// Wrong JSON types are a 400 naming the field as the client spelled it, never a 500.
	for field, body := range map[string]string{
		"product_id": `{"product_id": 5, "version": "1.0.0", "artifact_url": "https://x.example/a"}`,
		"version":    `{"product_id": "p", "version": ["1"], "artifact_url": "https://x.example/a"}`,
	} {
		r := a.Post("/v1/register-release", body).Expect(t, 400)
		if e := r.JSON(t)["error"].(string); !strings.Contains(e, field) {
			t.Fatalf("error does not name %s: %s", field, r.Body)
		}
	}
	a.Post("/v1/register-release", `{"product_id":`).Expect(t, 400)

	// Exactly at every cap (code points, not bytes) is accepted.
	capped := rel(at(200, "é"), at(100, "9"), "channel", at(100, "ß"), "platform", at(100, "x"),
		"artifact_url", longURL(2048), "checksum", at(256, "f"), "release_notes", at(10000, "😀"))
	id := registerRelease(t, a, capped)
	got := a.Get("/v1/release/" + strconv.Itoa(id)).JSON(t)
	if got["release_notes"] != at(10000, "😀") || got["product_id"] != at(200, "é") {
		t.Fatal("capped fields not stored as sent")
	}
	registerRelease(t, a, rel(p, "1.0.0", "artifact_url", "http://downloads.example.com:8080/a.zip?x=1#y"))
	for i, u := range []string{"https://xn--bcher-kva.example/a", "https://192.0.2.7:65535/a", "https://[2001:db8::1]/a", "https://example.com./a"} {
		registerRelease(t, a, rel(p, "1.0."+strconv.Itoa(i+1), "artifact_url", u))
	}
}

func TestDuplicatePublishedReleaseIs409UntilUnpublished(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a := admin(t, s)
	p := product("Dup")
	const dup = "A release already exists for this product_id/version/channel/platform"
	first := registerRelease(t, a, rel(p, "1.0.0", "platform", "linux"))
	a.Post("/v1/register-release", rel(p, "1.0.0", "platform", "linux")).ExpectError(t, 409, dup)
	// The product id as check-update compares it, and the default channel, name the same release.
	a.Post("/v1/register-release", rel("  "+strings.ToLower(p)+" ", "1.0.0", "platform", "linux", "channel", "stable")).ExpectError(t, 409, dup)
	// Any other version, channel or platform is another release.
	registerRelease(t, a, rel(p, "1.0.1", "platform", "linux"))
	registerRelease(t, a, rel(p, "1.0.0", "platform", "Linux"))
	registerRelease(t, a, rel(p, "1.0.0", "platform", "linux", "channel", "beta"))
	registerRelease(t, a, rel(p, "1.0.0+build.2", "platform", "linux"))

	a.Post("/v1/unpublish-release", map[string]any{"id": first}).ExpectBody(t, fmt.Sprintf(`{"id":%d,"status":"unpublished"}`, first))
	again := registerRelease(t, a, rel(p, "1.0.0", "platform", "linux"))
	if again == first {
		t.Fatal("re-registering after unpublish must create a new release")
	}
	if st := a.Get("/v1/release/" + strconv.Itoa(first)).JSON(t)["status"]; st != "unpublished" {
		t.Fatalf("old release %v", st)
	}
	if st := a.Get("/v1/release/" + strconv.Itoa(again)).JSON(t)["status"]; st != "published" {
		t.Fatalf("new release %v", st)
	}
	a.Post("/v1/register-release", rel(p, "1.0.0", "platform", "linux")).ExpectError(t, 409, dup)
	// Unpublishing twice changes nothing and answers the same; there is no republish.
	a.Post("/v1/unpublish-release", map[string]any{"id": first}).ExpectBody(t, fmt.Sprintf(`{"id":%d,"status":"unpublished"}`, first))
}

func TestReleaseNotFoundAndBadIDs(t *testing.T) {
	t.Parallel()
	a := admin(t, selfHosted(t))
	for _, id := range []string{"2147483647", "0", "-4", "abc", "1.5", "99999999999999999999"} {
		a.Get("/v1/release/"+id).ExpectError(t, 404, "Release not found")
	}
	// An id is digits: a sign makes it no number (leading zeros keep it one).
	id := strconv.Itoa(registerRelease(t, a, rel(product("bad-ids"), "1.0.0")))
	a.Get("/v1/release/+"+id).ExpectError(t, 404, "Release not found")
	a.Get("/v1/release/0"+id).Expect(t, 200)
	a.Post("/v1/unpublish-release", map[string]any{"id": 2147483647}).ExpectError(t, 404, "Release not found")
	a.Post("/v1/unpublish-release", map[string]any{"id": -1}).ExpectError(t, 404, "Release not found")
	a.Post("/v1/unpublish-release", map[string]any{}).ExpectError(t, 400, "id is required")
	r := a.Post("/v1/unpublish-release", `{"id": "seven"}`).Expect(t, 400)
	if !strings.Contains(r.JSON(t)["error"].(string), "id") {
		t.Fatalf("error does not name id: %s", r.Body)
	}
}

func TestReleaseRoutesAreTenantScoped(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	a, b := newTenant(t, s), newTenant(t, s)
	id := registerRelease(t, a, rel(product("scoped"), "1.0.0"))
	path := "/v1/release/" + strconv.Itoa(id)
	b.Get(path).ExpectError(t, 404, "Release not found")
	b.Post("/v1/unpublish-release", map[string]any{"id": id}).ExpectError(t, 404, "Release not found")
	if total := b.Get("/v1/list-releases").JSON(t)["total"]; total != 0.0 {
		t.Fatalf("tenant b lists %v releases", total)
	}
	if st := a.Get(path).Expect(t, 200).JSON(t)["status"]; st != "published" {
		t.Fatalf("tenant b's unpublish reached tenant a's release: %v", st)
	}
	// Hosted: the admin key is not a tenant credential.
	admin(t, s).Get(path).ExpectError(t, 403, "Unauthorized")
	admin(t, s).Post("/v1/register-release", rel(product("scoped"), "1.0.0")).ExpectError(t, 403, "Unauthorized")
}

func TestListReleases(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	a := newTenant(t, s)
	p, q := product("List-P"), product("list-q")
	r1 := registerRelease(t, a, rel(p, "1.0.0", "platform", "linux"))
	r2 := registerRelease(t, a, rel(p, "1.1.0", "platform", "mac", "checksum", "sha256:ff"))
	r3 := registerRelease(t, a, rel(p, "2.0.0-beta.1", "channel", "beta", "platform", "linux"))
	r4 := registerRelease(t, a, rel(q, "0.1.0"))
	a.Post("/v1/unpublish-release", map[string]any{"id": r1}).Expect(t, 200)

	resp := a.Get("/v1/list-releases").Expect(t, 200)
	if keys := strings.Join(resp.Keys(t), ","); keys != "releases,total" {
		t.Fatalf("fields %s", keys)
	}
	var page struct {
		Releases []json.RawMessage `json:"releases"`
	}
	_ = json.Unmarshal(resp.Body, &page)
	if got := strings.Join((&Response{Body: page.Releases[0]}).Keys(t), ","); got != "id,product_id,version,channel,platform,artifact_url,checksum,release_notes,status,created_at" {
		t.Fatalf("row fields %s (no signature)", got)
	}
	ids := func(query string) (string, float64) {
		body := a.Get("/v1/list-releases"+query).Expect(t, 200).JSON(t)
		var out []string
		for _, r := range body["releases"].([]any) {
			out = append(out, strconv.Itoa(int(r.(map[string]any)["id"].(float64))))
		}
		return strings.Join(out, ","), body["total"].(float64)
	}
	list := func(ids ...int) string {
		var s []string
		for _, id := range ids {
			s = append(s, strconv.Itoa(id))
		}
		return strings.Join(s, ",")
	}
	for _, tc := range []struct {
		query, want string
		total       float64
	}{
		{"", list(r4, r3, r2, r1), 4},
		{"?product_id=" + p, list(r3, r2, r1), 3},
		{"?product_id=" + strings.ToUpper(p), list(r3, r2, r1), 3},
		{"?channel=beta", list(r3), 1},
		{"?channel=stable&platform=linux", list(r1), 1},
		{"?platform=mac", list(r2), 1},
		{"?status=published", list(r4, r3, r2), 3},
		{"?status=unpublished", list(r1), 1},
		{"?product_id=" + p + "&status=published&channel=stable", list(r2), 1},
		{"?limit=2", list(r4, r3), 4},
		{"?limit=2&offset=2", list(r2, r1), 4},
		{"?offset=10", "", 4},
		{"?limit=1000", list(r4, r3, r2, r1), 4},
		{"?limit=02", list(r4, r3), 4},
		{"?product_id=nothing", "", 0},
	} {
		if got, total := ids(tc.query); got != tc.want || total != tc.total {
			t.Errorf("%s: ids %s total %v, want %s total %v", tc.query, got, total, tc.want, tc.total)
		}
	}
	for query, msg := range map[string]string{
		"?status=deleted":   "status must be published or unpublished",
		"?status=PUBLISHED": "status must be published or unpublished",
		"?limit=0":          "limit must be an integer between 1 and 1000",
		"?limit=1001":       "limit must be an integer between 1 and 1000",
		"?limit=ten":        "limit must be an integer between 1 and 1000",
		"?offset=-1":        "offset must be a non-negative integer",
		"?offset=x":         "offset must be a non-negative integer",
		// Digits only: a sign is no number ("limit=+2" is " 2" in a query string).
		"?limit=%2B2":  "limit must be an integer between 1 and 1000",
		"?limit=+2":    "limit must be an integer between 1 and 1000",
		"?offset=%2B1": "offset must be a non-negative integer",
		// The input policy: no control character (NUL included) in a query value.
		"?channel=beta%00": "Invalid value for query parameter channel",
	} {
		a.Get("/v1/list-releases"+query).ExpectError(t, 400, msg)
	}
}

func TestIdempotencyKeyOnRegisterRelease(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	a := newTenant(t, s)
	p := product("idem-release")
	idem := "release-" + p
	first := a.Do(http.MethodPost, "/v1/register-release", rel(p, "1.0.0"), "Idempotency-Key", idem).Expect(t, 200)
	again := a.Do(http.MethodPost, "/v1/register-release", rel(p, "1.0.0"), "Idempotency-Key", idem).Expect(t, 200)
	if string(again.Body) != string(first.Body) {
		t.Fatalf("replay %s, first %s", again.Body, first.Body)
	}
	a.Do(http.MethodPost, "/v1/register-release", rel(p, "1.0.1"), "Idempotency-Key", idem).
		ExpectError(t, 409, "Idempotency-Key reused with a different request")
	if total := a.Get("/v1/list-releases?product_id=" + p).JSON(t)["total"]; total != 1.0 {
		t.Fatalf("%v releases after a replay", total)
	}
}

// Hosted, a registration refused by releases' own checks claims nothing: an
// Idempotency-Key reused with a release of a new product leaves that product free for
// another tenant, and a duplicate is still the 409 it was.
func TestHostedRefusedRegistrationLeavesTheProductFree(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	a, b := newTenant(t, s), newTenant(t, s)
	mine := product("refused-release-mine")
	idem := "release-" + mine
	a.Do(http.MethodPost, "/v1/register-release", rel(mine, "1.0.0"), "Idempotency-Key", idem).Expect(t, 200)
	free := product("refused-release-free")
	a.Do(http.MethodPost, "/v1/register-release", rel(free, "1.0.0"), "Idempotency-Key", idem).
		ExpectError(t, 409, "Idempotency-Key reused with a different request")
	a.Post("/v1/register-release", rel(mine, "1.0.0")).ExpectError(t, 409, "A release already exists for this product_id/version/channel/platform")
	issueLicense(t, b, lic(free))
	a.Post("/v1/register-release", rel(free, "1.0.0")).ExpectError(t, 403, "product_id is owned by a different tenant")
	b.Post("/v1/register-release", rel(mine, "1.0.0")).ExpectError(t, 403, "product_id is owned by a different tenant")
}

// registerAtOnce sends the bodies to register-release at the same moment, each from a
// client of its own, and returns the ids of those published. Every other answer must be
// status with the error message refusal.
func registerAtOnce(t *testing.T, s *stack.Stack, bodies []map[string]any, status int, refusal string) []int {
	t.Helper()
	resps := make([]*Response, len(bodies))
	var wg sync.WaitGroup
	for i, body := range bodies {
		c := admin(t, s)
		wg.Add(1)
		go func() {
			defer wg.Done()
			resps[i] = c.Post("/v1/register-release", body)
		}()
	}
	wg.Wait()
	var ids []int
	for _, r := range resps {
		if r.Status == 200 {
			ids = append(ids, int(r.JSON(t)["id"].(float64)))
			continue
		}
		r.ExpectError(t, status, refusal)
	}
	return ids
}

// Parallel registrations of one release: exactly one is published, the rest are 409.
func TestConcurrentDuplicateRegistrationsPublishOnce(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	for round := 0; round < 3; round++ {
		p := product("race")
		bodies := make([]map[string]any, 12)
		for i := range bodies {
			bodies[i] = rel(p, "3.1.4", "platform", "any")
		}
		if ids := registerAtOnce(t, s, bodies, 409, "A release already exists for this product_id/version/channel/platform"); len(ids) != 1 {
			t.Fatalf("round %d: %d registrations published", round, len(ids))
		}
		if total := admin(t, s).Get("/v1/list-releases?product_id=" + p).JSON(t)["total"]; total != 1.0 {
			t.Fatalf("%v rows", total)
		}
	}
}

// The limit of 500 published releases per product/channel/platform holds under parallel
// registration; it counts published releases only; and selection stays right at that size.
func TestPublishedReleaseLimitIs500(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	p := product("limit")
	const limitMsg = "Release limit reached: at most 500 published releases per product_id/channel/platform; unpublish one to register another"
	// 490 releases from 7 workers, each a fresh client (IP) every 90 registrations: the
	// Management tier allows 100 per 15 minutes per IP. 9.9.9 is the highest of all.
	const workers, prefill = 7, 490
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var c *Client
			for i, n := w, 0; i < prefill; i, n = i+workers, n+1 {
				if n%90 == 0 {
					c = admin(t, s)
				}
				v := fmt.Sprintf("1.%d.%d", i%7, i)
				if i == 250 {
					v = "9.9.9"
				}
				c.Post("/v1/register-release", rel(p, v)).Expect(t, 200)
			}
		}()
	}
	wg.Wait()
	// 20 at once for the last 10 places: exactly 10 win.
	last := make([]map[string]any, 20)
	for i := range last {
		last[i] = rel(p, fmt.Sprintf("2.0.%d", i))
	}
	won := registerAtOnce(t, s, last, 403, limitMsg)
	if len(won) != 10 {
		t.Fatalf("%d of the last 20 registrations published, want 10", len(won))
	}
	a := admin(t, s)
	if total := a.Get("/v1/list-releases?status=published&product_id=" + p).JSON(t)["total"]; total != 500.0 {
		t.Fatalf("%v published", total)
	}
	a.Post("/v1/register-release", rel(p, "3.0.0")).ExpectError(t, 403, limitMsg)
	// Another platform or channel of the product has its own 500.
	registerRelease(t, a, rel(p, "3.0.0", "platform", "win"))
	registerRelease(t, a, rel(p, "3.0.0", "channel", "beta"))

	key := issueLicense(t, a, lic(p))
	c := anon(t, s)
	if v := update(t, c, check(key, p, "1.0.0")); v != "9.9.9" {
		t.Fatalf("latest of 500 is %q, want 9.9.9", v)
	}
	// Unpublishing frees a place; the new highest wins at once.
	a.Post("/v1/unpublish-release", map[string]any{"id": won[0]}).Expect(t, 200)
	registerRelease(t, a, rel(p, "10.0.0"))
	if v := update(t, c, check(key, p, "9.9.9")); v != "10.0.0" {
		t.Fatalf("after a swap the latest is %q", v)
	}
}

func TestCheckUpdateRules(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a, c := admin(t, s), anon(t, s)
	p := product("Acme-App")
	key := issueLicense(t, a, lic(p))
	for _, v := range []string{"1.0.0", "1.2.0", "1.10.0", "1.9.9"} {
		registerRelease(t, a, rel(p, v, "platform", "linux"))
	}
	registerRelease(t, a, rel(p, "2.0.0-beta.1", "channel", "beta", "platform", "linux"))
	registerRelease(t, a, rel(p, "1.5.0", "platform", "windows"))
	registerRelease(t, a, rel(p, "0.9.0"))

	for _, tc := range []struct {
		rule, want string
		body       map[string]any
	}{
		{"4: highest semver, numerically (1.10.0 > 1.9.9)", "1.10.0", check(key, p, "1.0.0", "platform", "linux")},
		{"channel defaults to stable", "1.10.0", check(key, p, "1.0.0", "platform", "linux", "channel", "")},
		{"1: product_id ignores case and surrounding white space", "1.10.0", check(key, "  "+strings.ToUpper(p)+"\t", "1.0.0", "platform", "linux")},
		{"1, 3: another product is no update", "", check(key, p+"-pro", "1.0.0", "platform", "linux")},
		{"2, 3: channel is case-sensitive", "", check(key, p, "1.0.0", "platform", "linux", "channel", "Stable")},
		{"2, 3: platform is case-sensitive", "", check(key, p, "1.0.0", "platform", "Linux")},
		{"2: the channel picks its own releases", "2.0.0-beta.1", check(key, p, "1.10.0", "platform", "linux", "channel", "beta")},
		{"2: the platform picks its own releases", "1.5.0", check(key, p, "1.0.0", "platform", "windows")},
		{"2: no platform matches releases registered without one", "0.9.0", check(key, p, "0.1.0")},
		{"2, 3: an unknown channel is no update", "", check(key, p, "1.0.0", "platform", "linux", "channel", "nightly")},
		{"5: current version is the latest", "", check(key, p, "1.10.0", "platform", "linux")},
		{"5: a newer current version counts as current", "", check(key, p, "1.11.0", "platform", "linux")},
		{"5: build metadata does not make a version newer", "", check(key, p, "1.10.0+local.7", "platform", "linux")},
		{"5: a pre-release of the latest is behind it", "1.10.0", check(key, p, "1.10.0-rc.1", "platform", "linux")},
		{"4: a non-semver current version is behind any semver release", "1.10.0", check(key, p, "dev-build", "platform", "linux")},
		{"a leading v is the same version", "", check(key, p, "v1.10.0", "platform", "linux")},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			if got := update(t, c, tc.body); got != tc.want {
				t.Fatalf("offered %q, want %q", got, tc.want)
			}
		})
	}
	// A channel or platform no release can have (a NUL) is refused by the input policy.
	c.Post("/v1/check-update", check(key, p, "1.0.0", "platform", "linux\u0000", "channel", "stable")).ExpectError(t, 400, "platform must not contain NUL characters")

	// The raw JSON: fields in api.md's order, the release's values, issued_at = now.
	before := time.Now().UTC().Truncate(time.Second)
	resp := c.Post("/v1/check-update", check(key, p, "1.0.0", "platform", "linux")).Expect(t, 200)
	after := time.Now().UTC()
	if keys := strings.Join(resp.Keys(t), ","); keys != "update_available,release" {
		t.Fatalf("fields %s", keys)
	}
	var out struct {
		Release json.RawMessage `json:"release"`
	}
	_ = json.Unmarshal(resp.Body, &out)
	if keys := strings.Join((&Response{Body: out.Release}).Keys(t), ","); keys != manifestFields {
		t.Fatalf("release fields %s", keys)
	}
	var m map[string]string
	_ = json.Unmarshal(out.Release, &m)
	issued, err := time.Parse(time.RFC3339Nano, m["issued_at"])
	if err != nil || !strings.HasSuffix(m["issued_at"], "Z") || issued.Before(before) || issued.After(after) {
		t.Fatalf("issued_at %q is not the time of the response (%s .. %s)", m["issued_at"], before, after)
	}
	if m["product_id"] != p || m["channel"] != "stable" || m["platform"] != "linux" || m["checksum"] != "" ||
		m["artifact_url"] != "https://downloads.example.com/"+p+"/1.10.0.tar.gz" || m["signature"] == "" {
		t.Fatalf("release %s", out.Release)
	}
}

func TestCheckUpdateValidatesTheLicenseAsVerifyLicenseDoes(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a, c := admin(t, s), anon(t, s)
	p := product("gate")
	registerRelease(t, a, rel(p, "2.0.0"))
	key := issueLicense(t, a, lic(p, "max_activations", 1))
	// No activation is needed; a key typed without dashes in lower case is the same key.
	if v := update(t, c, check(strings.ToLower(strings.ReplaceAll(key, "-", "")), p, "1.0.0")); v != "2.0.0" {
		t.Fatalf("offered %q", v)
	}
	c.Post("/v1/check-update", check("NOPE-NOPE", p, "1.0.0")).ExpectError(t, 404, "License key not found")
	c.Post("/v1/check-update", check("", p, "1.0.0")).ExpectError(t, 404, "License key not found")
	expired := issueLicense(t, a, lic(p, "expires_at", "2021-06-01T00:00:00Z"))
	c.Post("/v1/check-update", check(expired, p, "1.0.0")).ExpectError(t, 403, "License has expired")
	revoked := issueLicense(t, a, lic(p))
	a.Post("/v1/revoke-license", map[string]any{"key": revoked, "revoked": true}).Expect(t, 200)
	c.Post("/v1/check-update", check(revoked, p, "1.0.0")).ExpectError(t, 403, "License is not active")
	a.Post("/v1/revoke-license", map[string]any{"key": revoked, "revoked": false}).Expect(t, 200)
	settles(t, "the reactivation reaches releases", func() bool {
		return c.Post("/v1/check-update", check(revoked, p, "1.0.0")).Status == 200
	})
	if v := update(t, c, check(revoked, p, "1.0.0")); v != "2.0.0" {
		t.Fatalf("reactivated license offered %q", v)
	}
	deleted := issueLicense(t, a, lic(p))
	a.Delete("/v1/delete-license", map[string]string{"key": deleted}).Expect(t, 200)
	c.Post("/v1/check-update", check(deleted, p, "1.0.0")).ExpectError(t, 404, "License key not found")

	c.Post("/v1/check-update", map[string]any{"key": key, "current_version": "1.0.0"}).ExpectError(t, 400, "product_id is required")
	c.Post("/v1/check-update", map[string]any{"key": key, "product_id": p}).ExpectError(t, 400, "current_version is required")
	// White space only is no version (it was offered the latest), also for a license whose
	// answers the gateway keeps (the checks above): refused before any answer is looked up,
	// and never kept.
	for range 2 {
		c.Post("/v1/check-update", check(key, p, "   ")).ExpectError(t, 400, "current_version is required")
	}
	c.Post("/v1/check-update", `{"key": 12}`).Expect(t, 400)
}

// Ordering among the published releases of one channel (rule 4) and the pre-release
// policy of docs/update-check.md: every published release of a channel is a candidate,
// pre-releases included; keep them off stable by publishing them on a channel of their own.
func TestCheckUpdateOrdering(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a, c := admin(t, s), anon(t, s)
	p := product("order")
	key := issueLicense(t, a, lic(p))
	for _, tc := range []struct {
		name       string
		registered []string // in registration order
		current    string
		want       string
	}{
		{"a release outranks its pre-release registered later", []string{"1.0.0", "1.0.0-rc.1"}, "0.9.0", "1.0.0"},
		{"a release outranks its pre-release registered earlier", []string{"1.0.0-rc.1", "1.0.0"}, "0.9.0", "1.0.0"},
		{"a client on the pre-release is offered the release", []string{"1.0.0-rc.1", "1.0.0"}, "1.0.0-rc.1", "1.0.0"},
		{"pre-release identifiers compare numerically", []string{"1.0.0-beta.11", "1.0.0-beta.2", "1.0.0-alpha.beta", "1.0.0-alpha.1"}, "0.1.0", "1.0.0-beta.11"},
		{"alphanumeric identifiers outrank numeric ones", []string{"1.0.0-rc.x", "1.0.0-rc.99"}, "0.1.0", "1.0.0-rc.x"},
		{"build metadata ties: the most recent wins", []string{"2.0.0+build.1", "2.0.0+build.2", "2.0.0+build.0"}, "1.0.0", "2.0.0+build.0"},
		{"build metadata ties the other way round", []string{"2.0.0+build.9", "2.0.0+build.1"}, "1.0.0", "2.0.0+build.1"},
		{"a non-semver version never beats semver", []string{"0.0.1", "zzz-latest", "9999"}, "0.0.0", "0.0.1"},
		{"all unparseable: the most recent wins", []string{"build-a", "build-c", "build-b"}, "build-a", "build-b"},
		{"all unparseable: the current one is the latest", []string{"build-a", "build-c"}, "build-c", ""},
		{"a pre-release on stable is offered when it is the highest", []string{"1.9.0", "2.0.0-rc.1"}, "1.9.0", "2.0.0-rc.1"},
		{"a v prefix is read as semver", []string{"v3.0.0", "2.9.0"}, "2.0.0", "v3.0.0"},
		{"numeric, not lexical", []string{"10.0.0", "9.0.0", "2.0.0"}, "1.0.0", "10.0.0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			channel := fmt.Sprintf("ch-%d", time.Now().UnixNano())
			for _, v := range tc.registered {
				registerRelease(t, a, rel(p, v, "channel", channel))
			}
			if got := update(t, c, check(key, p, tc.current, "channel", channel)); got != tc.want {
				t.Fatalf("offered %q, want %q", got, tc.want)
			}
		})
	}
}

func TestUnpublishedReleasesVanishFromUpdateChecksAtOnce(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a, c := admin(t, s), anon(t, s)
	p := product("vanish")
	key := issueLicense(t, a, lic(p))
	old := registerRelease(t, a, rel(p, "1.0.0"))
	latest := registerRelease(t, a, rel(p, "1.1.0"))
	if v := update(t, c, check(key, p, "0.5.0")); v != "1.1.0" {
		t.Fatalf("offered %q", v)
	}
	a.Post("/v1/unpublish-release", map[string]any{"id": latest}).Expect(t, 200)
	if v := update(t, c, check(key, p, "0.5.0")); v != "1.0.0" {
		t.Fatalf("after unpublishing 1.1.0 offered %q", v)
	}
	a.Post("/v1/unpublish-release", map[string]any{"id": old}).Expect(t, 200)
	if v := update(t, c, check(key, p, "0.5.0")); v != "" {
		t.Fatalf("with nothing published offered %q", v)
	}
	registerRelease(t, a, rel(p, "1.1.0"))
	if v := update(t, c, check(key, p, "0.5.0")); v != "1.1.0" {
		t.Fatalf("re-registered release offered %q", v)
	}
}

// Product ownership is one claim shared by issue-license and register-release: whichever
// the product is used with first binds it to the tenant.
func TestHostedReleaseOwnershipIsSharedWithLicensing(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	a, b := newTenant(t, s), newTenant(t, s)
	const owned = "product_id is owned by a different tenant"

	licensed := product("licensed-first")
	key := issueLicense(t, a, lic(licensed))
	b.Post("/v1/register-release", rel(licensed, "1.0.0")).ExpectError(t, 403, owned)
	b.Post("/v1/register-release", rel(" "+strings.ToUpper(licensed)+" ", "1.0.0")).ExpectError(t, 403, owned)
	registerRelease(t, a, rel(licensed, "1.0.0"))
	// A public update check with tenant a's key finds tenant a's release.
	if v := update(t, anon(t, s), check(key, licensed, "0.1.0")); v != "1.0.0" {
		t.Fatalf("offered %q", v)
	}

	released := product("released-first")
	registerRelease(t, a, rel(released, "1.0.0"))
	b.Post("/v1/issue-license", lic(released)).ExpectError(t, 403, owned)
	b.Post("/v1/issue-license", lic(strings.ToUpper(released))).ExpectError(t, 403, owned)
	issueLicense(t, a, lic(released))

	a.Post("/v1/register-release", rel("_service_x", "1.0.0")).ExpectError(t, 400, "product_id uses a reserved prefix")

	// Two tenants, one issuing and one registering a new product at the same moment:
	// exactly one owns it.
	for round := 0; round < 4; round++ {
		p := product("contested")
		var st [2]int
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); st[0] = a.Post("/v1/issue-license", lic(p)).Status }()
		go func() { defer wg.Done(); st[1] = b.Post("/v1/register-release", rel(p, "1.0.0")).Status }()
		wg.Wait()
		if !(st == [2]int{200, 403} || st == [2]int{403, 200}) {
			t.Fatalf("round %d: issue %d, register %d", round, st[0], st[1])
		}
		// The loser's license counts against nothing: revoke it to stay under the Free quota.
		if st[0] == 200 {
			keys := a.Get("/v1/list-licenses?product_id=" + p).JSON(t)["licenses"].([]any)
			a.Post("/v1/revoke-license", map[string]any{"key": keys[0].(map[string]any)["key"], "revoked": true}).Expect(t, 200)
		}
	}
}

// writeFile writes data under dir and returns the path.
func writeFile(t testing.TB, dir, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// runTool runs an external program and returns its combined output.
func runTool(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return string(out), err
}

// The manifest verifies with verifiers nobody here wrote: Node rebuilds the signed bytes
// from the parsed response (JSON.stringify of the release object without its signature)
// and checks them with its crypto module; openssl checks the same bytes against the PEM
// of GET /v1/public-key. Both refuse a tampered manifest.
func TestCheckUpdateManifestVerifiesWithOpenSSLAndNode(t *testing.T) {
	t.Parallel()
	openssl := testkit.RequireTool(t, "openssl")
	node := testkit.RequireTool(t, "node")
	s := selfHosted(t)
	a, c := admin(t, s), anon(t, s)
	dir := t.TempDir()
	pubPath := writeFile(t, dir, "pub.pem", []byte(c.Get("/v1/public-key").Expect(t, 200).JSON(t)["publicKey"].(string)))
	p := product("verified")
	key := issueLicense(t, a, lic(p))

	// Node: rebuild the bytes, verify, write them and the raw signature for openssl; also
	// print the release object as it appears in the raw response minus the signature.
	const script = `
const crypto = require('crypto'), fs = require('fs');
const [pemPath, body, dir, signedFields] = process.argv.slice(1);
const pem = fs.readFileSync(pemPath, 'utf8');
const release = JSON.parse(body).release;
const sig = Buffer.from(release.signature, 'base64');
const signed = {};
for (const f of signedFields.split(',')) signed[f] = release[f];
const bytes = Buffer.from(JSON.stringify(signed));
fs.writeFileSync(dir + '/manifest.json', bytes);
fs.writeFileSync(dir + '/manifest.sig', sig);
const ok = crypto.verify('sha256', bytes, pem, sig);
signed.version += '.1';
const tampered = crypto.verify('sha256', Buffer.from(JSON.stringify(signed)), pem, sig);
console.log(ok && !tampered ? 'ok' : 'fail');`
	verify := func(t *testing.T, body []byte, fields string) []byte {
		out, err := runTool(node, "-e", script, "--", pubPath, string(body), dir, fields)
		if err != nil || strings.TrimSpace(out) != "ok" {
			t.Fatalf("node: %v %s", err, out)
		}
		bytes := readFile(t, dir+"/manifest.json")
		if out, err := runTool(openssl, "dgst", "-sha256", "-verify", pubPath, "-signature", dir+"/manifest.sig", dir+"/manifest.json"); err != nil || !strings.Contains(out, "Verified OK") {
			t.Fatalf("openssl over %s: %v %s", bytes, err, out)
		}
		tampered := writeFile(t, dir, "tampered.json", []byte(strings.Replace(string(bytes), `"version":"`, `"version":"9`, 1)))
		if out, err := runTool(openssl, "dgst", "-sha256", "-verify", pubPath, "-signature", dir+"/manifest.sig", tampered); err == nil {
			t.Fatalf("openssl verified a tampered manifest: %s", out)
		}
		return bytes
	}
	const signedManifest = "product_id,version,channel,platform,artifact_url,checksum,release_notes,issued_at"
	for _, tc := range []struct {
		name string
		body map[string]any
	}{
		{"every field set", rel(p, "2.0.0", "channel", "stable", "platform", "linux-arm64", "checksum", "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
			"release_notes", "## 2.0\n- faster\t\"quoted\" <script>&amp;</script>")},
		{"empty optional fields", rel(p, "2.0.0", "channel", "bare")},
		{"characters JSON escapes", rel(p, "2.0.0", "channel", "esc", "platform", `win\x64`, "release_notes", "ctl \u0001\u001f \u2028\u2029 é ü 🚀 \\ /")},
		{"pre-release with build metadata", rel(p, "2.0.0-rc.1+exp.sha.5114f85", "channel", "pre")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := registerRelease(t, a, tc.body)
			platform, _ := tc.body["platform"].(string)
			resp := c.Post("/v1/check-update", check(key, p, "1.0.0", "channel", tc.body["channel"], "platform", platform)).Expect(t, 200)
			bytes := verify(t, resp.Body, signedManifest)
			// The raw response shows exactly the signed values: the release object as
			// sent, minus its signature member, is byte for byte what was signed.
			var out struct {
				Release json.RawMessage `json:"release"`
			}
			_ = json.Unmarshal(resp.Body, &out)
			var m map[string]string
			_ = json.Unmarshal(out.Release, &m)
			raw := strings.Replace(string(out.Release), `,"signature":"`+m["signature"]+`"`, "", 1)
			if raw != string(bytes) {
				t.Fatalf("response release %s\nsigned bytes     %s", raw, bytes)
			}
			// The release's own signature (release/:id) covers the seven release fields.
			verify(t, []byte(`{"release":`+string(a.Get("/v1/release/"+strconv.Itoa(id)).Expect(t, 200).Body)+`}`),
				"product_id,version,channel,platform,artifact_url,checksum,release_notes")
		})
	}
}

// The client example of docs/update-check.md runs as documented: it verifies the manifest,
// caches it, serves the cache while it is younger than the maximum age, and discards a
// tampered cache.
func TestDocumentedUpdateCheckClientWorks(t *testing.T) {
	t.Parallel()
	node := testkit.RequireTool(t, "node")
	s := selfHosted(t)
	a, c := admin(t, s), anon(t, s)
	root, err := stack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	example := root + "/docs/examples/update-check/check-update.js"
	dir := t.TempDir()
	pem := writeFile(t, dir, "public-key.pem", []byte(c.Get("/v1/public-key").JSON(t)["publicKey"].(string)))
	p := product("documented")
	key := issueLicense(t, a, lic(p))
	registerRelease(t, a, rel(p, "1.1.0", "platform", "linux", "release_notes", "Faster startup"))
	cache := dir + "/update-cache.json"
	run := func(maxAge string) (string, error) {
		return runTool(node, example, "--url", s.URL, "--key", key, "--product", p, "--platform", "linux",
			"--current", "1.0.0", "--public-key", pem, "--cache", cache, "--max-age", maxAge)
	}
	if out, err := run("3600"); err != nil || !strings.Contains(out, "update available: 1.1.0 https://downloads.example.com/"+p+"/1.1.0.tar.gz (fetched)") {
		t.Fatalf("first run: %v %s", err, out)
	}
	if out, err := run("3600"); err != nil || !strings.Contains(out, "update available: 1.1.0") || !strings.Contains(out, "(cached)") {
		t.Fatalf("second run: %v %s", err, out)
	}
	// Maximum age 0: every cached answer is too old, so the client asks again.
	if out, err := run("0"); err != nil || !strings.Contains(out, "(fetched)") {
		t.Fatalf("stale cache: %v %s", err, out)
	}
	cached := readFile(t, cache)
	writeFile(t, dir, "update-cache.json", []byte(strings.Replace(string(cached), "1.1.0.tar.gz", "evil.tar.gz", 1)))
	// A tampered cache is discarded and the genuine manifest fetched again.
	if out, err := run("3600"); err != nil || !strings.Contains(out, "cached manifest discarded: INVALID signature") ||
		!strings.Contains(out, "update available: 1.1.0 https://downloads.example.com/"+p+"/1.1.0.tar.gz (fetched)") {
		t.Fatalf("tampered cache: %v %s", err, out)
	}
	// Up to date: the example says so and exits 0.
	if out, err := runTool(node, example, "--url", s.URL, "--key", key, "--product", p, "--platform", "linux",
		"--current", "1.1.0", "--public-key", pem); err != nil || !strings.Contains(out, "up to date") {
		t.Fatalf("up to date: %v %s", err, out)
	}
	// The file an app ships holds every key GET /v1/public-keys lists (update-check.md:
	// a planned rotation's next key too): a manifest signed by any of them is believed,
	// by none of them refused. Here another installation's key comes first.
	other, err := signing.NewKeyring()
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, k := range listPublicKeys(t, c).Keys {
		listed = append(listed, k.Pem)
	}
	both := writeFile(t, dir, "keys.pem", []byte(other.PublicKeyPEM()+"\n"+strings.Join(listed, "\n")))
	foreign := writeFile(t, dir, "foreign.pem", []byte(other.PublicKeyPEM()))
	for _, tc := range []struct {
		keys, want string
		ok         bool
	}{{both, "update available: 1.1.0", true}, {foreign, "INVALID signature", false}} {
		out, err := runTool(node, example, "--url", s.URL, "--key", key, "--product", p, "--platform", "linux",
			"--current", "1.0.0", "--public-key", tc.keys)
		if (err == nil) != tc.ok || !strings.Contains(out, tc.want) {
			t.Fatalf("--public-key %s: %v %s, want %q", filepath.Base(tc.keys), err, out, tc.want)
		}
	}
}

// Releases depends on licensing for license checks and, once, for the signing keys: with
// licensing down, check-update answers 503 within its call budget (never a hang),
// registration keeps working on the keyring already in memory, and a releases process
// started while licensing is down picks the keyring up once licensing is back.
func TestReleasesWhileLicensingIsDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := startStack(t, nil)
	t.Cleanup(s.Stop)
	a, c := admin(t, s), anon(t, s)
	p := product("outage")
	key := issueLicense(t, a, lic(p))
	registerRelease(t, a, rel(p, "1.0.0"))

	s.Service("licensing").Stop()
	c.Post("/v1/check-update", check(key, p, "0.1.0")).ExpectError(t, 503, "Licensing service unavailable, retry")
	registerRelease(t, a, rel(p, "1.1.0"))

	s.Service("releases").Stop()
	if err := s.RestartService(ctx, "releases"); err != nil {
		t.Fatal(err)
	}
	a.Post("/v1/register-release", rel(p, "1.2.0")).ExpectError(t, 503, "Licensing service unavailable, retry")

	if err := s.RestartService(ctx, "licensing"); err != nil {
		t.Fatal(err)
	}
	// gRPC reconnects on its own backoff schedule: the first calls may still find the
	// connection down.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		r := admin(t, s).Post("/v1/register-release", rel(p, "1.2.0"))
		if r.Status == 200 {
			break
		}
		r.ExpectError(t, 503, "Licensing service unavailable, retry")
		if time.Now().After(deadline) {
			t.Fatal("register-release still failing 30 s after licensing came back")
		}
	}
	if v := update(t, c, check(key, p, "0.1.0")); v != "1.2.0" {
		t.Fatalf("offered %q", v)
	}
}
