package e2e

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"
)

// awaitLogged waits until the event log holds an event of typ about key that ok accepts
// (the log fills from the event stream, a moment after the change).
func awaitLogged(t *testing.T, c *Client, key, typ string, ok func(logEvent) bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		// Each look from an address of its own, as eventsOf.
		resp := newClient(t, c.Base, c.Token).Get("/v1/events?" + url.Values{"license_key": {key}, "type": {typ}}.Encode())
		if !saysRetry(resp) {
			for _, ev := range pageOf(t, resp).Events {
				if ok(ev) {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s event about %s after 60 s", typ, key)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func anyEvent(logEvent) bool { return true }

func deliveryOutcome(o string) func(logEvent) bool {
	return func(ev logEvent) bool { return ev.Data["outcome"] == o }
}

// A revoked license's console page says what revoked it, where the event log tells:
// the storefront following a full refund or a dispute, the console, or the API. Its
// customer portal, which answers 404 while the license is revoked, is not offered.
func TestConsoleRevokedLicenseSaysWhyAndOffersNoPortalLink(t *testing.T) {
	t.Parallel()
	s, _ := storefrontStack(t)
	tenant := newTenant(t, s)
	sh := connectShop(t, tenant)
	prod, link := product("sf-revoked"), uniq("plink_")
	sh.mapping(map[string]any{"payment_link": link, "product_id": prod, "tier": "pro"})
	purchase := func() (key, paymentIntent string) {
		t.Helper()
		paymentIntent, ev := uniq("pi_"), uniq("evt_")
		sh.deliver(checkout(ev, newSession(link, uniq("buyer")+"@example.com"), "", paymentIntent)).Expect(t, 200)
		return sh.awaitOutcome(ev, outcome("issued"))["license_key"].(string), paymentIntent
	}
	refunded, pi := purchase()
	ev := uniq("evt_")
	sh.deliver(chargeRefunded(ev, pi, 1900, 1900)).Expect(t, 200)
	sh.awaitOutcome(ev, outcome("revoked_refund"))
	disputed, pi := purchase()
	ev = uniq("evt_")
	sh.deliver(dispute(ev, "charge.dispute.created", uniq("dp_"), pi, "needs_response")).Expect(t, 200)
	sh.awaitOutcome(ev, outcome("revoked_dispute"))
	byAPI := issueLicense(t, tenant, map[string]any{"tier": "pro", "product_id": prod, "issued_to": "api@example.com"})
	tenant.Post("/v1/revoke-license", map[string]any{"key": byAPI, "revoked": true}).Expect(t, 200)
	awaitLogged(t, tenant, refunded, "storefront.delivery", deliveryOutcome("revoked_refund"))
	awaitLogged(t, tenant, disputed, "storefront.delivery", deliveryOutcome("revoked_dispute"))
	for _, key := range []string{refunded, disputed, byAPI} {
		awaitLogged(t, tenant, key, "license.revoked", anyEvent)
	}

	c := newWebClient(t, s)
	csrf := c.signIn(tenant.Token)
	for key, why := range map[string]string{
		refunded: "the purchase was refunded in full (Stripe)",
		disputed: "the purchase was disputed (Stripe)",
		byAPI:    "revoked through the API with an API key",
	} {
		page := c.get("/console/licenses/"+key).expect(t, 200, `<dd id="revoked-by">`+why+`</dd>`, `id="portal-closed"`)
		if strings.Contains(page.Body, "Open the portal") || portalLinkValue.MatchString(page.Body) {
			t.Errorf("the page of revoked license %s offers its portal link, which answers 404", key)
		}
	}

	// Revoked in the console; reactivated, the portal link is offered again.
	fresh := issueLicense(t, tenant, map[string]any{"tier": "pro", "product_id": prod, "issued_to": "console@example.com"})
	c.post("/console/licenses/"+fresh+"/revoke", url.Values{"csrf": {csrf}, "revoked": {"true"}, "confirm": {"yes"}}).
		redirectsTo(t, "/console/licenses/"+fresh+"?notice=revoked")
	awaitLogged(t, tenant, fresh, "license.revoked", anyEvent)
	c.get("/console/licenses/"+fresh).expect(t, 200, `<dd id="revoked-by">revoked in the console</dd>`)
	tenant.Post("/v1/revoke-license", map[string]any{"key": fresh, "revoked": false}).Expect(t, 200)
	path := portalPath(t, c, fresh)
	newWebClient(t, s).get(path).expect(t, 200)
}

// A subscription's buyer email says its expiry moves with each paid renewal, and the
// portal its link opens names the product as the email does (the mail settings' product
// name), not by its product_id nor as Keyhouse's.
func TestStorefrontSubscriptionEmailAndPortalNameTheProduct(t *testing.T) {
	t.Parallel()
	s, sink := storefrontStack(t)
	tenant := newTenant(t, s)
	tenant.Post("/v1/storefront/mail-settings", map[string]string{"product_name": "Acme Editor Pro"}).Expect(t, 200)
	sh := connectShop(t, tenant)
	prod, link := product("sf-sub-mail"), uniq("plink_")
	sh.mapping(map[string]any{"payment_link": link, "product_id": prod, "tier": "pro"})
	buyer := uniq("sub-buyer") + "@example.com"
	ev := uniq("evt_")
	sh.deliver(checkout(ev, newSession(link, buyer), uniq("sub_"), "")).Expect(t, 200)
	sh.awaitOutcome(ev, outcome("issued", "sent"))

	m := awaitMail(t, sink, buyer, 1)[0]
	if !strings.Contains(m.Body, " UTC (renews with your subscription: each paid renewal extends it)\n") {
		t.Errorf("the subscription's email does not say the expiry renews:\n%s", m.Body)
	}
	const lead = "Manage your license and devices: "
	i := strings.Index(m.Body, lead)
	if i < 0 {
		t.Fatalf("no portal link in the email:\n%s", m.Body)
	}
	path := strings.TrimPrefix(strings.Fields(m.Body[i+len(lead):])[0], "https://licenses.example.com")
	page := newWebClient(t, s).get(path).expect(t, 200, "<title>Acme Editor Pro license</title>", "<h1>Acme Editor Pro</h1>")
	if strings.Contains(page.Body, prod) {
		t.Errorf("the portal shows the product_id %s", prod)
	}

	// A one-time purchase's email names a fixed expiry, without renewal.
	once := uniq("once-buyer") + "@example.com"
	ev = uniq("evt_")
	sh.mapping(map[string]any{"service_ref": "once-" + prod, "product_id": prod, "tier": "pro", "duration_days": 30})
	sess := newSession("", once)
	sess.ServiceRef = "once-" + prod
	sh.deliver(event(ev, "checkout.session.completed", sess)).Expect(t, 200)
	sh.awaitOutcome(ev, outcome("issued", "sent"))
	if body := awaitMail(t, sink, once, 1)[0].Body; strings.Contains(body, "renews") || !strings.Contains(body, "Expires:     ") {
		t.Errorf("a one-time purchase's email:\n%s", body)
	}
}

// The console's mappings show every term the API takes (a one-time purchase's duration, a
// subscription's grace and first expiry, what a refund or dispute does) and its form sets
// them, a refused value's message beside its field.
func TestConsoleStorefrontMappingsShowAndTakeEveryTerm(t *testing.T) {
	s := hosted(t)
	tenant := newTenant(t, s)
	prod, apiRef, ref := product("console-mappings"), uniq("api-ref-"), uniq("console-ref-")
	tenant.Post("/v1/storefront/mappings", map[string]any{"service_ref": apiRef, "product_id": prod, "tier": "pro", "duration_days": 30}).Expect(t, 200)
	out := browse(t, "storefrontMappings", map[string]any{"base": s.URL, "key": tenant.Token, "ip": browserIP(t, s),
		"product": prod, "apiRef": apiRef, "ref": ref})
	for _, want := range []string{"expires after 30 days", "paid period + 3 days of grace", "30 days until the first invoice", "revokes the license"} {
		if !strings.Contains(str(out, "listed"), want) {
			t.Errorf("the mapping made through the API lists as %q, missing %q", str(out, "listed"), want)
		}
	}
	for _, want := range []string{"perpetual", "paid period + 7 days of grace", "31 days until the first invoice", "keeps the license"} {
		if !strings.Contains(str(out, "added"), want) {
			t.Errorf("the mapping added in the console lists as %q, missing %q", str(out, "added"), want)
		}
	}
	var listed struct {
		Mappings []map[string]any `json:"mappings"`
	}
	if err := json.Unmarshal(tenant.Get("/v1/storefront/mappings").Expect(t, 200).Body, &listed); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, m := range listed.Mappings {
		if m["service_ref"] == ref {
			found = true
			if m["renewal_grace_days"] != 7.0 || m["on_refund"] != "keep" || m["duration_days"] != nil {
				t.Errorf("the mapping the console added reads %v", m)
			}
		}
	}
	if !found || len(listed.Mappings) != 2 {
		t.Errorf("mappings after the console: %v", listed.Mappings)
	}
}

// Every console page fits a phone (375 px): nothing scrolls sideways, wide tables scroll
// inside their card.
func TestConsoleFitsAPhoneInTheBrowser(t *testing.T) {
	s := hosted(t)
	tenant := newTenant(t, s)
	prod := product("console-phone")
	key := issueLicense(t, tenant, map[string]any{"tier": "pro", "product_id": prod, "issued_to": "someone-with-a-long-address@example.com",
		"max_activations": 3, "limits": map[string]any{"projects": 10}})
	anon(t, s).Post("/v1/activate-license", map[string]string{"key": key, "instance_id": "laptop"}).Expect(t, 200)
	browse(t, "consoleNarrow", map[string]any{"base": s.URL, "key": tenant.Token, "ip": browserIP(t, s), "licenseKey": key, "product": prod})
}
