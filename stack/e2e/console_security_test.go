package e2e

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/stack"
)

// webClient is a browser without a browser: a cookie jar, one client IP, no redirects
// followed, so the tests see each answer of the console as it is.
type webClient struct {
	t    *testing.T
	base string
	ip   string
	http *http.Client
}

type page struct {
	Status int
	Header http.Header
	Body   string
}

func newWebClient(t *testing.T, s *stack.Stack) *webClient {
	jar, _ := cookiejar.New(nil)
	return &webClient{t: t, base: s.URL, ip: anon(t, s).IP, http: &http.Client{
		Jar:           jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

func (c *webClient) do(method, path string, form url.Values) *page {
	c.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, c.base+path, body)
	if err != nil {
		c.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	req.Header.Set("X-Forwarded-For", c.ip)
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	census.notePage(resp.Header, string(data))
	return &page{Status: resp.StatusCode, Header: resp.Header, Body: string(data)}
}

func (c *webClient) get(path string) *page { c.t.Helper(); return c.do(http.MethodGet, path, nil) }
func (c *webClient) post(path string, form url.Values) *page {
	c.t.Helper()
	return c.do(http.MethodPost, path, form)
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf returns the CSRF token of a page's forms.
func (p *page) csrf(t *testing.T) string {
	t.Helper()
	m := csrfField.FindStringSubmatch(p.Body)
	if m == nil {
		t.Fatalf("no csrf field in page (status %d)", p.Status)
	}
	return m[1]
}

func (p *page) expect(t *testing.T, status int, contains ...string) *page {
	t.Helper()
	if p.Status != status {
		t.Fatalf("status %d, want %d: %.400s", p.Status, status, p.Body)
	}
	for _, c := range contains {
		if !strings.Contains(p.Body, c) {
			t.Fatalf("page lacks %q: %.600s", c, p.Body)
		}
	}
	return p
}

func (p *page) redirectsTo(t *testing.T, location string) {
	t.Helper()
	if p.Status != http.StatusSeeOther || p.Header.Get("Location") != location {
		t.Fatalf("status %d to %q, want 303 to %q: %.300s", p.Status, p.Header.Get("Location"), location, p.Body)
	}
}

// signIn signs the client in with an API key and returns the session's CSRF token.
func (c *webClient) signIn(key string) string {
	c.t.Helper()
	login := c.get("/console/login").expect(c.t, 200, "Sign in")
	c.post("/console/login", url.Values{"csrf": {login.csrf(c.t)}, "mode": {"key"}, "api_key": {key}}).redirectsTo(c.t, "/console/")
	return c.get("/console/").expect(c.t, 200, "Overview").csrf(c.t)
}

func sessionCookie(t *testing.T, h http.Header) *http.Cookie {
	t.Helper()
	for _, line := range h.Values("Set-Cookie") {
		if c, err := http.ParseSetCookie(line); err == nil && c.Name == "kh_session" {
			return c
		}
	}
	return nil
}

func TestConsoleSessionCookieFlagsAndLogout(t *testing.T) {
	s := selfHosted(t)
	c := newWebClient(t, s)
	login := c.get("/console/login").expect(t, 200)
	resp := c.post("/console/login", url.Values{"csrf": {login.csrf(t)}, "api_key": {s.AdminKey}})
	resp.redirectsTo(t, "/console/")
	ck := sessionCookie(t, resp.Header)
	if ck == nil || !ck.HttpOnly || ck.SameSite != http.SameSiteLaxMode || ck.Path != "/console" || ck.Secure || !strings.HasPrefix(ck.Value, "khs_") {
		t.Fatalf("kh_session cookie %+v: want HttpOnly, SameSite=Lax, Path=/console, not Secure on http", ck)
	}
	if strings.Contains(resp.Header.Get("Set-Cookie"), s.AdminKey) {
		t.Fatal("the admin key must not be in a cookie")
	}
	home := c.get("/console/").expect(t, 200, "Overview")
	if home.Header.Get("Cache-Control") != "no-store" || home.Header.Get("X-Frame-Options") != "DENY" {
		t.Fatalf("console pages must not be cached or framed: %v", home.Header)
	}

	// A wrong key shows the form again with the one message.
	other := newWebClient(t, s)
	bad := other.post("/console/login", url.Values{"csrf": {other.get("/console/login").csrf(t)}, "api_key": {s.AdminKey + "x"}})
	bad.expect(t, 401, "Invalid credentials")
	if sessionCookie(t, bad.Header) != nil {
		t.Fatal("a failed sign-in must not set a session")
	}

	// Logout ends the session server-side: the same cookie value replayed is refused.
	c.post("/console/logout", url.Values{"csrf": {home.csrf(t)}}).redirectsTo(t, "/console/login?reason=signed-out")
	replay := newWebClient(t, s)
	u, _ := url.Parse(s.URL + "/console/")
	replay.http.Jar.SetCookies(u, []*http.Cookie{{Name: "kh_session", Value: ck.Value, Path: "/console"}})
	replay.get("/console/licenses").redirectsTo(t, "/console/login?next=%2Fconsole%2Flicenses&reason=expired")
	// Nor does the session token work as an API credential after logout.
	newClient(t, s.URL, ck.Value).Get("/v1/list-licenses").ExpectError(t, 403, "Unauthorized")
}

func TestConsoleFormsRefuseAPostWithoutTheCSRFToken(t *testing.T) {
	s := selfHosted(t)
	adm := admin(t, s)
	key := issueLicense(t, adm, map[string]any{"tier": "pro", "product_id": product("csrf"), "issued_to": "csrf@example.com", "notes": "keep", "max_activations": 3, "limits": map[string]any{"users": 5}})
	anon(t, s).Post("/v1/activate-license", map[string]string{"key": key, "instance_id": "box-1"}).Expect(t, 200)

	// Sign-in itself: no token, or the token of another browser, is refused.
	c := newWebClient(t, s)
	c.get("/console/login")
	c.post("/console/login", url.Values{"api_key": {s.AdminKey}}).expect(t, 403, "CSRF")
	elsewhere := newWebClient(t, s).get("/console/login").csrf(t)
	c.post("/console/login", url.Values{"csrf": {elsewhere}, "api_key": {s.AdminKey}}).expect(t, 403, "CSRF")
	token := c.signIn(s.AdminKey)
	// Another session's token is no good either.
	foreign := newWebClient(t, s).signIn(s.AdminKey)

	lic := "/console/licenses/" + key
	posts := []struct {
		path string
		form url.Values
	}{
		{"/console/logout", url.Values{}},
		{"/console/licenses", url.Values{"tier": {"pro"}, "product_id": {product("csrf")}, "issued_to": {"x"}}},
		{lic + "/revoke", url.Values{"revoked": {"true"}}},
		{lic + "/delete", url.Values{"confirm": {key}}},
		{lic + "/terms", url.Values{"max_activations": {"9"}}},
		{lic + "/notes", url.Values{"notes": {"changed"}}},
		{lic + "/seats/deactivate", url.Values{"instance_id": {"box-1"}}},
		{lic + "/seats/reissue", url.Values{"instance_id": {"box-1"}}},
		{lic + "/usage/reset", url.Values{}},
		{lic + "/portal/reset", url.Values{}},
		{"/console/releases", url.Values{"product_id": {"p"}, "version": {"1.0.0"}, "artifact_url": {"https://example.com/a"}}},
		{"/console/releases/1/unpublish", url.Values{}},
		{"/console/settings/rotate-key", url.Values{}},
		{"/console/settings/password", url.Values{"password": {"a-long-enough-password"}, "confirm": {"a-long-enough-password"}}},
		{"/console/settings/portal", url.Values{"enabled": {"false"}}},
	}
	for _, p := range posts {
		for _, bad := range []string{"", foreign, token + "x"} {
			f := url.Values{}
			for k, v := range p.form {
				f[k] = v
			}
			if bad != "" {
				f.Set("csrf", bad)
			}
			c.post(p.path, f).expect(t, 403, "CSRF")
		}
	}
	// Nothing happened: the license, its notes, terms and seat are as issued, the portal is on.
	got := adm.Get("/v1/admin/license/"+key).Expect(t, 200).JSON(t)
	if got["status"] != "active" || got["notes"] != "keep" || got["max_activations"] != 3.0 {
		t.Fatalf("a refused form changed the license: %v", got)
	}
	if acts := adm.Get("/v1/list-activations/"+key).Expect(t, 200).JSON(t)["activations"].([]any); len(acts) != 1 {
		t.Fatalf("a refused form freed a seat: %v", acts)
	}
	c.get("/console/settings").expect(t, 200, "The portal is <strong>on</strong>")
	// The session survived every refused logout; with its token the same form works.
	c.post(lic+"/notes", url.Values{"csrf": {token}, "notes": {"changed"}}).redirectsTo(t, lic+"?notice=notes")
	if got := adm.Get("/v1/admin/license/"+key).Expect(t, 200).JSON(t); got["notes"] != "changed" {
		t.Fatalf("notes %v after a valid form", got["notes"])
	}
}

func TestConsoleSignInCountsAgainstTheAdminInfoTier(t *testing.T) {
	s := hosted(t)
	clearOfWindowEdge(t, time.Minute)
	c := newWebClient(t, s)
	csrf := c.get("/console/login").csrf(t)
	form := url.Values{"csrf": {csrf}, "api_key": {"kh_not-a-key"}}
	first := c.post("/console/login", form).expect(t, 401, "Invalid credentials")
	limit, err := strconv.Atoi(first.Header.Get("X-RateLimit-Limit"))
	if err != nil || limit != 300 {
		t.Fatalf("sign-in carries the Admin-Info headers: X-RateLimit-Limit %q", first.Header.Get("X-RateLimit-Limit"))
	}
	for i := 1; i < limit; i++ {
		if p := c.post("/console/login", form); p.Status != 401 {
			t.Fatalf("attempt %d: status %d", i+1, p.Status)
		}
	}
	over := c.post("/console/login", form)
	if over.Status != 429 || over.Header.Get("Retry-After") == "" ||
		!strings.HasPrefix(over.Body, `{"error":"Too Many Requests","statusCode":429,"message":"Rate limit exceeded, retry in `) {
		t.Fatalf("attempt %d: %d %s", limit+1, over.Status, over.Body)
	}
	// The budget is the client IP's Admin-Info budget: its API calls are refused too.
	tenant := newTenant(t, s)
	tenant.IP = c.ip
	if r := tenant.Get("/v1/list-licenses"); r.Status != 429 {
		t.Fatalf("list-licenses from the same IP: %d, want 429", r.Status)
	}
}

var portalLinkValue = regexp.MustCompile(`value="(http[^"]+/portal/[A-Za-z0-9_-]+)"`)

// portalPath reads the portal link off the console's license page.
func portalPath(t *testing.T, c *webClient, key string) string {
	t.Helper()
	p := c.get("/console/licenses/"+key).expect(t, 200)
	m := portalLinkValue.FindStringSubmatch(p.Body)
	if m == nil {
		t.Fatalf("no portal link on the license page")
	}
	u, _ := url.Parse(m[1])
	return u.Path
}

func TestPortalLinkThatIsNotValidAnswersAPlain404(t *testing.T) {
	s := hosted(t)
	tenant := newTenant(t, s)
	c := newWebClient(t, s)
	csrf := c.signIn(tenant.Token)
	key := issueLicense(t, tenant, map[string]any{"tier": "pro", "product_id": product("portal"), "issued_to": "holder@example.com", "max_activations": 2})
	anon(t, s).Post("/v1/activate-license", map[string]string{"key": key, "instance_id": "laptop"}).Expect(t, 200)
	link := portalPath(t, c, key)
	if tok := strings.TrimPrefix(link, "/portal/"); len(tok) < 22 {
		t.Fatalf("portal token %q carries fewer than 128 bits", tok)
	}
	if again := portalPath(t, c, key); again != link {
		t.Fatalf("the license page shows a different link each time: %s, %s", link, again)
	}
	buyer := newWebClient(t, s)
	buyer.get(link).expect(t, 200, key, "laptop")
	view := buyer.get(link+"/release?instance_id=laptop").expect(t, 200, "Release seat")
	notValid := "This link is not valid"

	// Forged tokens.
	raw := make([]byte, 32)
	_, _ = rand.Read(raw)
	// The real token with its last character changed (to "A", or "B" when it was "A": a
	// fixed "A" was the real token once in 64 runs).
	last := "A"
	if strings.HasSuffix(link, "A") {
		last = "B"
	}
	for _, forged := range []string{base64.RawURLEncoding.EncodeToString(raw), link[len("/portal/"):len(link)-1] + last, "x", strings.Repeat("a", 300)} {
		buyer.get("/portal/"+forged).expect(t, 404, notValid)
	}
	// A POST without the page's CSRF token does nothing.
	for _, action := range []string{"/release", "/deactivate"} {
		buyer.post(link+action, url.Values{"instance_id": {"laptop"}, "confirm": {"yes"}}).expect(t, 403, "CSRF")
	}

	// Revoked: 404; reactivated: back.
	tenant.Post("/v1/revoke-license", map[string]any{"key": key, "revoked": true}).Expect(t, 200)
	buyer.get(link).expect(t, 404, notValid)
	buyer.post(link+"/release", url.Values{"csrf": {view.csrf(t)}, "instance_id": {"laptop"}, "confirm": {"yes"}}).expect(t, 404, notValid)
	tenant.Post("/v1/revoke-license", map[string]any{"key": key, "revoked": false}).Expect(t, 200)
	buyer.get(link).expect(t, 200)

	// The portal switch.
	c.post("/console/settings/portal", url.Values{"csrf": {csrf}, "enabled": {"false"}}).redirectsTo(t, "/console/settings?notice=portal-off")
	buyer.get(link).expect(t, 404, notValid)
	c.post("/console/settings/portal", url.Values{"csrf": {csrf}, "enabled": {"true"}}).redirectsTo(t, "/console/settings?notice=portal-on")
	buyer.get(link).expect(t, 200)

	// A new link retires the old one.
	c.post("/console/licenses/"+key+"/portal/reset", url.Values{"csrf": {csrf}}).redirectsTo(t, "/console/licenses/"+key+"?notice=portal-reset")
	buyer.get(link).expect(t, 404, notValid)
	fresh := portalPath(t, c, key)
	if fresh == link {
		t.Fatal("reset kept the same link")
	}
	page := buyer.get(fresh+"/release?instance_id=laptop").expect(t, 200, "laptop")
	buyer.post(fresh+"/release", url.Values{"csrf": {page.csrf(t)}, "instance_id": {"laptop"}, "confirm": {"yes"}}).redirectsTo(t, fresh+"?notice=seat-released")
	if acts := tenant.Get("/v1/list-activations/"+key).Expect(t, 200).JSON(t)["activations"].([]any); len(acts) != 0 {
		t.Fatalf("seat still there after the portal freed it: %v", acts)
	}

	// Deleting the license ends its link.
	tenant.Delete("/v1/delete-license", map[string]string{"key": key}).Expect(t, 200)
	buyer.get(fresh).expect(t, 404, notValid)
}

func TestConsoleDataExportIsHostedAndOncePerMinute(t *testing.T) {
	self := newWebClient(t, selfHosted(t))
	self.signIn(selfHosted(t).AdminKey)
	self.get("/console/export").expect(t, 404)

	s := hosted(t)
	tenant := newTenant(t, s)
	issueLicense(t, tenant, map[string]any{"tier": "pro", "product_id": product("export"), "issued_to": "a@example.com"})
	c := newWebClient(t, s)
	c.signIn(tenant.Token)
	first := c.get("/console/export")
	if first.Status != 200 || first.Header.Get("Content-Type") != "application/json" ||
		first.Header.Get("Content-Disposition") != fmt.Sprintf(`attachment; filename="service-data-export-%s.json"`, todayUTC()) ||
		first.Header.Get("X-RateLimit-Limit") != "300" {
		t.Fatalf("export: %d %v", first.Status, first.Header)
	}
	second := c.get("/console/export")
	if second.Status != 429 || second.Header.Get("Retry-After") == "" ||
		!strings.HasPrefix(second.Body, `{"error":"Too Many Requests","statusCode":429,"message":"Rate limit exceeded, retry in `) {
		t.Fatalf("second export within a minute: %d %s", second.Status, second.Body)
	}
	// The limit is the tenant's, not the browser's: another session of the tenant waits too.
	d := newWebClient(t, s)
	d.signIn(tenant.Token)
	if p := d.get("/console/export"); p.Status != 429 {
		t.Fatalf("another session of the same tenant: %d", p.Status)
	}
	// Without a session there is no export, just the sign-in page.
	newWebClient(t, s).get("/console/export").redirectsTo(t, "/console/login?next=%2Fconsole%2Fexport")
}

func TestRotatingTheKeyThroughTheAPIEndsEveryConsoleSession(t *testing.T) {
	s := hosted(t)
	tenant := newTenant(t, s)
	a, b := newWebClient(t, s), newWebClient(t, s)
	a.signIn(tenant.Token)
	b.signIn(tenant.Token)
	other := newTenant(t, s)
	c := newWebClient(t, s)
	c.signIn(other.Token)

	tenant.Post("/v1/rotate-api-key", nil).Expect(t, 200)
	a.get("/console/licenses").redirectsTo(t, "/console/login?next=%2Fconsole%2Flicenses&reason=expired")
	b.get("/console/").redirectsTo(t, "/console/login?reason=expired")
	// Another tenant's session is untouched.
	c.get("/console/licenses").expect(t, 200, "Licenses")
}

// signInWithPassword signs the client in with an email and password.
func (c *webClient) signInWithPassword(email, password string) {
	c.t.Helper()
	login := c.get("/console/login?mode=password").expect(c.t, 200, "Sign in")
	c.post("/console/login", url.Values{"csrf": {login.csrf(c.t)}, "mode": {"password"}, "email": {email}, "password": {password}}).
		redirectsTo(c.t, "/console/")
	c.get("/console/").expect(c.t, 200, "Overview")
}

// sessionEnded checks that the client's session is over: its next console page goes to
// the sign-in page, which says so.
func (c *webClient) sessionEnded() {
	c.t.Helper()
	c.get("/console/licenses").redirectsTo(c.t, "/console/login?next=%2Fconsole%2Flicenses&reason=expired")
	c.get("/console/login?next=%2Fconsole%2Flicenses&reason=expired").expect(c.t, 200, "Your session ended. Sign in again.")
}

// onGateway returns a client with the same cookies that talks to another gateway.
func (c *webClient) onGateway(base string) *webClient {
	return &webClient{t: c.t, base: base, ip: c.ip, http: c.http}
}

// A console session lives only as long as the extra key that opened it: deleting the key
// ends it on every gateway and billing replica at once, and sessions opened with another
// credential of the tenant (another extra key, the tenant's key) go on.
func TestDeletingAnAPIKeyEndsTheConsoleSessionsItOpened(t *testing.T) {
	s := hosted(t)
	second := secondGateway(t, s, "billing", "BILLING_ADDR")
	tenant := newTenant(t, s)
	employee, id := createAPIKey(t, tenant, "employee", "full")
	colleague, _ := createAPIKey(t, tenant, "colleague", "full")

	a, a2 := newWebClient(t, s), newWebClient(t, s)
	a.signIn(employee.Token)
	a2.signIn(employee.Token)
	b := newWebClient(t, s)
	b.signIn(colleague.Token)
	owner := newWebClient(t, s)
	owner.signIn(tenant.Token)
	a.onGateway(second).get("/console/licenses").expect(t, 200, "Licenses")

	tenant.Delete("/v1/api-keys/"+id, nil).ExpectBody(t, `{"id":"`+id+`","deleted":true}`)
	a.onGateway(second).sessionEnded()
	a2.sessionEnded()
	b.onGateway(second).get("/console/licenses").expect(t, 200, "Licenses")
	owner.get("/console/licenses").expect(t, 200, "Licenses")
	owner.onGateway(second).get("/console/licenses").expect(t, 200, "Licenses")
}

// Self-hosted, a console session lives as long as the admin key that opened it. Rotated as
// docs/operations.md says, every process restarted onto a new ADMIN_API_KEY with the old
// one as ADMIN_API_KEY_PREVIOUS, the old key still works and so does its session, and the
// new key opens one; restarted again without the old key, the old key's session (a cookie
// stolen with a leaked key) goes to the sign-in page saying it ended, the new key's goes
// on, and the old key opens no other.
func TestRotatingTheAdminKeyEndsTheConsoleSessionsOfTheOldKey(t *testing.T) {
	t.Parallel()
	s := startStack(t, nil)
	t.Cleanup(s.Stop)
	oldKey, newKey := s.AdminKey, "rotated-admin-key-"+uniq("console-")
	census.noteCredential(newKey)
	stolen := newWebClient(t, s)
	stolen.signIn(oldKey)
	stolen.get("/console/licenses").expect(t, 200, "Licenses")

	bridge := restartEveryProcess(t, s, map[string]string{"ADMIN_API_KEY": newKey, "ADMIN_API_KEY_PREVIOUS": oldKey})
	stolen.onGateway(bridge).get("/console/licenses").expect(t, 200, "Licenses")
	rotated := newWebClient(t, s).onGateway(bridge)
	rotated.signIn(newKey)

	rotatedURL := restartEveryProcess(t, s, map[string]string{"ADMIN_API_KEY": newKey})
	stolen.onGateway(rotatedURL).sessionEnded()
	rotated.onGateway(rotatedURL).get("/console/licenses").expect(t, 200, "Licenses")
	refused := newWebClient(t, s).onGateway(rotatedURL)
	login := refused.get("/console/login").expect(t, 200, "Sign in")
	refused.post("/console/login", url.Values{"csrf": {login.csrf(t)}, "mode": {"key"}, "api_key": {oldKey}}).expect(t, 401, "Invalid credentials")
	newWebClient(t, s).onGateway(rotatedURL).signIn(newKey)
}

// A console session opened with an extra key that expires ends when the key expires, on
// every gateway; a session opened with the tenant's key goes on.
func TestAnAPIKeyThatExpiresEndsTheConsoleSessionsItOpened(t *testing.T) {
	s := hosted(t)
	second := secondGateway(t, s, "billing", "BILLING_ADDR")
	tenant := newTenant(t, s)
	owner := newWebClient(t, s)
	owner.signIn(tenant.Token)

	// A key that expires a few seconds from now, signed in with before it does; on a
	// machine so slow that it expired first, again with a longer lead.
	var (
		a       *webClient
		expires time.Time
	)
	for lead := 3 * time.Second; a == nil; lead *= 2 {
		if lead > 2*time.Minute {
			t.Fatal("could not sign in with a key before it expired")
		}
		expires = time.Now().Add(lead).UTC().Truncate(time.Second)
		m := tenant.Post("/v1/api-keys", map[string]any{"name": "temp", "scope": "full", "expires_at": expires.Format(time.RFC3339)}).Expect(t, 200).JSON(t)
		key, _ := m["api_key"].(string)
		c := newWebClient(t, s)
		login := c.get("/console/login").expect(t, 200, "Sign in")
		in := c.post("/console/login", url.Values{"csrf": {login.csrf(t)}, "mode": {"key"}, "api_key": {key}})
		page := c.onGateway(second).get("/console/licenses")
		switch {
		case in.Status == http.StatusSeeOther && page.Status == http.StatusOK:
			a = c
		case time.Now().Before(expires):
			t.Fatalf("signing in with a live key: %d, then %d: %.300s", in.Status, page.Status, page.Body)
		}
	}

	// Poll until the session ends; the bound is generous, for a loaded machine.
	deadline := expires.Add(60 * time.Second)
	for {
		p := a.onGateway(second).get("/console/licenses")
		if p.Status == http.StatusSeeOther {
			p.redirectsTo(t, "/console/login?next=%2Fconsole%2Flicenses&reason=expired")
			a.get("/console/login?next=%2Fconsole%2Flicenses&reason=expired").expect(t, 200, "Your session ended. Sign in again.")
			break
		}
		p.expect(t, 200, "Licenses")
		if time.Now().After(deadline) {
			t.Fatalf("the session still works %s after its key expired", time.Since(expires).Round(time.Second))
		}
		time.Sleep(200 * time.Millisecond)
	}
	owner.get("/console/licenses").expect(t, 200, "Licenses")
	owner.onGateway(second).get("/console/licenses").expect(t, 200, "Licenses")
}

// Setting a new console password ends the sessions opened with the old one, except the
// one that set it; sessions opened with a key go on.
func TestChangingThePasswordEndsTheOtherPasswordSessions(t *testing.T) {
	s := hosted(t)
	second := secondGateway(t, s, "billing", "BILLING_ADDR")
	email := fmt.Sprintf("pw-%d@example.com", time.Now().UnixNano())
	key, _ := admin(t, s).Post("/v1/operator/tenants", map[string]string{"name": "Password change", "email": email}).Expect(t, 200).JSON(t)["api_key"].(string)
	owner := newWebClient(t, s)
	csrf := owner.signIn(key)
	first := "first password 0123"
	owner.post("/console/settings/password", url.Values{"csrf": {csrf}, "password": {first}, "confirm": {first}}).
		redirectsTo(t, "/console/settings?notice=password-set")

	stale, changer := newWebClient(t, s), newWebClient(t, s)
	stale.signInWithPassword(email, first)
	changer.signInWithPassword(email, first)
	next := "second password 4567"
	form := changer.get("/console/settings").expect(t, 200)
	changer.post("/console/settings/password", url.Values{"csrf": {form.csrf(t)}, "password": {next}, "confirm": {next}}).
		redirectsTo(t, "/console/settings?notice=password-set")

	stale.onGateway(second).sessionEnded()
	changer.onGateway(second).get("/console/licenses").expect(t, 200, "Licenses")
	owner.onGateway(second).get("/console/licenses").expect(t, 200, "Licenses")
	newWebClient(t, s).signInWithPassword(email, next)
}
