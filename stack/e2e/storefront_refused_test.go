package e2e

import (
	"strings"
	"testing"

	"github.com/keyhouse/keyhouse/devinfra/mailtest"
)

// A mail server that refuses the buyer's address quotes it in its answer: the delivery
// says the email failed and why, and neither the deliveries answer nor the storefront's
// log shows the address (storefront.md: written masked, j***@…).
func TestStorefrontRefusedBuyerAddressIsMaskedInTheDeliveryAndTheLog(t *testing.T) {
	t.Parallel()
	s, sink := storefrontStack(t)
	local := uniq("refused")
	buyer := local + "@example.com"
	// The sink is the storefront tests' own: only this buyer is refused.
	sink.RefuseRecipients(func(rcpt string) string {
		if strings.EqualFold(rcpt, buyer) {
			return mailtest.Rejected(rcpt)
		}
		return ""
	})
	sh := connectShop(t, newTenant(t, s))
	product, link := product("sf-refused"), uniq("plink_")
	sh.mapping(map[string]any{"payment_link": link, "product_id": product, "tier": "pro"})
	evID := uniq("evt_")
	sh.deliver(event(evID, "checkout.session.completed", newSession(link, buyer))).Expect(t, 200)

	d := sh.await(evID, outcome("issued", "failed"))
	e, _ := d["error"].(string)
	if !strings.HasPrefix(e, "Email delivery failed: ") || !strings.Contains(e, "550") ||
		!strings.Contains(e, "Recipient address rejected") || !strings.Contains(e, "r***@example.com") {
		t.Fatalf("the delivery does not say why the email failed, or for which masked address: %v", d)
	}
	if body := string(sh.c.Get("/v1/storefront/deliveries").Expect(t, 200).Body); strings.Contains(body, local) {
		t.Fatalf("the deliveries answer shows the buyer's address: %s", body)
	}
	logs := string(readFile(t, s.LogPath("storefront")))
	if !strings.Contains(logs, "buyer email failed") {
		t.Fatal("the storefront did not log the failed send")
	}
	if strings.Contains(logs, local) {
		t.Fatal("the storefront log holds the buyer's address")
	}
}
