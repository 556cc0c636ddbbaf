package e2e

import (
	"strings"
	"testing"

	"github.com/keyhouse/keyhouse/devinfra/mailtest"
)

// A mail server that refuses the buyer's address quotes it in its answer. The stack is
// hosted: the delivery says the email failed, that the server refused the address, with
// the server's status codes, and that it is retried; neither it nor the rest of the
// deliveries answer names the operator's mail server or quotes its reply. The storefront's
// log has the reply, with the address masked (storefront.md: written masked, j***@…).
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
	const want = "Email delivery failed: the mail server refused the recipient's address (550 5.1.1); retrying"
	if d["error"] != want {
		t.Fatalf("the delivery's error is %q, want %q", d["error"], want)
	}
	body := string(sh.c.Get("/v1/storefront/deliveries").Expect(t, 200).Body)
	if strings.Contains(body, local) || strings.Contains(body, sink.Addr) {
		t.Fatalf("the deliveries answer shows the buyer's address or the mail server: %s", body)
	}
	logs := string(readFile(t, s.LogPath("storefront")))
	if !strings.Contains(logs, "buyer email failed") || !strings.Contains(logs, "smtp send to "+sink.Addr) ||
		!strings.Contains(logs, "Recipient address rejected") || !strings.Contains(logs, "r***@example.com") {
		t.Fatal("the storefront log does not say which server refused the email, why, or for which masked address")
	}
	if strings.Contains(logs, local) {
		t.Fatal("the storefront log holds the buyer's address")
	}
}
