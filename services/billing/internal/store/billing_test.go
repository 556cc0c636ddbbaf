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
	out, err := s.Record(context.Background(), e.raw, e.change)
	if err != nil {
		t.Error(err)
	}
	return out
}

var tenantSeq atomic.Int64

// tenant makes a tenant; emails are unique, so each gets one of its own.
func tenant(t *testing.T, s *store.Store) string {
	t.Helper()
	ten, _, err := s.CreateTenant(context.Background(), "Acme", fmt.Sprintf("billing%d@example.com", tenantSeq.Add(1)))
	if err != nil {
		t.Fatal(err)
	}
	return ten.ID
}

func state(t *testing.T, s *store.Store, tenant string) plan.State {
	t.Helper()
	st, err := s.Plan(context.Background(), tenant)
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
