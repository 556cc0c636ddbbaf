package e2e

import (
	"fmt"
	"strings"
	"testing"
)

// A buyer who paid and got nothing is not silent: the tenant is mailed (once per
// purchase, without the buyer's address), and the over-quota and unmapped purchases lead
// the console's storefront page with what to do and a link to those deliveries.
func TestStorefrontUnfulfilledPurchasesLeadTheConsole(t *testing.T) {
	s, sink := storefrontStack(t)
	owner := uniq("owner") + "@example.com"
	key, _ := admin(t, s).Post("/v1/operator/tenants", map[string]string{"name": "Attention", "email": owner}).Expect(t, 200).JSON(t)["api_key"].(string)
	c := newClient(t, s.URL, key)
	sh := connectShop(t, c)
	prod, link := product("sf-attention"), uniq("plink_")
	sh.mapping(map[string]any{"payment_link": link, "product_id": prod, "tier": "pro"})
	for i := range 5 {
		issueLicense(t, c, map[string]any{"tier": "free", "product_id": prod, "issued_to": fmt.Sprint("seed", i)})
	}
	quota, unmapped := uniq("evt_"), uniq("evt_")
	quotaBuyer := uniq("q") + "@example.com"
	quotaSession := newSession(link, quotaBuyer)
	sh.deliver(event(quota, "checkout.session.completed", quotaSession)).Expect(t, 200)
	sh.deliver(event(unmapped, "checkout.session.completed", newSession(uniq("plink_"), uniq("u")+"@example.com"))).Expect(t, 200)
	sh.awaitOutcome(quota, outcome("over_quota"))
	sh.awaitOutcome(unmapped, outcome("unmapped"))

	mails := awaitMail(t, sink, owner, 2)
	var quotaMail string
	for _, m := range mails {
		if strings.Contains(m.Body, quotaSession.ID) {
			quotaMail = m.Body
		}
		if strings.Contains(m.Body, quotaBuyer) {
			t.Errorf("the vendor alert carries the buyer's address:\n%s", m.Body)
		}
	}
	for _, want := range []string{"got no license", "License issuance quota exceeded", quota, "upgrade your plan", "resend the event"} {
		if !strings.Contains(quotaMail, want) {
			t.Errorf("the over-quota alert lacks %q:\n%s", want, quotaMail)
		}
	}
	// Stripe's redelivery of the same event is tried again (still over quota) and does not
	// mail again: counted at the end, after the browser's seconds have let it settle.
	sh.deliver(event(quota, "checkout.session.completed", quotaSession)).Expect(t, 200)

	out := browse(t, "storefrontAttention", map[string]any{"base": s.URL, "key": c.Token, "ip": browserIP(t, s)})
	text := str(out, "text")
	for _, want := range []string{
		"Buyers paid and got no license",
		"1 purchase over your plan's license quota. Upgrade your plan on the Billing page, or revoke or delete licenses you no longer need, then resend each event",
		"1 purchase matching no mapping. Add a mapping",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the storefront page says %q; want it to say %q", text, want)
		}
	}
	if out["rows"] != float64(1) {
		t.Errorf("the link lists %v deliveries, want the 1 over quota", out["rows"])
	}
	if n := len(sink.To(owner)); n != 2 {
		t.Errorf("the tenant got %d alerts for 2 purchases", n)
	}
}
