package e2e

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/stack"
)

// The customer portal as its holder meets it: on a phone, on a team license where a slip
// would free a colleague's machine, in two browsers at once, and once the license expired.

// portalOf issues a license of prod with seats activated by instances and returns it with
// its portal link's path.
func portalOf(t *testing.T, s *stack.Stack, tenant *Client, prod string, seats int, instances ...string) (key, path string) {
	t.Helper()
	key = issueLicense(t, tenant, map[string]any{"tier": "pro", "product_id": prod, "issued_to": "holder@example.com", "max_activations": seats})
	for _, inst := range instances {
		anon(t, s).Post("/v1/activate-license", map[string]string{"key": key, "instance_id": inst}).Expect(t, 200)
	}
	c := newWebClient(t, s)
	c.signIn(tenant.Token)
	return key, portalPath(t, c, key)
}

func seatsOf(t *testing.T, tenant *Client, key string) []string {
	t.Helper()
	var ids []string
	for _, a := range tenant.Get("/v1/list-activations/"+key).Expect(t, 200).JSON(t)["activations"].([]any) {
		ids = append(ids, a.(map[string]any)["instance_id"].(string))
	}
	return ids
}

// At 375 px nothing scrolls sideways, the seat's button stays in its card and no word is
// split; a 150-character product_id wraps at 1280 px. Release asks first, by keyboard too,
// and Cancel frees nothing.
func TestPortalFitsAPhoneAndAsksBeforeReleasingInTheBrowser(t *testing.T) {
	s := hosted(t)
	tenant := newTenant(t, s)
	// A usage limit whose metric name would split ("project/s") in a squeezed column.
	key := issueLicense(t, tenant, map[string]any{"tier": "pro", "product_id": product("portal-phone"), "issued_to": "holder@example.com",
		"max_activations": 200, "limits": map[string]any{"projects": 10}})
	anon(t, s).Post("/v1/activate-license", map[string]string{"key": key, "instance_id": "laptop"}).Expect(t, 200)
	c := newWebClient(t, s)
	c.signIn(tenant.Token)
	path := portalPath(t, c, key)
	long := strings.Repeat("x", 150-len("-1234567890123456789")) // product() appends the time
	_, longPath := portalOf(t, s, tenant, product(long), 1)

	browse(t, "portalLayout", map[string]any{"base": s.URL, "ip": browserIP(t, s), "portal": s.URL + path,
		"longPortal": s.URL + longPath, "instance": "laptop"})
	if seats := seatsOf(t, tenant, key); len(seats) != 1 || seats[0] != "laptop" {
		t.Fatalf("asking and cancelling freed a seat: %v", seats)
	}
}

// The same link open in two browsers: the second Release lands, by a redirect, on the
// license page saying the seat was already released; reloading it posts nothing.
func TestPortalSecondReleaseSaysTheSeatWasAlreadyReleasedInTheBrowser(t *testing.T) {
	s := hosted(t)
	tenant := newTenant(t, s)
	key, path := portalOf(t, s, tenant, product("portal-two"), 2, "laptop", "desktop")
	out := browse(t, "portalTwoTabs", map[string]any{"base": s.URL, "ip": browserIP(t, s), "portal": s.URL + path, "instance": "laptop"})
	if out["status"] != 200.0 || str(out, "url") != s.URL+path+"?notice=seat-already-released" {
		t.Errorf("the second Release answered %v at %s, want 200 at the license page", out["status"], strings.Replace(str(out, "url"), path, "{portal}", 1))
	}
	if want := "That seat was already released (from another tab or browser, by the vendor, or when its lease ended): nothing changed."; str(out, "notice") != want {
		t.Errorf("the second Release says %q, want %q", str(out, "notice"), want)
	}
	if str(out, "reloadMethod") != http.MethodGet || out["reloadStatus"] != 200.0 {
		t.Errorf("reloading after the second Release: %v %v, want a GET answered 200", out["reloadMethod"], out["reloadStatus"])
	}
	if seats := seatsOf(t, tenant, key); len(seats) != 1 || seats[0] != "desktop" {
		t.Fatalf("seats after two releases of laptop: %v", seats)
	}
}

// Confirmed releases of one seat, in parallel through two gateways on two activations
// replicas: the seat is freed once, one answer says released and every other one says it
// already was; none is an error page. A post without the confirmation (the form of a page
// served before the portal asked) only leads to the question.
func TestPortalReleasesASeatOnceUnderParallelRequests(t *testing.T) {
	s := hosted(t)
	tenant := newTenant(t, s)
	key, path := portalOf(t, s, tenant, product("portal-race"), 3, "laptop", "desktop")
	other := secondGateway(t, s, "activations", "ACTIVATIONS_ADDR")

	buyer := newWebClient(t, s)
	question := path + "/release?instance_id=laptop"
	csrf := buyer.get(question).expect(t, 200, "laptop").csrf(t)
	// Unconfirmed, at the current and the old action: the question, nothing freed.
	for _, action := range []string{"/release", "/deactivate"} {
		buyer.post(path+action, url.Values{"csrf": {csrf}, "instance_id": {"laptop"}}).redirectsTo(t, question)
	}
	buyer.get(question).expect(t, 200, `Release the seat <span class="mono">laptop</span>?`, "Release seat")
	if n := len(seatsOf(t, tenant, key)); n != 2 {
		t.Fatalf("%d seats after unconfirmed releases, want 2", n)
	}

	const n = 8
	locations := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		c := newWebClient(t, s)
		if i%2 == 1 {
			c.base = other
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := c.do(http.MethodPost, path+"/release", url.Values{"csrf": {csrf}, "instance_id": {"laptop"}, "confirm": {"yes"}})
			// The link is a credential: the answers are compared without it.
			locations[i] = fmt.Sprintf("%d %s", p.Status, strings.Replace(p.Header.Get("Location"), path, "{portal}", 1))
		}()
	}
	wg.Wait()
	count := map[string]int{}
	for _, l := range locations {
		count[l]++
	}
	if count["303 {portal}?notice=seat-released"] != 1 || count["303 {portal}?notice=seat-already-released"] != n-1 {
		t.Fatalf("parallel releases answered %v, want one released and %d already released", count, n-1)
	}
	if seats := seatsOf(t, tenant, key); len(seats) != 1 || seats[0] != "desktop" {
		t.Fatalf("seats after the parallel releases: %v", seats)
	}
	// Asked again about the gone seat: the license page says it was released already.
	buyer.get(question).redirectsTo(t, path+"?notice=seat-already-released")
}

// An expired license offers no download (export-license answers 403 then): the page says
// why and whom to ask, the vendor's buyer-email contact.
func TestPortalOfAnExpiredLicenseOffersNoDownloadInTheBrowser(t *testing.T) {
	s := hosted(t)
	tenant := newTenant(t, s)
	tenant.Post("/v1/storefront/mail-settings", map[string]string{"sender_name": "Acme Tools", "reply_to": "help@acme.example"}).Expect(t, 200)
	key, path := portalOf(t, s, tenant, product("portal-expired"), 1, "laptop")
	past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	tenant.Post("/v1/admin/update-license-terms", map[string]any{"key": key, "expires_at": past}).Expect(t, 200)

	out := browse(t, "portalExpired", map[string]any{"base": s.URL, "ip": browserIP(t, s), "portal": s.URL + path})
	if out["links"] != 0.0 {
		t.Errorf("the expired license's page offers %v downloads, which answer 403", out["links"])
	}
	why := str(out, "why")
	for _, want := range []string{"This license expired on ", "cannot be downloaded", "renew it with the vendor", "Acme Tools at help@acme.example"} {
		if !strings.Contains(why, want) {
			t.Errorf("the page says %q, missing %q", why, want)
		}
	}
	if support := str(out, "support"); support != "Questions about this license? Contact Acme Tools at help@acme.example." {
		t.Errorf("the support line reads %q", support)
	}
	if page := newWebClient(t, s).get(path).expect(t, 200); strings.Contains(page.Body, "/v1/export-license/") {
		t.Error("the expired license's page links the export, which answers 403")
	}
}

// A vendor who set no reply-to is reached at its account address (hosted), as its buyer
// emails are; the link of a revoked license says what may be the case and whom to ask.
func TestPortalNamesTheVendorsContactAndANotValidLinkSaysWhy(t *testing.T) {
	s := hosted(t)
	n := uniq("")
	email := "vendor-" + n + "@example.com"
	created := admin(t, s).Post("/v1/operator/tenants", map[string]string{"name": "Bolt Labs " + n, "email": email}).Expect(t, 200).JSON(t)
	tenant := newClient(t, s.URL, str(created, "api_key"))
	key, path := portalOf(t, s, tenant, product("portal-contact"), 1)
	newWebClient(t, s).get(path).expect(t, 200, fmt.Sprintf(`Contact Bolt Labs %s at <a href="mailto:%s">%s</a>.`, n, email, email))

	tenant.Post("/v1/revoke-license", map[string]any{"key": key, "revoked": true}).Expect(t, 200)
	gone := newWebClient(t, s).get(path).expect(t, 404, "This link is not valid", "revoked (for example after a refund or a payment dispute)",
		"reply to the email that brought you this link")
	if strings.Contains(gone.Body, "for a new one") {
		t.Error("the 404 page promises a new link, which cannot work while the license is revoked")
	}
}
