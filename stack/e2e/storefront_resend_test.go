package e2e

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// A buyer lost the key email. The support desk finds the purchase by the Stripe customer,
// and resends the email to the address the buyer gave at checkout: the buyer gets the
// same key and portal link again. Resending the event from Stripe sends nothing, and the
// deliveries list says so rather than claiming an email went out. The email answers to
// the vendor (hosted: the tenant's name and address when it set no others), never to the
// installation's operator.
func TestStorefrontLostKeyIsResentToTheAddressOnRecord(t *testing.T) {
	t.Parallel()
	s, sink := storefrontStack(t)
	n := uniq("")
	vendorName, vendorEmail := "Acme Tools "+n, "acme-"+n+"@example.com"
	resp := admin(t, s).Post("/v1/operator/tenants", map[string]string{"name": vendorName, "email": vendorEmail}).Expect(t, 200)
	vendor := newClient(t, s.URL, resp.JSON(t)["api_key"].(string))
	sh := connectShop(t, vendor)
	link := uniq("plink_")
	sh.mapping(map[string]any{"payment_link": link, "product_id": product("sf-lost"), "tier": "pro", "seats": 2})

	buyer := uniq("lost") + "@example.com"
	sess := newSession(link, buyer)
	ev1 := uniq("evt_")
	sh.deliver(event(ev1, "checkout.session.completed", sess)).Expect(t, 200)
	first := sh.await(ev1, outcome("issued", "sent"))
	got := awaitMail(t, sink, buyer, 1)[0]
	if from := got.HeaderText("From"); from != fmt.Sprintf("%q <shop@example.com>", vendorName) {
		t.Errorf("From %q, want the vendor's name on EMAIL_FROM's address", from)
	}
	if rt := got.HeaderText("Reply-To"); rt != "<"+vendorEmail+">" {
		t.Errorf("Reply-To %q, want the vendor's <%s>, not the operator's EMAIL_REPLY_TO", rt, vendorEmail)
	}
	if !strings.Contains(got.Body, "Reply to it if you need help from "+vendorName+".") {
		t.Errorf("the email does not say who helps:\n%s", got.Body)
	}

	// Stripe's Resend: the same event id, and a new event id for the same session.
	sh.deliver(event(ev1, "checkout.session.completed", sess)).Expect(t, 200)
	ev2 := uniq("evt_")
	sh.deliver(event(ev2, "checkout.session.completed", sess)).Expect(t, 200)
	second := sh.await(ev2, outcome("issued", "already_sent"))
	if second["license_key"] != first["license_key"] || second["error"] != nil {
		t.Fatalf("second delivery %v", second)
	}
	if d := sh.delivery(ev1); d["email_status"] != "sent" {
		t.Fatalf("the delivery the email went out with now says %v", d["email_status"])
	}
	time.Sleep(2 * time.Second) // whatever is in flight settles: still one email
	if n := len(sink.To(buyer)); n != 1 {
		t.Fatalf("%d emails after Stripe's resends, want 1", n)
	}

	// The runbook: find the purchase by the Stripe customer (or checkout session)...
	for _, q := range []string{"customer=" + sess.Customer, "checkout_session_id=" + sess.ID} {
		if ds, total := sh.deliveries(q); total != 2 || len(ds) != 2 || ds[0]["event_id"] != ev2 {
			t.Fatalf("deliveries?%s: %v (total %d)", q, ds, total)
		}
	}
	if _, total := sh.deliveries("customer=cus_nobody"); total != 0 {
		t.Fatalf("another customer matches %d deliveries", total)
	}
	sh.c.Get("/v1/storefront/deliveries?customer="+"cus%20x").ExpectError(t, 400, "customer must be a Stripe id (letters, digits and underscores)")

	// ...and resend. A double submit under one Idempotency-Key mails the buyer once.
	path := fmt.Sprintf("/v1/storefront/deliveries/%v/resend-email", second["id"])
	idem := uniq("resend-")
	r1 := sh.c.Do(http.MethodPost, path, map[string]any{}, "Idempotency-Key", idem).Expect(t, 200)
	r2 := sh.c.Do(http.MethodPost, path, map[string]any{}, "Idempotency-Key", idem).Expect(t, 200)
	if string(r1.Body) != string(r2.Body) {
		t.Fatalf("replay answered %s, first %s", r2.Body, r1.Body)
	}
	masked := buyer[:1] + "***@example.com"
	want := regexp.MustCompile(fmt.Sprintf(`^\{"delivery_id":%v,"checkout_session_id":"%s","email_status":"sent","sent_to":"%s","sent_at":"[^"]+","resend_count":1\}$`,
		second["id"], sess.ID, regexp.QuoteMeta(masked)))
	if !want.Match(r1.Body) {
		t.Fatalf("resend answered %s", r1.Body)
	}
	mails := awaitMail(t, sink, buyer, 2)
	if len(mails) != 2 || mails[1].Body != mails[0].Body || mails[1].Subject != mails[0].Subject {
		t.Fatalf("resent email differs from the first:\n%s\n---\n%s", mails[0].Body, mails[1].Body)
	}

	// Five resends a day per purchase: of eight at once, four more go out.
	var wg sync.WaitGroup
	codes := make([]int, 8)
	bodies := make([]string, 8)
	for i := range codes {
		wg.Go(func() {
			r := sh.c.Post(fmt.Sprintf("/v1/storefront/deliveries/%v/resend-email", first["id"]), map[string]any{})
			codes[i], bodies[i] = r.Status, string(r.Body)
		})
	}
	wg.Wait()
	var sent, limited int
	for i, c := range codes {
		switch {
		case c == 200:
			sent++
		case c == 429 && strings.HasPrefix(bodies[i], `{"error":"This purchase's email was resent 5 times in the last 24 hours; retry after `):
			limited++
		default:
			t.Fatalf("resend answered %d %s", c, bodies[i])
		}
	}
	if sent != 4 || limited != 4 {
		t.Fatalf("%d resends sent and %d refused, want 4 and 4", sent, limited)
	}
	if n := len(awaitMail(t, sink, buyer, 6)); n != 6 {
		t.Fatalf("%d emails, want 6", n)
	}
	for _, b := range append(bodies, string(r1.Body)) {
		if strings.Contains(b, first["license_key"].(string)) || strings.Contains(b, buyer) || strings.Contains(b, "/portal/") {
			t.Fatalf("a resend answer carries a credential or the address: %s", b)
		}
	}

	// What cannot be resent.
	sh.c.Post("/v1/storefront/deliveries/999999999/resend-email", map[string]any{}).ExpectError(t, 404, "Delivery not found")
	sh.c.Post("/v1/storefront/deliveries/abc/resend-email", map[string]any{}).ExpectError(t, 404, "Delivery not found")
	newTenant(t, s).Post(path, map[string]any{}).ExpectError(t, 404, "Delivery not found")
	noEmail := newSession(link, "")
	ev3 := uniq("evt_")
	sh.deliver(event(ev3, "checkout.session.completed", noEmail)).Expect(t, 200)
	d3 := sh.await(ev3, outcome("issued", "failed"))
	if d3["error"] != "The checkout session has no customer email; no email was sent" {
		t.Fatalf("no email: %v", d3)
	}
	sh.c.Post(fmt.Sprintf("/v1/storefront/deliveries/%v/resend-email", d3["id"]), map[string]any{}).
		ExpectError(t, 409, "No buyer address is on record for this purchase")
	unmapped := newSession(uniq("plink_"), buyer)
	ev4 := uniq("evt_")
	sh.deliver(event(ev4, "checkout.session.completed", unmapped)).Expect(t, 200)
	d4 := sh.await(ev4, outcome("unmapped"))
	sh.c.Post(fmt.Sprintf("/v1/storefront/deliveries/%v/resend-email", d4["id"]), map[string]any{}).
		ExpectError(t, 409, "No license was issued for this delivery's purchase; there is no email to resend")
}

// Every address a checkout may carry: what can be mailed is (a name-addr's address, a
// quoted local part, an internationalized domain in punycode), and what cannot says why,
// not that there was none. The sink offers no SMTPUTF8, so a non-ASCII local part is
// refused with nothing sent.
func TestStorefrontBuyerAddressesAreMailedOrRefusedWithTheReason(t *testing.T) {
	t.Parallel()
	s, sink := storefrontStack(t)
	sh := connectShop(t, newTenant(t, s))
	link := uniq("plink_")
	sh.mapping(map[string]any{"payment_link": link, "product_id": product("sf-addr"), "tier": "pro"})
	u := uniq("")
	for _, c := range []struct {
		given, rcpt, status, err string
	}{
		{"Jane Doe <jane" + u + "@example.com>", "jane" + u + "@example.com", "sent", ""},
		{`"john smith` + u + `"@example.com`, "john smith" + u + "@example.com", "sent", ""},
		{"user" + u + "@münchen.de", "user" + u + "@xn--mnchen-3ya.de", "sent", ""},
		{"not an address " + u, "", "failed", "The checkout session's customer email cannot be used (it is not an email address); no email was sent"},
		{"zoë" + u + "@example.com", "", "failed", "Email delivery failed: mail: the recipient's address has a non-ASCII local part, which needs SMTPUTF8 (RFC 6531), and the mail server does not offer it"},
	} {
		ev := uniq("evt_")
		sh.deliver(event(ev, "checkout.session.completed", newSession(link, c.given))).Expect(t, 200)
		d := sh.await(ev, func(d map[string]any) bool { return d["email_status"] == "sent" || d["email_status"] == "failed" })
		if d["email_status"] != c.status || c.err != "" && d["error"] != c.err {
			t.Errorf("%q: email %v, error %v; want %s %q", c.given, d["email_status"], d["error"], c.status, c.err)
			continue
		}
		if c.rcpt != "" {
			m := awaitMail(t, sink, c.rcpt, 1)[0]
			if !strings.Contains(m.Body, d["license_key"].(string)) {
				t.Errorf("%q: the email to %s lacks the key", c.given, c.rcpt)
			}
		}
	}
	for _, m := range sink.Messages() {
		for _, r := range m.To {
			if strings.ContainsAny(r, "üë") {
				t.Errorf("a non-ASCII address went out raw: %q", r)
			}
		}
	}
}
