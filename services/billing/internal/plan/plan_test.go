package plan

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/devinfra/testkit"
	"github.com/stripe/stripe-go/v76"
)

var t0 = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

func event(t *testing.T, typ string, at time.Time, object map[string]any) Change {
	t.Helper()
	raw, err := json.Marshal(object)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Read(stripe.Event{ID: fmt.Sprintf("evt_%s_%d", typ, at.Unix()), Type: stripe.EventType(typ),
		Created: at.Unix(), Data: &stripe.EventData{Raw: raw}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func subscription(t *testing.T, typ string, at time.Time, status string, cancel bool) Change {
	return subscriptionOf(t, "sub_1", typ, at, status, cancel)
}

// subscriptionOf is a customer.subscription.<typ> event of subscription id.
func subscriptionOf(t *testing.T, id, typ string, at time.Time, status string, cancel bool) Change {
	return event(t, "customer.subscription."+typ, at, map[string]any{
		"id": id, "customer": "cus_1", "status": status, "cancel_at_period_end": cancel,
		"current_period_end": t0.Add(30 * 24 * time.Hour).Unix(), "metadata": map[string]string{"tenant_id": "t_1"},
	})
}

func failed(t *testing.T, at time.Time) Change {
	return failedOf(t, "sub_1", at, "subscription_cycle")
}

// failedOf is an invoice.payment_failed of subscription id's invoice created for reason
// (Stripe's billing_reason; "" leaves it out, as an event that does not say).
func failedOf(t *testing.T, id string, at time.Time, reason string) Change {
	in := map[string]any{"id": "in_" + id, "customer": "cus_1", "subscription": id}
	if reason != "" {
		in["billing_reason"] = reason
	}
	return event(t, "invoice.payment_failed", at, in)
}

func checkout(t *testing.T, at time.Time, payment string) Change {
	return checkoutOf(t, "sub_1", at, payment)
}

func checkoutOf(t *testing.T, id string, at time.Time, payment string) Change {
	return event(t, "checkout.session.completed", at, map[string]any{
		"id": "cs_" + id, "mode": "subscription", "status": "complete", "payment_status": payment,
		"client_reference_id": "t_1", "customer": "cus_1", "subscription": id,
	})
}

func TestReadTakesWhatBillingNeeds(t *testing.T) {
	c := checkout(t, t0, "paid")
	if c.Tenant != "t_1" || !c.Link || c.Customer != "cus_1" || c.Subscription != "sub_1" || c.Kind != Replace || c.State.Plan != Pro {
		t.Fatalf("checkout: %+v", c)
	}
	if c := checkout(t, t0, "unpaid"); c.Kind != Ignore || !c.Link {
		t.Fatalf("an unpaid checkout still ties the customer, nothing more: %+v", c)
	}
	payment := event(t, "checkout.session.completed", t0, map[string]any{"id": "cs_2", "mode": "payment", "client_reference_id": "t_1"})
	if payment.Kind != Ignore || payment.Link {
		t.Fatalf("a payment-mode checkout is a storefront purchase: %+v", payment)
	}
	s := subscription(t, "updated", t0, "active", true)
	if s.Tenant != "t_1" || s.Kind != Replace || !s.State.CancelAtPeriodEnd || s.State.CurrentPeriodEnd == nil || s.Order.Rank != 2 {
		t.Fatalf("subscription: %+v", s)
	}
	for _, status := range []string{"active", "canceled"} {
		if d := subscription(t, "deleted", t0, status, false); !d.Ended || d.NeverPaid {
			t.Fatalf("deleted is the end whatever its status says: %+v", d)
		}
	}
	if i := subscription(t, "created", t0, "incomplete", false); i.Kind != Ignore {
		t.Fatalf("incomplete: %+v", i)
	}
	// The first payment never succeeded: expired after 23 hours, or deleted while
	// incomplete. An end, and one that never gave the tenant anything.
	for _, e := range []Change{subscription(t, "updated", t0, "incomplete_expired", false),
		subscription(t, "deleted", t0, "incomplete_expired", false), subscription(t, "deleted", t0, "incomplete", false)} {
		if !e.Ended || !e.NeverPaid {
			t.Fatalf("%s with status incomplete_expired or incomplete: %+v", e.Type, e)
		}
	}
	for status, want := range map[string][2]string{"trialing": {Active, ""}, "past_due": {PastDue, ReasonPaymentFailed},
		"unpaid": {PastDue, ReasonUnpaid}, "paused": {PastDue, ReasonPaused}} {
		if st := subscription(t, "updated", t0, status, false).State; st.Status != want[0] || st.Reason != want[1] {
			t.Errorf("%s → %s (%q), want %s (%q)", status, st.Status, st.Reason, want[0], want[1])
		}
	}
	oneOff := event(t, "invoice.payment_failed", t0, map[string]any{"id": "in_2", "customer": "cus_1"})
	if oneOff.Kind != Ignore {
		t.Fatalf("a failed invoice without a subscription: %+v", oneOff)
	}
	// The first invoice's failure leaves the subscription incomplete, not past due; the
	// customer is still tied (the subscription is named).
	if first := failedOf(t, "sub_1", t0, "subscription_create"); first.Kind != Ignore || first.Subscription != "sub_1" || first.Customer != "cus_1" {
		t.Fatalf("the first invoice's failure: %+v", first)
	}
	for _, reason := range []string{"subscription_cycle", "subscription_update", ""} {
		if f := failedOf(t, "sub_1", t0, reason); f.Kind != PaymentFailed {
			t.Fatalf("a failed invoice of reason %q: %+v", reason, f)
		}
	}
	// API versions after 2025-03-31: the period end on the items, the invoice's
	// subscription under parent.subscription_details.
	moved := event(t, "customer.subscription.updated", t0, map[string]any{"id": "sub_1", "status": "active",
		"cancel_at_period_end": true, "items": map[string]any{"data": []any{map[string]any{"current_period_end": t0.Add(time.Hour).Unix()}}}})
	if moved.State.CurrentPeriodEnd == nil || !moved.State.CurrentPeriodEnd.Equal(t0.Add(time.Hour)) {
		t.Fatalf("period end on the items: %+v", moved.State)
	}
	basil := event(t, "invoice.payment_failed", t0, map[string]any{"id": "in_3", "customer": "cus_1",
		"parent": map[string]any{"subscription_details": map[string]any{"subscription": "sub_1", "metadata": map[string]string{"tenant_id": "t_1"}}}})
	if basil.Kind != PaymentFailed || basil.Subscription != "sub_1" || basil.Tenant != "t_1" {
		t.Fatalf("invoice of a newer API version: %+v", basil)
	}
	if Handled("customer.created") {
		t.Fatal("customer.created is not a billing event")
	}
	if _, err := Read(stripe.Event{ID: "evt", Type: "invoice.payment_failed", Data: &stripe.EventData{Raw: []byte(`[1]`)}}); err == nil {
		t.Fatal("an unreadable object must be an error")
	}
}

func replay(events []Change, order []int) State {
	s := Sub{ID: "sub_1"}
	for _, i := range order {
		s, _ = s.Merge(events[i])
		s, _ = s.Merge(events[i]) // a replay never changes anything
	}
	return Tenant([]Sub{s}, t0)
}

// same compares what the status record and the console show.
func same(a, b State) bool {
	ae, be := a.ShownPeriodEnd(), b.ShownPeriodEnd()
	return a.Plan == b.Plan && a.Status == b.Status && a.CancelAtPeriodEnd == b.CancelAtPeriodEnd &&
		((ae == nil) == (be == nil)) && (ae == nil || ae.Equal(*be)) && a.Reason == b.Reason
}

// noHistory is the state of a tenant without billing history, as Tenant answers it.
var noHistory = State{Status: Active}

// Every delivery order of a subscription's history ends in the state of the history.
func TestAnyDeliveryOrderEndsInTheSameState(t *testing.T) {
	histories := map[string]struct {
		events []Change
		want   State
	}{
		"paid then failed": {
			[]Change{checkout(t, t0, "paid"), subscription(t, "created", t0, "active", false), failed(t, t0.Add(time.Second)),
				subscription(t, "updated", t0.Add(time.Second), "past_due", false)},
			State{Plan: Pro, Status: PastDue, Reason: ReasonPaymentFailed},
		},
		"failed until Stripe gave up: unpaid": {
			[]Change{checkout(t, t0, "paid"), subscription(t, "created", t0, "active", false), failed(t, t0.Add(time.Second)),
				subscription(t, "updated", t0.Add(time.Second), "past_due", false), subscription(t, "updated", t0.Add(time.Hour), "unpaid", false)},
			State{Plan: Pro, Status: PastDue, Reason: ReasonUnpaid},
		},
		"a trial that ended without a payment method: paused": {
			[]Change{checkout(t, t0, "no_payment_required"), subscription(t, "created", t0, "trialing", false),
				subscription(t, "updated", t0.Add(time.Hour), "paused", false)},
			State{Plan: Pro, Status: PastDue, Reason: ReasonPaused},
		},
		"failed then paid, canceled at period end": {
			[]Change{checkout(t, t0, "paid"), failed(t, t0.Add(time.Second)), subscription(t, "updated", t0.Add(2*time.Second), "active", false),
				subscription(t, "updated", t0.Add(3*time.Second), "active", true)},
			State{Plan: Pro, Status: Active, CancelAtPeriodEnd: true, CurrentPeriodEnd: ptr(t0.Add(30 * 24 * time.Hour))},
		},
		"deleted": {
			[]Change{checkout(t, t0, "paid"), subscription(t, "created", t0, "active", false), failed(t, t0.Add(time.Second)),
				subscription(t, "deleted", t0.Add(2*time.Second), "canceled", false), subscription(t, "updated", t0.Add(5*time.Second), "active", false)},
			State{Plan: Free, Status: Canceled},
		},
		// The subscription never paid (3-D Secure abandoned, or a card declined, then
		// Stripe's expiry 23 hours later): no billing history, whatever came first.
		"never paid: incomplete, the first invoice failed, expired": {
			[]Change{checkout(t, t0, "unpaid"), subscription(t, "created", t0, "incomplete", false),
				failedOf(t, "sub_1", t0, "subscription_create"), subscription(t, "updated", t0.Add(23*time.Hour), "incomplete_expired", false),
				subscription(t, "deleted", t0.Add(23*time.Hour), "incomplete_expired", false)},
			noHistory,
		},
		"never paid: deleted while incomplete": {
			[]Change{subscription(t, "created", t0, "incomplete", false), subscription(t, "deleted", t0.Add(time.Hour), "incomplete", false)},
			noHistory,
		},
		// An event that does not say which invoice failed counts as a failure until the
		// expiry says the subscription never paid.
		"never paid: a failure of an unknown invoice, expired": {
			[]Change{subscription(t, "created", t0, "incomplete", false), failedOf(t, "sub_1", t0.Add(time.Second), ""),
				subscription(t, "updated", t0.Add(23*time.Hour), "incomplete_expired", false)},
			noHistory,
		},
		"never paid: the expiry wins over a deletion that says only canceled": {
			[]Change{subscription(t, "created", t0, "incomplete", false), subscription(t, "updated", t0.Add(23*time.Hour), "incomplete_expired", false),
				subscription(t, "deleted", t0.Add(23*time.Hour), "canceled", false)},
			noHistory,
		},
		"incomplete, then paid after all": {
			[]Change{checkout(t, t0, "unpaid"), subscription(t, "created", t0, "incomplete", false),
				failedOf(t, "sub_1", t0, "subscription_create"), subscription(t, "updated", t0.Add(time.Hour), "active", false)},
			State{Plan: Pro, Status: Active},
		},
		"same second: the checkout never hides the subscription's own event": {
			[]Change{checkout(t, t0, "paid"), subscription(t, "created", t0, "active", true)},
			State{Plan: Pro, Status: Active, CancelAtPeriodEnd: true, CurrentPeriodEnd: ptr(t0.Add(30 * 24 * time.Hour))},
		},
	}
	for name, h := range histories {
		t.Run(name, func(t *testing.T) {
			testkit.Permutations(len(h.events), func(order []int) {
				if got := replay(h.events, order); !same(got, h.want) {
					t.Fatalf("order %v: %+v, want %+v", order, got, h.want)
				}
			})
		})
	}
}

func ptr(t time.Time) *time.Time { return &t }

func TestTenantPrefersTheSubscriptionItStillHolds(t *testing.T) {
	if got := Tenant(nil, t0); got.Plan != "" || got.At(t0).Status != Active || got.LicenseLimit() != FreeLicenseLimit {
		t.Fatalf("no history: %+v", got)
	}
	old := Sub{ID: "sub_old", Ended: true}
	current := Sub{ID: "sub_new", HasSnapshot: true, Snapshot: State{Plan: Pro, Status: Active}, SnapshotOrder: Order{At: t0}}
	for _, subs := range [][]Sub{{old, current}, {current, old}} {
		if got := Tenant(subs, t0); got.Plan != Pro || got.Status != Active {
			t.Fatalf("an old subscription's end must not end the new one: %+v", got)
		}
	}
	if got := Tenant([]Sub{old}, t0); got.Plan != Free || got.Status != Canceled || got.Active() || got.LicenseLimit() != FreeLicenseLimit {
		t.Fatalf("ended: %+v", got)
	}
}

// neverPaid is the life of a subscription whose first payment never succeeded: Checkout
// completed unpaid, the subscription created incomplete, its first invoice failed, and
// Stripe expired it 23 hours later (an update, then the deletion).
func neverPaid(t *testing.T, id string, at time.Time) []Change {
	return []Change{checkoutOf(t, id, at, "unpaid"), subscriptionOf(t, id, "created", at, "incomplete", false),
		failedOf(t, id, at.Add(time.Second), "subscription_create"),
		subscriptionOf(t, id, "updated", at.Add(23*time.Hour), "incomplete_expired", false),
		subscriptionOf(t, id, "deleted", at.Add(23*time.Hour), "incomplete_expired", false)}
}

// replayTenant merges events (of several subscriptions) into their subscriptions in
// order, each twice, and answers the tenant's plan at now.
func replayTenant(events []Change, order []int, now time.Time) State {
	subs := map[string]Sub{}
	for _, i := range order {
		c := events[i]
		s, ok := subs[c.Subscription]
		if !ok {
			s = Sub{ID: c.Subscription}
		}
		s, _ = s.Merge(c)
		s, _ = s.Merge(c)
		subs[c.Subscription] = s
	}
	var all []Sub
	for _, s := range subs {
		all = append(all, s)
	}
	return Tenant(all, now)
}

// A subscription that never collected money is not a paid subscription that ended: the
// tenant is what its other subscriptions make it, or has no billing history (Free,
// active: 5 licenses, issuance allowed), in every delivery order, replayed.
func TestASubscriptionThatNeverPaidLeavesTheTenantAsItWas(t *testing.T) {
	later := t0.Add(40 * 24 * time.Hour)
	now := later.Add(24 * time.Hour)
	paid := []Change{checkoutOf(t, "sub_a", t0, "paid"), subscriptionOf(t, "sub_a", "created", t0, "active", false)}
	canceled := append(append([]Change(nil), paid...), subscriptionOf(t, "sub_a", "deleted", t0.Add(10*24*time.Hour), "canceled", false))
	pastDue := append(append([]Change(nil), paid...), failedOf(t, "sub_a", t0.Add(time.Hour), "subscription_cycle"))
	cases := map[string]struct {
		events []Change
		want   State
	}{
		"its only subscription": {neverPaid(t, "sub_b", later), noHistory},
		"paid once and canceled, then an attempt expired: still canceled": {
			append(canceled, neverPaid(t, "sub_b", later)...), State{Plan: Free, Status: Canceled}},
		"holds an active subscription": {append(paid, neverPaid(t, "sub_b", later)...), State{Plan: Pro, Status: Active}},
		"holds a past-due subscription": {
			append(pastDue, neverPaid(t, "sub_b", later)...), State{Plan: Pro, Status: PastDue, Reason: ReasonPaymentFailed}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			testkit.Permutations(len(c.events), func(order []int) {
				got := replayTenant(c.events, order, now)
				if !same(got, c.want) {
					t.Fatalf("order %v: %+v, want %+v", order, got, c.want)
				}
				if want := c.want.Status == Active; got.Active() != want {
					t.Fatalf("order %v: issuance allowed %t, want %t", order, got.Active(), want)
				}
			})
		})
	}
	// Alone: issuance within Free's quota, as before the attempt.
	if got := replayTenant(neverPaid(t, "sub_b", later), []int{0, 1, 2, 3, 4}, now); got.Plan != "" || !got.Active() || got.LicenseLimit() != FreeLicenseLimit || got.Paid() {
		t.Fatalf("a tenant whose only subscription never paid: %+v", got)
	}
}

// billing.plan_changed: the expiry of a subscription that never paid moves nothing for a
// tenant it never gave a plan, and moves a tenant back once an unknown invoice's failure
// had made it past due.
func TestMovedByASubscriptionThatNeverPaid(t *testing.T) {
	expiry := subscriptionOf(t, "sub_b", "updated", t0.Add(23*time.Hour), "incomplete_expired", false)
	quiet, _ := Sub{ID: "sub_b"}.Merge(subscriptionOf(t, "sub_b", "created", t0, "incomplete", false))
	expired, _ := quiet.Merge(expiry)
	if Moved(nil, []Sub{expired}, t0) || Moved([]Sub{quiet}, []Sub{expired}, t0) {
		t.Fatal("an attempt that never paid, expiring, moved the plan")
	}
	failedUnknown, _ := Sub{ID: "sub_b"}.Merge(failedOf(t, "sub_b", t0, ""))
	after, _ := failedUnknown.Merge(expiry)
	if !Moved([]Sub{failedUnknown}, []Sub{after}, t0) || Tenant([]Sub{after}, t0) != noHistory {
		t.Fatalf("past due by an unknown invoice, then expired: %+v", Tenant([]Sub{after}, t0))
	}
}

func TestCanceledAtPeriodEndIsProUntilThenFree(t *testing.T) {
	end := t0.Add(time.Hour)
	s := State{Plan: Pro, Status: Active, CancelAtPeriodEnd: true, CurrentPeriodEnd: &end}
	if got := s.At(end.Add(-time.Second)); got.Plan != Pro || got.ShownPeriodEnd() == nil || got.LicenseLimit() != ProLicenseLimit {
		t.Fatalf("before the end: %+v", got)
	}
	if got := s.At(end); got.Plan != Free || got.Status != Canceled || got.ShownPeriodEnd() != nil || got.LicenseLimit() != FreeLicenseLimit {
		t.Fatalf("at the end: %+v", got)
	}
	renewing := State{Plan: Pro, Status: Active, CurrentPeriodEnd: &end}
	if got := renewing.At(end.Add(time.Hour)); got.Plan != Pro || got.ShownPeriodEnd() != nil {
		t.Fatalf("a renewing subscription past its period end stays Pro until Stripe says otherwise: %+v", got)
	}
	if (State{Plan: Pro, Status: PastDue}).Active() || s.At(end).Active() {
		t.Fatal("past_due and canceled must block issuance (addendum §7)")
	}
}

// A subscription whose period ran out after a cancellation is ranked as what it is at
// the time asked, ended, not as the Pro it was: the tenant's new past-due subscription is
// what it holds (and checkout answers its Billing Portal).
func TestAnOldSubscriptionPastItsEndNeverHidesTheNewOne(t *testing.T) {
	end := t0.Add(-time.Minute)
	old := Sub{ID: "sub_a", HasSnapshot: true, SnapshotOrder: Order{At: t0.Add(-31 * 24 * time.Hour)},
		Snapshot: State{Plan: Pro, Status: Active, CancelAtPeriodEnd: true, CurrentPeriodEnd: &end}}
	renewing := t0.Add(30 * 24 * time.Hour)
	current := Sub{ID: "sub_b", HasSnapshot: true, SnapshotOrder: Order{At: t0}, Snapshot: State{Plan: Pro, Status: Active, CurrentPeriodEnd: &renewing},
		HasFailed: true, FailedOrder: Order{At: t0.Add(time.Second), Rank: 3}}
	for _, subs := range [][]Sub{{old, current}, {current, old}} {
		if got := Tenant(subs, t0); got.Plan != Pro || got.Status != PastDue || !got.Paid() {
			t.Fatalf("the new past-due subscription: %+v", got)
		}
		// Before the old one's end, it is the active one and outranks the past-due one.
		if got := Tenant(subs, end.Add(-time.Second)); got.Status != Active || !got.CancelAtPeriodEnd {
			t.Fatalf("before the old one's end: %+v", got)
		}
	}
	if got := Tenant([]Sub{old}, t0); got.Plan != Free || got.Status != Canceled {
		t.Fatalf("alone, past its end: %+v", got)
	}
}

// Stripe's cancel_at (a set cancellation date; cancel_at_period_end false) is a
// cancellation: Pro, canceled but not yet ended, until that date, shown as the end; then
// Free (canceled), deletion or not.
func TestCancelAtIsACancellationAtThatDate(t *testing.T) {
	cancelAt := t0.Add(10 * 24 * time.Hour)
	c := event(t, "customer.subscription.updated", t0, map[string]any{
		"id": "sub_1", "customer": "cus_1", "status": "active", "cancel_at_period_end": false,
		"cancel_at": cancelAt.Unix(), "canceled_at": t0.Unix(),
		"current_period_end": t0.Add(30 * 24 * time.Hour).Unix(), "metadata": map[string]string{"tenant_id": "t_1"}})
	s, _ := Sub{ID: "sub_1"}.Merge(c)
	got := Tenant([]Sub{s}, t0)
	if got.Plan != Pro || got.Status != Active || !got.CancelAtPeriodEnd || got.ShownPeriodEnd() == nil || !got.ShownPeriodEnd().Equal(cancelAt) {
		t.Fatalf("before cancel_at: %+v", got)
	}
	if got := Tenant([]Sub{s}, cancelAt); got.Plan != Free || got.Status != Canceled {
		t.Fatalf("at cancel_at: %+v", got)
	}
	// Cleared (the customer renewed): the period end again, renewing.
	cleared := subscription(t, "updated", t0.Add(time.Second), "active", false)
	s, _ = s.Merge(cleared)
	if got := Tenant([]Sub{s}, cancelAt); got.Plan != Pro || got.CancelAtPeriodEnd || got.ShownPeriodEnd() != nil {
		t.Fatalf("cancel_at cleared: %+v", got)
	}
}

// billing.plan_changed: a move in force, or the deletion that confirms an end the clock
// already applied (no event came at the period's end).
func TestMovedCountsTheDeletionOfAnEndedPeriod(t *testing.T) {
	end := t0.Add(-time.Minute)
	canceled := Sub{ID: "sub_1", HasSnapshot: true, SnapshotOrder: Order{At: t0.Add(-time.Hour)},
		Snapshot: State{Plan: Pro, Status: Active, CancelAtPeriodEnd: true, CurrentPeriodEnd: &end}}
	deleted := canceled
	deleted.Ended = true
	if !Moved([]Sub{canceled}, []Sub{deleted}, t0) {
		t.Fatal("the deletion after the period's end must be told")
	}
	if Moved([]Sub{deleted}, []Sub{deleted}, t0) {
		t.Fatal("nothing moved")
	}
	failed := canceled
	failed.Snapshot.CancelAtPeriodEnd, failed.Snapshot.CurrentPeriodEnd = false, nil
	past := failed
	past.HasFailed, past.FailedOrder = true, Order{At: t0, Rank: 3}
	if !Moved([]Sub{failed}, []Sub{past}, t0) {
		t.Fatal("active → past_due")
	}
}
