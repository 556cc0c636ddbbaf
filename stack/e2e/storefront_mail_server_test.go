package e2e

import (
	"net"
	"strings"
	"testing"

	"github.com/keyhouse/keyhouse/devinfra/mailtest"
	"github.com/keyhouse/keyhouse/devinfra/testkit"
)

// Hosted, the mail server is the operator's, not the tenant's: when it cannot be reached,
// the tenant's deliveries (the REST answer and the console's Storefront page) say that the
// email was not sent and is retried, and name neither the server's address nor its port;
// the operator's storefront log keeps both, and still not the buyer's address.
func TestHostedMailServerFailureDoesNotShowTheServerToTheTenant(t *testing.T) {
	t.Parallel()
	testkit.Integration(t)
	down := mailtest.New(t)
	down.Stop() // a closed local port: every dial is refused
	s := startStack(t, map[string]string{
		"MULTI_TENANT": "true", "EMAIL_PROVIDER": "smtp", "SMTP_URL": down.URL(),
		"EMAIL_FROM": "Keyhouse Shop <shop@example.com>", "PUBLIC_BASE_URL": "https://licenses.example.com",
	})
	t.Cleanup(s.Stop)
	tenant := newTenant(t, s)
	sh := connectShop(t, tenant)
	link := uniq("plink_")
	sh.mapping(map[string]any{"payment_link": link, "product_id": product("sf-mail-down"), "tier": "pro"})
	local := uniq("unsent")
	evID := uniq("evt_")
	sh.deliver(event(evID, "checkout.session.completed", newSession(link, local+"@example.com"))).Expect(t, 200)

	const want = "Email delivery failed: the connection to the mail server failed; retrying"
	d := sh.await(evID, outcome("issued", "failed"))
	if d["error"] != want {
		t.Fatalf("the delivery's error is %q, want %q", d["error"], want)
	}
	_, port, err := net.SplitHostPort(down.Addr)
	if err != nil {
		t.Fatal(err)
	}
	shows := func(where, text string) {
		t.Helper()
		if strings.Contains(text, down.Addr) || strings.Contains(text, ":"+port) {
			t.Errorf("%s shows the operator's mail server (%s): %s", where, down.Addr, text)
		}
	}
	shows("the deliveries answer", string(tenant.Get("/v1/storefront/deliveries").Expect(t, 200).Body))
	web := newWebClient(t, s)
	web.signIn(tenant.Token)
	shows("the console's Storefront page", web.get("/console/storefront").expect(t, 200, want).Body)

	logs := string(readFile(t, s.LogPath("storefront")))
	if !strings.Contains(logs, "buyer email failed") || !strings.Contains(logs, "smtp send to "+down.Addr+": dial failed") {
		t.Fatalf("the storefront log does not say which mail server failed:\n%s", logs)
	}
	if strings.Contains(logs, local) {
		t.Fatal("the storefront log holds the buyer's address")
	}
}
