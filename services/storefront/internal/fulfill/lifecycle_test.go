package fulfill

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/pkg/events/eventstest"
	"github.com/keyhouse/keyhouse/pkg/natsx"
	"github.com/keyhouse/keyhouse/services/storefront/internal/store"
	"github.com/keyhouse/keyhouse/services/storefront/internal/stripeevent"
)

// receiveLifecycle records a lifecycle event as the callback does and returns the jobs
// it queued (itself once its purchase is known, and any held event it adopted).
func (f *fixture) receiveLifecycle(eventID, typ string, refs []string, det stripeevent.Detail, session string) []Job {
	f.t.Helper()
	raw, _ := json.Marshal(det)
	link := "plink_test"
	d := &store.Delivery{TenantID: f.tenant, WebhookID: "wh_x", EventID: eventID, EventType: typ, SessionCreated: time.Now(),
		Outcome: store.OutcomeProcessing, Refs: refs, Detail: raw}
	if session != "" { // the checkout itself
		d.CheckoutSessionID, d.PaymentLink, d.PaymentStatus = session, &link, "paid"
	}
	var jobs []Job
	if _, err := f.st.RecordEvent(context.Background(), d, func(d *store.Delivery) natsx.Message {
		jobs = append(jobs, Job{DeliveryID: d.ID})
		return Message(d, nil)
	}); err != nil {
		f.t.Fatal(err)
	}
	return jobs
}

// A subscription's checkout and its invoices, received in every order and each job run
// at once with the others: one license, expiring at the latest paid period plus grace
// (the fixture's mapping, stored directly, has 0 days), whatever came first.
func TestSubscriptionEndStateIsOrderFree(t *testing.T) {
	p1 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	p2 := p1.AddDate(0, 1, 0)
	want := p2
	orders := [][]int{{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}}
	for _, order := range orders {
		t.Run(fmt.Sprint(order), func(t *testing.T) {
			f := newFixture(t)
			session, sub := "cs_"+fmt.Sprint(order), "sub_"+fmt.Sprint(order)
			events := []func() []Job{
				func() []Job {
					return f.receiveLifecycle("evt_checkout", stripeevent.CheckoutCompleted, []string{sub},
						stripeevent.Detail{Mode: stripeevent.ModeSubscription}, session)
				},
				func() []Job {
					return f.receiveLifecycle("evt_inv1", stripeevent.InvoicePaid, []string{sub, "in_1"},
						stripeevent.Detail{PeriodEnd: &p1, First: true}, "")
				},
				func() []Job {
					return f.receiveLifecycle("evt_inv2", stripeevent.InvoicePaid, []string{sub, "in_2"},
						stripeevent.Detail{PeriodEnd: &p2}, "")
				},
			}
			var jobs []Job
			for _, i := range order {
				jobs = append(jobs, events[i]()...)
				jobs = append(jobs, events[i]()...) // Stripe's duplicate
			}
			var wg sync.WaitGroup
			for _, j := range jobs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := f.w.process(context.Background(), f.tenant, j, false); err != nil {
						t.Error(err)
					}
				}()
			}
			wg.Wait()
			if f.lic.created != 1 {
				t.Fatalf("%d licenses", f.lic.created)
			}
			key := ""
			for _, k := range f.lic.keys {
				key = k
			}
			if got := f.lic.expiry[key]; !got.Equal(want) {
				t.Fatalf("expiry %v, want %v", got, want)
			}
		})
	}
}

// Each outcome of the events after the sale is a storefront.delivery event too (the same
// path as fulfillment's): held and ignored at receipt, renewed once applied.
func TestLifecycleOutcomesAreEvents(t *testing.T) {
	f := newFixture(t)
	out := eventstest.Watch(t, f.st.Pool())
	end := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	jobs := f.receiveLifecycle("evt_inv", stripeevent.InvoicePaid, []string{"sub_ev"}, stripeevent.Detail{PeriodEnd: &end}, "")
	if _, err := f.st.RecordEvent(context.Background(), &store.Delivery{TenantID: f.tenant, WebhookID: "wh_x", EventID: "evt_other",
		EventType: "customer.created", SessionCreated: time.Now(), Outcome: store.OutcomeIgnored}, nil); err != nil {
		t.Fatal(err)
	}
	jobs = append(jobs, f.receiveLifecycle("evt_co", stripeevent.CheckoutCompleted, []string{"sub_ev"},
		stripeevent.Detail{Mode: stripeevent.ModeSubscription}, "cs_ev")...)
	for _, j := range jobs {
		if err := f.w.process(context.Background(), f.tenant, j, false); err != nil {
			t.Fatal(err)
		}
	}
	var outcomes []string
	for _, ev := range out.Next(t) {
		outcomes = append(outcomes, ev.GetStorefrontDelivery().GetOutcome())
	}
	slices.Sort(outcomes)
	// The invoice is held at receipt, and again when its job runs before the checkout's;
	// the checkout's issue applies it.
	if got := fmt.Sprint(outcomes); got != "[held held ignored issued renewed]" {
		t.Fatalf("events with outcomes %s", got)
	}
}
