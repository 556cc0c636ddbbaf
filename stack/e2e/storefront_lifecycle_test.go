package e2e

import (
	"encoding/json"
	"net/url"
	"sync"
	"testing"
	"time"
)

// After the first sale the license follows the money: Stripe-signed invoice, subscription,
// charge and dispute events, delivered in any order, any number of times, move its expiry
// and status (docs/storefront.md, lifecycle).

// checkout is a checkout.session.completed payload for s with the Stripe ids later
// events name the purchase by (mode subscription when sub is set).
func checkout(eventID string, s session, sub, paymentIntent string) []byte {
	var ev map[string]any
	_ = json.Unmarshal(event(eventID, "checkout.session.completed", s), &ev)
	obj := ev["data"].(map[string]any)["object"].(map[string]any)
	if sub != "" {
		obj["mode"], obj["subscription"] = "subscription", sub
	}
	if paymentIntent != "" {
		obj["payment_intent"] = paymentIntent
	}
	b, _ := json.Marshal(ev)
	return b
}

// lifecycleEvent is a Stripe event of type typ carrying obj.
func lifecycleEvent(eventID, typ string, obj map[string]any) []byte {
	var ev map[string]any
	_ = json.Unmarshal(event(eventID, typ, session{}), &ev)
	ev["data"] = map[string]any{"object": obj}
	b, _ := json.Marshal(ev)
	return b
}

// invoicePaid is invoice.paid for a subscription's period ending at end.
func invoicePaid(eventID, sub string, end time.Time, first bool) []byte {
	return lifecycleEvent(eventID, "invoice.paid", invoiceObject(sub, end, first, uniq("pi_")))
}

// invoiceObject is a paid invoice of API version 2023-10-16 (subscription, payment_intent
// and charge at the top) for the period ending at end, paid by paymentIntent.
func invoiceObject(sub string, end time.Time, first bool, paymentIntent string) map[string]any {
	reason := "subscription_cycle"
	if first {
		reason = "subscription_create"
	}
	start := end.AddDate(0, -1, 0)
	return map[string]any{
		"id": uniq("in_"), "object": "invoice", "subscription": sub, "billing_reason": reason, "status": "paid",
		"payment_intent": paymentIntent, "charge": uniq("ch_"), "period_end": start.Unix(),
		"lines": map[string]any{"object": "list", "data": []any{map[string]any{
			"id": uniq("il_"), "object": "line_item", "period": map[string]any{"start": start.Unix(), "end": end.Unix()}}}},
	}
}

// basil is payload as an endpoint of API version 2025-03-31.basil receives it.
func basil(payload []byte) []byte {
	var ev map[string]any
	_ = json.Unmarshal(payload, &ev)
	ev["api_version"] = "2025-03-31.basil"
	b, _ := json.Marshal(ev)
	return b
}

// basilInvoice is invoiceObject in the shape of 2025-03-31.basil: the subscription under
// parent.subscription_details, no payment_intent or charge (invoice_payment.paid names them).
func basilInvoice(sub string, end time.Time, first bool) map[string]any {
	in := invoiceObject(sub, end, first, "")
	delete(in, "subscription")
	delete(in, "payment_intent")
	delete(in, "charge")
	in["parent"] = map[string]any{"type": "subscription_details", "quote_details": nil,
		"subscription_details": map[string]any{"subscription": sub, "metadata": map[string]any{}}}
	return in
}

func chargeRefunded(eventID, paymentIntent string, amount, refunded int64) []byte {
	return lifecycleEvent(eventID, "charge.refunded", map[string]any{
		"id": uniq("ch_"), "object": "charge", "payment_intent": paymentIntent, "amount": amount,
		"amount_refunded": refunded, "refunded": amount == refunded,
	})
}

func dispute(eventID, typ, disputeID, paymentIntent, status string) []byte {
	return lifecycleEvent(eventID, typ, map[string]any{
		"id": disputeID, "object": "dispute", "charge": uniq("ch_"), "payment_intent": paymentIntent,
		"status": status, "amount": 1900,
	})
}

// licenseOf reads a license as the vendor sees it, from a client address of its own: the
// polls of a whole run would exhaust one address's Admin-Info budget.
func licenseOf(t *testing.T, c *Client, key string) map[string]any {
	t.Helper()
	return newClient(t, c.Base, c.Token).Get("/v1/admin/license/"+url.PathEscape(key)).Expect(t, 200).JSON(t)
}

// awaitOutcome is shop.await with each look from a client address of its own (as
// licenseOf), for tests that wait on many deliveries.
func (s *shop) awaitOutcome(eventID string, ok func(map[string]any) bool) map[string]any {
	s.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	var last map[string]any
	for time.Now().Before(deadline) {
		look := &shop{t: s.t, c: newClient(s.t, s.c.Base, s.c.Token), webhook: s.webhook, secret: s.secret}
		if last = look.delivery(eventID); last != nil && ok(last) {
			return last
		}
		time.Sleep(200 * time.Millisecond)
	}
	s.t.Fatalf("delivery of %s never reached the expected state; last: %v", eventID, last)
	return nil
}

// awaitLicense polls the license until ok accepts it.
func awaitLicense(t *testing.T, c *Client, key string, ok func(map[string]any) bool) map[string]any {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	var last map[string]any
	for time.Now().Before(deadline) {
		if last = licenseOf(t, c, key); ok(last) {
			return last
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("license %s never reached the expected state; last: %v", key, last)
	return nil
}

func expiresAt(at time.Time) func(map[string]any) bool {
	want := at.UTC().Format(time.RFC3339)
	return func(l map[string]any) bool { return l["expires_at"] == want }
}

func licenseStatus(s string) func(map[string]any) bool {
	return func(l map[string]any) bool { return l["status"] == s }
}

// deliverN delivers payload n times at once; every copy must answer 200.
func (s *shop) deliverN(payload []byte, n int) {
	s.t.Helper()
	var wg sync.WaitGroup
	codes := make([]int, n)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i] = s.deliver(payload).Status
		}()
	}
	wg.Wait()
	for i, c := range codes {
		if c != 200 {
			s.t.Fatalf("copy %d answered %d", i, c)
		}
	}
}

// A subscription bought, renewed twice and canceled: the expiry is the paid period's end
// plus the mapping's grace at each step; a late older invoice changes nothing.
func TestStorefrontSubscriptionFollowsInvoices(t *testing.T) {
	t.Parallel()
	s, _ := storefrontStack(t)
	sh := connectShop(t, newTenant(t, s))
	prod, ref := product("sf-sub"), uniq("ref-")
	m := sh.mapping(map[string]any{"service_ref": ref, "product_id": prod, "tier": "pro", "renewal_grace_days": 2})
	if m["renewal_grace_days"] != float64(2) || m["on_refund"] != "revoke" {
		t.Fatalf("mapping %v", m)
	}
	grace := 2 * 24 * time.Hour

	sess := newSession("", uniq("sub")+"@example.com")
	sess.ServiceRef = ref
	sub := uniq("sub_")
	ev := uniq("evt_")
	sh.deliver(checkout(ev, sess, sub, "")).Expect(t, 200)
	key := sh.awaitOutcome(ev, outcome("issued", "sent"))["license_key"].(string)
	// Until the first invoice is seen: 31 days (the mapping has no duration_days), never perpetual.
	if l := licenseOf(t, sh.c, key); l["expires_at"] == nil {
		t.Fatalf("a subscription's license is perpetual: %v", l)
	}

	period := time.Now().UTC().Truncate(time.Second).Add(30 * 24 * time.Hour)
	steps := []struct {
		end     time.Time
		first   bool
		outcome string
	}{
		{period, true, "expiry_set"},
		{period.AddDate(0, 1, 0), false, "renewed"},
		{period.AddDate(0, 2, 0), false, "renewed"},
	}
	for _, st := range steps {
		ev := uniq("evt_")
		sh.deliver(invoicePaid(ev, sub, st.end, st.first)).Expect(t, 200)
		d := sh.awaitOutcome(ev, outcome(st.outcome))
		if d["license_key"] != key {
			t.Fatalf("invoice delivery %v", d)
		}
		awaitLicense(t, sh.c, key, expiresAt(st.end.Add(grace)))
	}
	last := steps[len(steps)-1].end.Add(grace)

	late := uniq("evt_")
	sh.deliver(invoicePaid(late, sub, steps[1].end, false)).Expect(t, 200)
	sh.awaitOutcome(late, outcome("ignored"))
	if l := licenseOf(t, sh.c, key); !expiresAt(last)(l) {
		t.Fatalf("a late older invoice moved the expiry: %v", l)
	}

	end := uniq("evt_")
	sh.deliver(lifecycleEvent(end, "customer.subscription.deleted", map[string]any{
		"id": sub, "object": "subscription", "status": "canceled"})).Expect(t, 200)
	sh.awaitOutcome(end, outcome("canceled"))
	if l := licenseOf(t, sh.c, key); !expiresAt(last)(l) || l["status"] != "active" {
		t.Fatalf("after cancel the license should expire at the end of what was paid: %v", l)
	}
	if n := len(licensesOf(t, sh.c, prod)); n != 1 {
		t.Fatalf("%d licenses for one subscription", n)
	}
}

// Invoices delivered before their checkout, each 20 times at once, and the checkout
// itself 20 times at once: one license, expiring at the latest paid period plus grace.
func TestStorefrontSubscriptionEventsBeforeCheckout(t *testing.T) {
	t.Parallel()
	s, _ := storefrontStack(t)
	sh := connectShop(t, newTenant(t, s))
	prod, ref := product("sf-sub-early"), uniq("ref-")
	sh.mapping(map[string]any{"service_ref": ref, "product_id": prod, "tier": "pro", "duration_days": 30})
	sess := newSession("", uniq("early")+"@example.com")
	sess.ServiceRef = ref
	sub := uniq("sub_")

	p1 := time.Now().UTC().Truncate(time.Second).Add(30 * 24 * time.Hour)
	p2 := p1.AddDate(0, 1, 0)
	inv1, inv2 := uniq("evt_"), uniq("evt_")
	renewal := invoicePaid(inv2, sub, p2, false)
	sh.deliverN(renewal, 20)
	sh.deliverN(invoicePaid(inv1, sub, p1, true), 20)
	for _, ev := range []string{inv1, inv2} {
		if d := sh.awaitOutcome(ev, outcome("held")); d["checkout_session_id"] != "" {
			t.Fatalf("held delivery %v", d)
		}
	}

	ev := uniq("evt_")
	sh.deliverN(checkout(ev, sess, sub, ""), 20)
	key := sh.awaitOutcome(ev, outcome("issued", "sent"))["license_key"].(string)
	want := p2.Add(3 * 24 * time.Hour) // the default grace
	awaitLicense(t, sh.c, key, expiresAt(want))
	sh.awaitOutcome(inv2, outcome("renewed"))
	// The older invoice says what it did in the order the worker applied it: it set the
	// expiry if it came first, or was ignored as older; the license ends the same.
	d := sh.awaitOutcome(inv1, func(d map[string]any) bool { return d["outcome"] == "expiry_set" || d["outcome"] == "ignored" })
	if d["email_status"] != nil {
		t.Fatalf("an invoice's delivery carries the buyer email's status: %v", d)
	}

	// Stripe's retries of everything change nothing.
	sh.deliverN(renewal, 5)
	sh.deliverN(checkout(ev, sess, sub, ""), 5)
	time.Sleep(2 * time.Second)
	if l := licenseOf(t, sh.c, key); !expiresAt(want)(l) {
		t.Fatalf("redeliveries moved the license: %v", l)
	}
	if n := len(licensesOf(t, sh.c, prod)); n != 1 {
		t.Fatalf("%d licenses for one subscription", n)
	}
}

// A full refund and a dispute revoke, a dispute won reactivates, a partial refund and a
// mapping that keeps licenses change nothing, and a refund seen before its checkout
// revokes the license as soon as it is issued.
func TestStorefrontRefundsAndDisputes(t *testing.T) {
	t.Parallel()
	s, _ := storefrontStack(t)
	sh := connectShop(t, newTenant(t, s))
	prod := product("sf-refund")
	revokeRef, keepRef := uniq("ref-"), uniq("ref-")
	sh.mapping(map[string]any{"service_ref": revokeRef, "product_id": prod, "tier": "pro"})
	sh.mapping(map[string]any{"service_ref": keepRef, "product_id": prod, "tier": "pro", "on_refund": "keep"})

	buy := func(ref string) (pi, key string) {
		sess := newSession("", uniq("refund")+"@example.com")
		sess.ServiceRef = ref
		pi = uniq("pi_")
		ev := uniq("evt_")
		sh.deliver(checkout(ev, sess, "", pi)).Expect(t, 200)
		return pi, sh.awaitOutcome(ev, outcome("issued", "sent"))["license_key"].(string)
	}

	t.Run("refund", func(t *testing.T) {
		pi, key := buy(revokeRef)
		partial := uniq("evt_")
		sh.deliver(chargeRefunded(partial, pi, 1900, 500)).Expect(t, 200)
		sh.awaitOutcome(partial, outcome("ignored"))
		if l := licenseOf(t, sh.c, key); l["status"] != "active" {
			t.Fatalf("a partial refund changed the license: %v", l)
		}
		full := uniq("evt_")
		sh.deliverN(chargeRefunded(full, pi, 1900, 1900), 20)
		sh.awaitOutcome(full, outcome("revoked_refund"))
		awaitLicense(t, sh.c, key, licenseStatus("revoked"))
	})

	t.Run("dispute", func(t *testing.T) {
		pi, key := buy(revokeRef)
		dp := uniq("dp_")
		opened := uniq("evt_")
		sh.deliver(dispute(opened, "charge.dispute.created", dp, pi, "needs_response")).Expect(t, 200)
		sh.awaitOutcome(opened, outcome("revoked_dispute"))
		awaitLicense(t, sh.c, key, licenseStatus("revoked"))
		won := uniq("evt_")
		sh.deliverN(dispute(won, "charge.dispute.closed", dp, pi, "won"), 20)
		sh.awaitOutcome(won, outcome("reactivated"))
		awaitLicense(t, sh.c, key, licenseStatus("active"))
	})

	t.Run("keep", func(t *testing.T) {
		pi, key := buy(keepRef)
		full := uniq("evt_")
		sh.deliver(chargeRefunded(full, pi, 1900, 1900)).Expect(t, 200)
		sh.awaitOutcome(full, outcome("kept"))
		if l := licenseOf(t, sh.c, key); l["status"] != "active" {
			t.Fatalf("on_refund keep revoked the license: %v", l)
		}
	})

	t.Run("refund before checkout", func(t *testing.T) {
		sess := newSession("", uniq("early")+"@example.com")
		sess.ServiceRef = revokeRef
		pi := uniq("pi_")
		refund := uniq("evt_")
		sh.deliver(chargeRefunded(refund, pi, 1900, 1900)).Expect(t, 200)
		sh.awaitOutcome(refund, outcome("held"))
		ev := uniq("evt_")
		sh.deliver(checkout(ev, sess, "", pi)).Expect(t, 200)
		key := sh.awaitOutcome(ev, outcome("issued"))["license_key"].(string)
		sh.awaitOutcome(refund, outcome("revoked_refund"))
		awaitLicense(t, sh.c, key, licenseStatus("revoked"))
	})
}

// revokingShop connects a shop of a new tenant with a mapping that revokes on refunds and
// disputes, and returns it, the mapping's service ref, and step: deliver a payload and
// wait for its delivery's outcome, which must carry wantError ("" for none).
func revokingShop(t *testing.T, name string) (*shop, string, func(payload []byte, eventID, wantOutcome, wantError string)) {
	t.Helper()
	s, _ := storefrontStack(t)
	sh := connectShop(t, newTenant(t, s))
	ref := uniq("ref-")
	sh.mapping(map[string]any{"service_ref": ref, "product_id": product(name), "tier": "pro"})
	step := func(payload []byte, eventID, wantOutcome, wantError string) {
		t.Helper()
		sh.deliver(payload).Expect(t, 200)
		d := sh.awaitOutcome(eventID, outcome(wantOutcome))
		if got, _ := d["error"].(string); got != wantError {
			t.Fatalf("%s: error %q, want %q", wantOutcome, got, wantError)
		}
	}
	return sh, ref, step
}

// A won dispute does not reactivate a purchase refunded in full, even when the refund
// came between the dispute and its win.
func TestStorefrontWonDisputeAfterFullRefundStaysRevoked(t *testing.T) {
	t.Parallel()
	sh, ref, step := revokingShop(t, "sf-won-refund")
	sess := newSession("", uniq("won")+"@example.com")
	sess.ServiceRef = ref
	pi, ev := uniq("pi_"), uniq("evt_")
	sh.deliver(checkout(ev, sess, "", pi)).Expect(t, 200)
	key := sh.awaitOutcome(ev, outcome("issued"))["license_key"].(string)
	dp := uniq("dp_")
	opened, refunded, won := uniq("evt_"), uniq("evt_"), uniq("evt_")
	step(dispute(opened, "charge.dispute.created", dp, pi, "needs_response"), opened, "revoked_dispute", "")
	step(chargeRefunded(refunded, pi, 1900, 1900), refunded, "revoked_refund", "")
	step(dispute(won, "charge.dispute.closed", dp, pi, "won"), won, "ignored",
		"The dispute was won, but the purchase was refunded in full: the license stays revoked")
	if l := licenseOf(t, sh.c, key); l["status"] != "revoked" {
		t.Fatalf("a purchase refunded in full ended with its license %v", l["status"])
	}
}

// A subscription with two paid invoices and a dispute on each: winning one does not
// reactivate the license while the other is open, nor once that one is lost.
func TestStorefrontWonDisputeWhileAnotherIsOpenStaysRevoked(t *testing.T) {
	t.Parallel()
	sh, ref, step := revokingShop(t, "sf-won-two")
	sess := newSession("", uniq("two")+"@example.com")
	sess.ServiceRef = ref
	sub, ev := uniq("sub_"), uniq("evt_")
	sh.deliver(checkout(ev, sess, sub, "")).Expect(t, 200)
	key := sh.awaitOutcome(ev, outcome("issued"))["license_key"].(string)
	p1 := time.Now().UTC().Truncate(time.Second).Add(30 * 24 * time.Hour)
	pi1, pi2 := uniq("pi_"), uniq("pi_")
	inv1, inv2 := uniq("evt_"), uniq("evt_")
	step(lifecycleEvent(inv1, "invoice.paid", invoiceObject(sub, p1, true, pi1)), inv1, "expiry_set", "")
	step(lifecycleEvent(inv2, "invoice.paid", invoiceObject(sub, p1.AddDate(0, 1, 0), false, pi2)), inv2, "renewed", "")
	dp1, dp2 := uniq("dp_"), uniq("dp_")
	open1, open2, won1, lost2 := uniq("evt_"), uniq("evt_"), uniq("evt_"), uniq("evt_")
	step(dispute(open1, "charge.dispute.created", dp1, pi1, "needs_response"), open1, "revoked_dispute", "")
	step(dispute(open2, "charge.dispute.created", dp2, pi2, "needs_response"), open2, "revoked_dispute", "")
	step(dispute(won1, "charge.dispute.closed", dp1, pi1, "won"), won1, "ignored",
		"The dispute was won, but dispute "+dp2+" is open or lost: the license stays revoked")
	if l := licenseOf(t, sh.c, key); l["status"] != "revoked" {
		t.Fatalf("a won dispute reactivated the license while another is open: %v", l["status"])
	}
	step(dispute(lost2, "charge.dispute.closed", dp2, pi2, "lost"), lost2, "ignored",
		"The dispute closed as lost: the license stays revoked")
	if l := licenseOf(t, sh.c, key); l["status"] != "revoked" {
		t.Fatalf("a lost chargeback left the license %v", l["status"])
	}
}

// A license the vendor revoked (revoke-license: a leaked key) stays revoked: a dispute
// says it changed nothing, and its win does not reactivate what the storefront did not revoke.
func TestStorefrontWonDisputeLeavesTheVendorsRevoke(t *testing.T) {
	t.Parallel()
	sh, ref, step := revokingShop(t, "sf-leak")
	sess := newSession("", uniq("leak")+"@example.com")
	sess.ServiceRef = ref
	pi, ev := uniq("pi_"), uniq("evt_")
	sh.deliver(checkout(ev, sess, "", pi)).Expect(t, 200)
	key := sh.awaitOutcome(ev, outcome("issued"))["license_key"].(string)
	sh.c.Post("/v1/revoke-license", map[string]any{"key": key, "revoked": true}).Expect(t, 200)

	dp, opened, won := uniq("dp_"), uniq("evt_"), uniq("evt_")
	step(dispute(opened, "charge.dispute.created", dp, pi, "needs_response"), opened, "ignored",
		"The license was already revoked outside the storefront: it stays revoked, and the storefront will not reactivate it")
	step(dispute(won, "charge.dispute.closed", dp, pi, "won"), won, "ignored",
		"The dispute was won, but the license was revoked outside the storefront: it stays revoked")
	if l := licenseOf(t, sh.c, key); l["status"] != "revoked" {
		t.Fatalf("the won dispute undid the vendor's revoke: %v", l["status"])
	}
}

// An endpoint on API version 2025-03-31.basil: the invoice names its subscription under
// parent.subscription_details and not its payment, which invoice_payment.paid names; a
// charge no longer names its invoice. Renewals move the expiry, and a refund of a renewal
// charge (here delivered before the event that links its payment) revokes.
func TestStorefrontBasilEvents(t *testing.T) {
	t.Parallel()
	s, _ := storefrontStack(t)
	sh := connectShop(t, newTenant(t, s))
	prod, ref := product("sf-basil"), uniq("ref-")
	sh.mapping(map[string]any{"service_ref": ref, "product_id": prod, "tier": "pro", "renewal_grace_days": 0})
	sess := newSession("", uniq("basil")+"@example.com")
	sess.ServiceRef = ref
	sub, ev := uniq("sub_"), uniq("evt_")
	sh.deliver(basil(checkout(ev, sess, sub, ""))).Expect(t, 200)
	key := sh.awaitOutcome(ev, outcome("issued"))["license_key"].(string)

	p1 := time.Now().UTC().Truncate(time.Second).Add(30 * 24 * time.Hour)
	for _, st := range []struct {
		end     time.Time
		first   bool
		outcome string
	}{{p1, true, "expiry_set"}, {p1.AddDate(0, 1, 0), false, "renewed"}} {
		ev := uniq("evt_")
		sh.deliver(basil(lifecycleEvent(ev, "invoice.paid", basilInvoice(sub, st.end, st.first)))).Expect(t, 200)
		sh.awaitOutcome(ev, outcome(st.outcome))
		awaitLicense(t, sh.c, key, expiresAt(st.end))
	}

	renewal := basilInvoice(sub, p1.AddDate(0, 2, 0), false)
	inv, pi, ch := renewal["id"].(string), uniq("pi_"), uniq("ch_")
	refund := uniq("evt_")
	sh.deliver(basil(lifecycleEvent(refund, "charge.refunded", map[string]any{
		"id": ch, "object": "charge", "payment_intent": pi, "amount": 1900, "amount_refunded": 1900, "refunded": true,
	}))).Expect(t, 200)
	sh.awaitOutcome(refund, outcome("held"))
	paid, linked := uniq("evt_"), uniq("evt_")
	sh.deliver(basil(lifecycleEvent(paid, "invoice.paid", renewal))).Expect(t, 200)
	sh.awaitOutcome(paid, outcome("renewed"))
	sh.deliver(basil(lifecycleEvent(linked, "invoice_payment.paid", map[string]any{
		"id": uniq("inpay_"), "object": "invoice_payment", "invoice": inv, "status": "paid", "is_default": true,
		"amount_paid": 1900, "payment": map[string]any{"type": "payment_intent", "payment_intent": pi},
	}))).Expect(t, 200)
	sh.awaitOutcome(linked, outcome("ignored"))
	sh.awaitOutcome(refund, outcome("revoked_refund"))
	awaitLicense(t, sh.c, key, licenseStatus("revoked"))

	// An invoice of no subscription is not a storefront purchase, and says so.
	oneOff := uniq("evt_")
	in := basilInvoice(sub, p1, false)
	in["parent"] = nil
	sh.deliver(basil(lifecycleEvent(oneOff, "invoice.paid", in))).Expect(t, 200)
	if d := sh.awaitOutcome(oneOff, outcome("ignored")); d["error"] !=
		"The invoice is not a subscription's (no subscription, nor parent.subscription_details.subscription)" {
		t.Fatalf("one-off invoice: %v", d)
	}
}

// A change of plan mid-period is paid by a proration invoice for the period already paid:
// the expiry stays, and the delivery does not call it a renewal.
func TestStorefrontProrationInvoiceIsNotARenewal(t *testing.T) {
	t.Parallel()
	s, _ := storefrontStack(t)
	sh := connectShop(t, newTenant(t, s))
	prod, ref := product("sf-prorate"), uniq("ref-")
	sh.mapping(map[string]any{"service_ref": ref, "product_id": prod, "tier": "pro", "renewal_grace_days": 0})
	sess := newSession("", uniq("prorate")+"@example.com")
	sess.ServiceRef = ref
	sub, ev := uniq("sub_"), uniq("evt_")
	sh.deliver(checkout(ev, sess, sub, "")).Expect(t, 200)
	key := sh.awaitOutcome(ev, outcome("issued"))["license_key"].(string)
	end := time.Now().UTC().Truncate(time.Second).Add(30 * 24 * time.Hour)
	first := uniq("evt_")
	sh.deliver(invoicePaid(first, sub, end, true)).Expect(t, 200)
	sh.awaitOutcome(first, outcome("expiry_set"))
	upgrade := invoiceObject(sub, end, false, uniq("pi_"))
	upgrade["billing_reason"] = "subscription_update"
	prorated := uniq("evt_")
	sh.deliver(lifecycleEvent(prorated, "invoice.paid", upgrade)).Expect(t, 200)
	if d := sh.awaitOutcome(prorated, outcome("ignored")); d["error"] !=
		"The invoice pays within a period already paid (a change of plan, say): the expiry stays at the latest paid period" {
		t.Fatalf("proration invoice: %v", d)
	}
	if l := licenseOf(t, sh.c, key); !expiresAt(end)(l) {
		t.Fatalf("the proration moved the expiry: %v", l)
	}
}

// Event types the storefront does not act on answer 200 and are recorded ignored, once.
func TestStorefrontUnknownEventsIgnored(t *testing.T) {
	t.Parallel()
	s, _ := storefrontStack(t)
	sh := connectShop(t, newTenant(t, s))
	ev := uniq("evt_")
	payload := lifecycleEvent(ev, "customer.created", map[string]any{"id": uniq("cus_"), "object": "customer"})
	sh.deliverN(payload, 3)
	d := sh.awaitOutcome(ev, outcome("ignored"))
	if d["event_type"] != "customer.created" || d["license_key"] != nil {
		t.Fatalf("ignored delivery %v", d)
	}
	if ds, total := sh.deliveries("outcome=ignored"); total != 1 || len(ds) != 1 {
		t.Fatalf("ignored deliveries %v total %d", ds, total)
	}
}

// The follow-up fields of a mapping are validated like the rest: a 400 naming the field.
func TestStorefrontMappingFollowUpFields(t *testing.T) {
	t.Parallel()
	s, _ := storefrontStack(t)
	c := newTenant(t, s)
	connectShop(t, c)
	prod := product("sf-fields")
	for _, tc := range []struct {
		body map[string]any
		want string
	}{
		{map[string]any{"renewal_grace_days": "three"}, "renewal_grace_days must be an integer from 0 to 90"},
		{map[string]any{"renewal_grace_days": 91}, "renewal_grace_days must be an integer from 0 to 90"},
		{map[string]any{"renewal_grace_days": 1.5}, "renewal_grace_days must be an integer from 0 to 90"},
		{map[string]any{"on_refund": "maybe"}, "on_refund must be revoke or keep"},
	} {
		body := map[string]any{"service_ref": uniq("ref-"), "product_id": prod, "tier": "pro"}
		for k, v := range tc.body {
			body[k] = v
		}
		got := c.Post("/v1/storefront/mappings", body).Expect(t, 400).JSON(t)
		if got["error"] != tc.want {
			t.Errorf("%v: %v, want %q", tc.body, got, tc.want)
		}
	}
	m := c.Post("/v1/storefront/mappings", map[string]any{"service_ref": uniq("ref-"), "product_id": prod, "tier": "pro",
		"renewal_grace_days": 0, "on_refund": "keep"}).Expect(t, 200).JSON(t)
	if m["renewal_grace_days"] != float64(0) || m["on_refund"] != "keep" {
		t.Fatalf("mapping %v", m)
	}
}
