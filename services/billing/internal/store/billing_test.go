package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/devinfra/testkit"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
	"github.com/keyhouse/keyhouse/services/billing/internal/plan"
	"github.com/keyhouse/keyhouse/services/billing/internal/store"
	"github.com/keyhouse/keyhouse/services/billing/migrations"
	"github.com/stripe/stripe-go/v76"
)

func TestMain(m *testing.M) { testkit.Main(m) }

var schema = testkit.Template{Name: "billing", Migrate: pgxx.Migrations{Schema: "billing", FS: migrations.FS}.Apply}

func newStore(t *testing.T) *store.Store {
	t.Helper()
	db, err := pgxx.Open(context.Background(), testkit.DatabaseURL(t, schema), "billing")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	return store.New(db, nil)
}

var seq atomic.Int64

// stripeEvent is a verified event as the server hands it to Record: its JSON and Change.
type stripeEvent struct {
	raw    []byte
	change plan.Change
}

func newEvent(t *testing.T, typ string, at time.Time, object map[string]any) stripeEvent {
	t.Helper()
	raw, err := json.Marshal(map[string]any{"id": fmt.Sprintf("evt_%d", seq.Add(1)), "object": "event",
		"type": typ, "created": at.Unix(), "data": map[string]any{"object": object}})
	if err != nil {
		t.Fatal(err)
	}
	var e stripe.Event
	if err := json.Unmarshal(raw, &e); err != nil {
		t.Fatal(err)
	}
	c, err := plan.Read(e)
	if err != nil {
		t.Fatal(err)
	}
	return stripeEvent{raw: raw, change: c}
}

func record(t *testing.T, s *store.Store, e stripeEvent) store.Outcome {
	t.Helper()
	out, err := s.Record(context.Background(), e.raw, e.change, time.Now())
	if err != nil {
		t.Error(err)
	}
	return out
}

var tenantSeq atomic.Int64

// tenant makes a tenant; emails are unique, so each gets one of its own.
func tenant(t *testing.T, s *store.Store) string {
	t.Helper()
	ten, _, err := createTenant(s, "Acme", fmt.Sprintf("billing%d@example.com", tenantSeq.Add(1)))
	if err != nil {
		t.Fatal(err)
	}
	return ten.ID
}

func state(t *testing.T, s *store.Store, tenant string) plan.State {
	t.Helper()
	st, err := s.Plan(context.Background(), tenant, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// Stripe delivers an event again while the first delivery is still running: it is
// applied once.
func TestConcurrentDuplicateDeliveriesApplyOnce(t *testing.T) {
	s := newStore(t)
	ten := tenant(t, s)
	e := newEvent(t, "checkout.session.completed", time.Now(), map[string]any{"mode": "subscription", "status": "complete",
		"payment_status": "paid", "client_reference_id": ten, "customer": "cus_dup", "subscription": "sub_dup"})
	outs := make([]store.Outcome, 10)
	var wg sync.WaitGroup
	for i := range outs {
		wg.Add(1)
		go func() { defer wg.Done(); outs[i] = record(t, s, e) }()
	}
	wg.Wait()
	applied := 0
	for _, o := range outs {
		switch o {
		case store.Applied:
			applied++
		case store.Duplicate:
		default:
			t.Fatalf("outcome %q", o)
		}
	}
	if applied != 1 {
		t.Fatalf("%d deliveries applied, want 1 (%v)", applied, outs)
	}
	if st := state(t, s, ten); st.Plan != plan.Pro || st.Status != plan.Active {
		t.Fatalf("state %+v", st)
	}
}

// An event that names only its customer, racing the checkout that ties the customer to
// the tenant: whichever commits first, the event is applied (the customer lock).
func TestParkedEventAndItsCheckoutRacing(t *testing.T) {
	s := newStore(t)
	t0 := time.Now().Add(-time.Hour)
	for round := range 20 {
		ten := tenant(t, s)
		cus, sub := fmt.Sprintf("cus_race_%d", round), fmt.Sprintf("sub_race_%d", round)
		failed := newEvent(t, "invoice.payment_failed", t0.Add(time.Minute), map[string]any{"customer": cus, "subscription": sub})
		checkout := newEvent(t, "checkout.session.completed", t0, map[string]any{"mode": "subscription", "status": "complete",
			"payment_status": "paid", "client_reference_id": ten, "customer": cus, "subscription": sub})
		var wg sync.WaitGroup
		for _, e := range []stripeEvent{failed, checkout} {
			wg.Add(1)
			go func() { defer wg.Done(); record(t, s, e) }()
		}
		wg.Wait()
		if st := state(t, s, ten); st.Plan != plan.Pro || st.Status != plan.PastDue {
			t.Fatalf("round %d: %+v, want pro past_due", round, st)
		}
	}
}

// A subscription's whole history delivered at once, concurrently: the state of the
// newest event, as in any sequential order.
func TestConcurrentEventsOfOneSubscription(t *testing.T) {
	s := newStore(t)
	t0 := time.Now().Add(-time.Hour).Truncate(time.Second)
	period := t0.Add(30 * 24 * time.Hour)
	for round := range 10 {
		ten := tenant(t, s)
		cus, sub := fmt.Sprintf("cus_all_%d", round), fmt.Sprintf("sub_all_%d", round)
		obj := func(status string, cancel bool) map[string]any {
			return map[string]any{"id": sub, "customer": cus, "status": status, "cancel_at_period_end": cancel,
				"current_period_end": period.Unix(), "metadata": map[string]string{"tenant_id": ten}}
		}
		events := []stripeEvent{
			newEvent(t, "checkout.session.completed", t0, map[string]any{"mode": "subscription", "status": "complete",
				"payment_status": "paid", "client_reference_id": ten, "customer": cus, "subscription": sub}),
			newEvent(t, "customer.subscription.created", t0, obj("active", false)),
			newEvent(t, "invoice.payment_failed", t0.Add(time.Second), map[string]any{"customer": cus, "subscription": sub}),
			newEvent(t, "customer.subscription.updated", t0.Add(time.Second), obj("past_due", false)),
			newEvent(t, "customer.subscription.updated", t0.Add(2*time.Second), obj("active", false)),
			newEvent(t, "customer.subscription.updated", t0.Add(3*time.Second), obj("active", true)),
		}
		var wg sync.WaitGroup
		for _, e := range append(events, events...) {
			wg.Add(1)
			go func() { defer wg.Done(); record(t, s, e) }()
		}
		wg.Wait()
		st := state(t, s, ten)
		if st.Plan != plan.Pro || st.Status != plan.Active || !st.CancelAtPeriodEnd || st.CurrentPeriodEnd == nil || !st.CurrentPeriodEnd.Equal(period) {
			t.Fatalf("round %d: %+v", round, st)
		}
	}
}

// Events for a tenant this installation does not have are recorded and change nothing.
func TestEventsForUnknownTenantsAreIgnored(t *testing.T) {
	s := newStore(t)
	e := newEvent(t, "checkout.session.completed", time.Now(), map[string]any{"mode": "subscription", "status": "complete",
		"payment_status": "paid", "client_reference_id": "t_elsewhere", "customer": "cus_x", "subscription": "sub_x"})
	if out := record(t, s, e); out != store.NoTenant {
		t.Fatalf("outcome %q", out)
	}
	if out := record(t, s, e); out != store.Duplicate {
		t.Fatalf("replay outcome %q", out)
	}
	// A subscription event naming another installation's tenant in metadata: the same.
	sub := newEvent(t, "customer.subscription.updated", time.Now(), map[string]any{"id": "sub_y", "customer": "cus_y",
		"status": "active", "metadata": map[string]string{"tenant_id": "t_elsewhere"}})
	if out := record(t, s, sub); out != store.Parked {
		t.Fatalf("an event naming only an unknown customer waits for its checkout: %q", out)
	}
}

// The customer is the tenant's from the first event that ties a subscription of the
// tenant to it, whatever the order: Stripe often sends customer.subscription.created
// before checkout.session.completed, and checkout must find the customer then (to answer
// the Billing Portal, never a second subscription). Events that named only the customer
// and were parked apply at that moment.
func TestAnySubscriptionEventTiesItsCustomer(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	t0 := time.Now().Add(-time.Hour).Truncate(time.Second)
	ten := tenant(t, s)
	failed := newEvent(t, "invoice.payment_failed", t0.Add(time.Second), map[string]any{"customer": "cus_first", "subscription": "sub_first"})
	if out := record(t, s, failed); out != store.Parked {
		t.Fatalf("an invoice naming only an unknown customer: %q", out)
	}
	created := newEvent(t, "customer.subscription.created", t0, map[string]any{"id": "sub_first", "customer": "cus_first",
		"status": "active", "current_period_end": t0.Add(30 * 24 * time.Hour).Unix(), "metadata": map[string]string{"tenant_id": ten}})
	if out := record(t, s, created); out != store.Applied {
		t.Fatalf("created: %q", out)
	}
	if cus, err := s.Customer(ctx, ten); err != nil || cus != "cus_first" {
		t.Fatalf("customer after subscription.created: %q, %v", cus, err)
	}
	if st := state(t, s, ten); st.Plan != plan.Pro || st.Status != plan.PastDue {
		t.Fatalf("the parked failure applies once the customer is tied: %+v", st)
	}
	// The checkout arriving last changes nothing about the customer.
	checkout := newEvent(t, "checkout.session.completed", t0, map[string]any{"mode": "subscription", "status": "complete",
		"payment_status": "paid", "client_reference_id": ten, "customer": "cus_first", "subscription": "sub_first"})
	record(t, s, checkout)
	if cus, _ := s.Customer(ctx, ten); cus != "cus_first" {
		t.Fatalf("customer after checkout: %q", cus)
	}
	// A subscription of another tenant never ties its customer here: the event naming
	// this tenant in metadata is about a subscription another tenant holds.
	other := tenant(t, s)
	record(t, s, newEvent(t, "checkout.session.completed", t0, map[string]any{"mode": "subscription", "status": "complete",
		"payment_status": "paid", "client_reference_id": other, "customer": "cus_other", "subscription": "sub_other"}))
	third := tenant(t, s)
	record(t, s, newEvent(t, "customer.subscription.updated", t0.Add(time.Second), map[string]any{"id": "sub_other", "customer": "cus_stray",
		"status": "active", "metadata": map[string]string{"tenant_id": third}}))
	if cus, _ := s.Customer(ctx, third); cus != "" {
		t.Fatalf("another tenant's subscription tied %q to a third tenant", cus)
	}
}

// A tenant's deletion is told which subscriptions were canceled in Stripe first; one it
// was not told of (a checkout that completed meanwhile) refuses it, and nothing goes.
func TestDeleteTenantRefusesASubscriptionNotCanceled(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	ten := tenant(t, s)
	t0 := time.Now().Add(-time.Minute).Truncate(time.Second)
	for _, sub := range []string{"sub_del_1", "sub_del_2"} {
		record(t, s, newEvent(t, "checkout.session.completed", t0, map[string]any{"mode": "subscription", "status": "complete",
			"payment_status": "paid", "client_reference_id": ten, "customer": "cus_del", "subscription": sub}))
	}
	record(t, s, newEvent(t, "customer.subscription.deleted", t0.Add(time.Second), map[string]any{"id": "sub_ended",
		"customer": "cus_del", "status": "canceled", "metadata": map[string]string{"tenant_id": ten}}))
	live, err := s.LiveSubscriptions(ctx, ten)
	if err != nil || len(live) != 2 || live[0] != "sub_del_1" || live[1] != "sub_del_2" {
		t.Fatalf("live subscriptions %v, %v (an ended one is not live)", live, err)
	}
	if err := s.DeleteTenant(ctx, ten, live[:1]); err != store.ErrSubscribedMeanwhile {
		t.Fatalf("a subscription not canceled: %v", err)
	}
	if _, err := s.OperatorTenantByID(ctx, ten); err != nil {
		t.Fatalf("the refused deletion deleted the tenant: %v", err)
	}
	if err := s.DeleteTenant(ctx, ten, live); err != nil {
		t.Fatal(err)
	}
	if _, err := s.OperatorTenantByID(ctx, ten); err != store.ErrTenantNotFound {
		t.Fatalf("after the deletion: %v", err)
	}
}

// What the merge keeps besides the status record goes through the database: why a
// subscription is past_due, and that a subscription ended without ever being paid, which
// leaves the tenant as it was without it.
func TestNeverPaidAndThePastDueReasonAreStored(t *testing.T) {
	s := newStore(t)
	t0 := time.Now().Add(-48 * time.Hour).Truncate(time.Second)
	subEvent := func(ten, typ, sub, status string, at time.Time) stripeEvent {
		return newEvent(t, "customer.subscription."+typ, at, map[string]any{"id": sub, "customer": "cus_" + ten, "status": status,
			"current_period_end": t0.Add(30 * 24 * time.Hour).Unix(), "metadata": map[string]string{"tenant_id": ten}})
	}
	// attempt is a checkout never paid (incomplete, its first invoice failed, expired),
	// which changes nothing of the tenant's plan at any step.
	attempt := func(ten, sub string) {
		before := state(t, s, ten)
		for _, e := range []stripeEvent{
			newEvent(t, "checkout.session.completed", t0, map[string]any{"mode": "subscription", "status": "complete",
				"payment_status": "unpaid", "client_reference_id": ten, "customer": "cus_" + ten, "subscription": sub}),
			subEvent(ten, "created", sub, "incomplete", t0),
			newEvent(t, "invoice.payment_failed", t0.Add(time.Second), map[string]any{"customer": "cus_" + ten,
				"subscription": sub, "billing_reason": "subscription_create"}),
			subEvent(ten, "updated", sub, "incomplete_expired", t0.Add(23*time.Hour)),
			subEvent(ten, "deleted", sub, "incomplete_expired", t0.Add(23*time.Hour)),
		} {
			record(t, s, e)
			if st := state(t, s, ten); st.Plan != before.Plan || st.Status != before.Status || st.Reason != before.Reason {
				t.Fatalf("%s of a subscription never paid moved the plan: %+v, was %+v", e.change.Type, st, before)
			}
		}
	}

	alone := tenant(t, s)
	attempt(alone, "sub_np_alone")
	if st := state(t, s, alone); st.Plan != "" || !st.Active() || st.LicenseLimit() != plan.FreeLicenseLimit {
		t.Fatalf("a tenant whose only subscription never paid: %+v, want no billing history", st)
	}

	paused := tenant(t, s)
	record(t, s, newEvent(t, "checkout.session.completed", t0, map[string]any{"mode": "subscription", "status": "complete",
		"payment_status": "no_payment_required", "client_reference_id": paused, "customer": "cus_" + paused, "subscription": "sub_trial"}))
	record(t, s, subEvent(paused, "updated", "sub_trial", "paused", t0.Add(time.Hour)))
	attempt(paused, "sub_np_paused")
	if st := state(t, s, paused); st.Plan != plan.Pro || st.Status != plan.PastDue || st.Reason != plan.ReasonPaused {
		t.Fatalf("a paused subscription and an attempt that never paid: %+v", st)
	}
}
