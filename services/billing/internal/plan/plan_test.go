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
	return event(t, "customer.subscription."+typ, at, map[string]any{
		"id": "sub_1", "customer": "cus_1", "status": status, "cancel_at_period_end": cancel,
		"current_period_end": t0.Add(30 * 24 * time.Hour).Unix(), "metadata": map[string]string{"tenant_id": "t_1"},
	})
}

func failed(t *testing.T, at time.Time) Change {
	return event(t, "invoice.payment_failed", at, map[string]any{"id": "in_1", "customer": "cus_1", "subscription": "sub_1"})
}

func checkout(t *testing.T, at time.Time, payment string) Change {
	return event(t, "checkout.session.completed", at, map[string]any{
		"id": "cs_1", "mode": "subscription", "status": "complete", "payment_status": payment,
		"client_reference_id": "t_1", "customer": "cus_1", "subscription": "sub_1",
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
	if d := subscription(t, "deleted", t0, "active", false); !d.Ended {
		t.Fatalf("deleted is the end whatever its status says: %+v", d)
	}
	if i := subscription(t, "created", t0, "incomplete", false); i.Kind != Ignore {
		t.Fatalf("incomplete: %+v", i)
	}
	for status, want := range map[string]string{"trialing": Active, "past_due": PastDue, "unpaid": PastDue, "paused": PastDue} {
		if got := subscription(t, "updated", t0, status, false).State.Status; got != want {
			t.Errorf("%s → %s, want %s", status, got, want)
		}
	}
	oneOff := event(t, "invoice.payment_failed", t0, map[string]any{"id": "in_2", "customer": "cus_1"})
	if oneOff.Kind != Ignore {
		t.Fatalf("a failed invoice without a subscription: %+v", oneOff)
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

// same compares what the status record shows.
func same(a, b State) bool {
	ae, be := a.ShownPeriodEnd(), b.ShownPeriodEnd()
	return a.Plan == b.Plan && a.Status == b.Status && a.CancelAtPeriodEnd == b.CancelAtPeriodEnd &&
		((ae == nil) == (be == nil)) && (ae == nil || ae.Equal(*be))
}

// Every delivery order of a subscription's history ends in the state of the history.
func TestAnyDeliveryOrderEndsInTheSameState(t *testing.T) {
	histories := map[string]struct {
		events []Change
		want   State
	}{
		"paid then failed": {
			[]Change{checkout(t, t0, "paid"), subscription(t, "created", t0, "active", false), failed(t, t0.Add(time.Second)),
				subscription(t, "updated", t0.Add(time.Second), "past_due", false)},
			State{Plan: Pro, Status: PastDue},
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
