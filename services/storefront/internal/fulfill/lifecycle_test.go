package fulfill

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/devinfra/testkit"
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

// moneyEvent is a lifecycle event as the worker reads it.
type moneyEvent struct {
	typ string
	det stripeevent.Detail
}

var (
	fullRefund    = moneyEvent{stripeevent.ChargeRefunded, stripeevent.Detail{Amount: 1900, AmountRefunded: 1900}}
	partialRefund = moneyEvent{stripeevent.ChargeRefunded, stripeevent.Detail{Amount: 1900, AmountRefunded: 500}}
)

func disputeOpened(id string) moneyEvent {
	return moneyEvent{stripeevent.DisputeCreated, stripeevent.Detail{DisputeID: id, DisputeStatus: "needs_response"}}
}

func disputeClosed(id, status string) moneyEvent {
	return moneyEvent{stripeevent.DisputeClosed, stripeevent.Detail{DisputeID: id, DisputeStatus: status}}
}

func invoice(end time.Time) moneyEvent {
	return moneyEvent{stripeevent.InvoicePaid, stripeevent.Detail{PeriodEnd: &end}}
}

// revokeCases are sets of events after a sale and whether the license should end revoked.
var revokeCases = []struct {
	name    string
	events  []moneyEvent
	revoked bool
}{
	{"a dispute won, the purchase refunded in full", []moneyEvent{disputeOpened("dp_1"), fullRefund, disputeClosed("dp_1", "won")}, true},
	{"one dispute won, the other lost", []moneyEvent{disputeOpened("dp_1"), disputeOpened("dp_2"), disputeClosed("dp_1", "won"), disputeClosed("dp_2", "lost")}, true},
	{"one dispute won, the other open", []moneyEvent{disputeOpened("dp_1"), disputeOpened("dp_2"), disputeClosed("dp_1", "won")}, true},
	{"both disputes won", []moneyEvent{disputeOpened("dp_1"), disputeOpened("dp_2"), disputeClosed("dp_1", "won"), disputeClosed("dp_2", "won")}, false},
	{"a dispute won, a partial refund", []moneyEvent{disputeOpened("dp_1"), partialRefund, disputeClosed("dp_1", "won")}, false},
	{"a dispute lost whose opening never came", []moneyEvent{disputeClosed("dp_1", "lost")}, true},
	{"renewals around a won dispute", []moneyEvent{invoice(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)), disputeOpened("dp_1"),
		invoice(time.Date(2030, 2, 1, 0, 0, 0, 0, time.UTC)), disputeClosed("dp_1", "won")}, false},
}

// What the money says about a purchase does not depend on the order its events come in
// or on how often each comes: every order of each set, with every event in it twice,
// records the same facts, and the same answer to whether the license should be revoked.
func TestRevokeReasonsAreOrderFree(t *testing.T) {
	for _, tc := range revokeCases {
		t.Run(tc.name, func(t *testing.T) {
			events := append(slices.Clone(tc.events), tc.events...) // each one twice: Stripe's duplicates
			var first *store.Terms
			testkit.Permutations(len(events), func(order []int) {
				terms := &store.Terms{}
				for i, e := range order {
					record(terms, int32(i), events[e].typ, events[e].det)
				}
				terms.PaidUntilBy = nil // names the outcome only
				if wantRevoked(terms) != tc.revoked {
					t.Fatalf("order %v: revoked %v, want %v (%+v)", order, !tc.revoked, tc.revoked, terms)
				}
				if first == nil {
					first = terms
				} else if !reflect.DeepEqual(first, terms) {
					t.Fatalf("order %v recorded %+v, another %+v", order, terms, first)
				}
			})
		})
	}
}

// The same through the worker, against licensing as it answers: after a paid checkout,
// every order of each set's events, each one received twice and its job run twice, ends
// with the license revoked or active as the set says.
func TestRefundsAndDisputesEndTheSameInAnyOrder(t *testing.T) {
	for _, tc := range revokeCases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			testkit.Permutations(len(tc.events), func(order []int) {
				purchase := fmt.Sprint(order) // each order a purchase of its own
				key := f.buy("cs_"+purchase, "pi_"+purchase)
				for _, i := range order {
					e := tc.events[i]
					if e.det.DisputeID != "" {
						e.det.DisputeID += purchase
					}
					f.apply(fmt.Sprintf("evt_%s_%d", purchase, i), e, "pi_"+purchase)
				}
				if got := f.revokedNow(key); got != tc.revoked {
					t.Fatalf("order %v: license revoked %v, want %v", order, got, tc.revoked)
				}
			})
		})
	}
}

func (f *fixture) revokedNow(key string) bool {
	f.lic.mu.Lock()
	defer f.lic.mu.Unlock()
	return f.lic.revoked[key]
}

// buy fulfills a paid one-time checkout whose payment intent is pi and returns its key.
func (f *fixture) buy(session, pi string) string {
	f.t.Helper()
	for _, j := range f.receiveLifecycle("evt_"+session, stripeevent.CheckoutCompleted, []string{pi}, stripeevent.Detail{Mode: "payment"}, session) {
		if err := f.w.process(context.Background(), f.tenant, j, false); err != nil {
			f.t.Fatal(err)
		}
	}
	key := f.lic.keys[f.tenant+"/"+IdempotencyKey(session)]
	if key == "" {
		f.t.Fatalf("no license issued for %s", session)
	}
	return key
}

// apply receives e (naming the purchase by pi) twice, runs each job twice, and returns
// its delivery.
func (f *fixture) apply(eventID string, e moneyEvent, pi string) *store.Delivery {
	f.t.Helper()
	var id int32
	for range 2 {
		for _, j := range f.receiveLifecycle(eventID, e.typ, []string{pi}, e.det, "") {
			for range 2 {
				if err := f.w.process(context.Background(), f.tenant, j, false); err != nil {
					f.t.Fatal(err)
				}
			}
			id = j.DeliveryID
		}
	}
	if id == 0 {
		f.t.Fatalf("%s was never queued", eventID)
	}
	return f.delivery(id)
}

// Each event's outcome says what it did, in the orders the walkthrough sent them.
func TestWonDisputeOutcomes(t *testing.T) {
	f := newFixture(t)
	t.Run("refunded in full between the dispute and its win", func(t *testing.T) {
		key := f.buy("cs_refund", "pi_refund")
		for _, step := range []struct {
			e       moneyEvent
			outcome string
			msg     string
		}{
			{disputeOpened("dp_r"), store.OutcomeRevokedDispute, "<nil>"},
			{fullRefund, store.OutcomeRevokedRefund, "<nil>"},
			{disputeClosed("dp_r", "won"), store.OutcomeIgnored, "The dispute was won, but the purchase was refunded in full: the license stays revoked"},
		} {
			d := f.apply("evt_r_"+step.e.typ, step.e, "pi_refund")
			if d.Outcome != step.outcome || val(d.Error) != step.msg {
				t.Fatalf("%s: %s %q, want %s %q", step.e.typ, d.Outcome, val(d.Error), step.outcome, step.msg)
			}
		}
		if !f.revokedNow(key) {
			t.Fatal("a purchase refunded in full ended with an active license")
		}
	})
	t.Run("two disputes, one won and one lost", func(t *testing.T) {
		key := f.buy("cs_two", "pi_two")
		for _, step := range []struct {
			id      string
			e       moneyEvent
			outcome string
			msg     string
		}{
			{"1", disputeOpened("dp_1"), store.OutcomeRevokedDispute, "<nil>"},
			{"2", disputeOpened("dp_2"), store.OutcomeRevokedDispute, "<nil>"},
			{"3", disputeClosed("dp_1", "won"), store.OutcomeIgnored, "The dispute was won, but dispute dp_2 is open or lost: the license stays revoked"},
			{"4", disputeClosed("dp_2", "lost"), store.OutcomeIgnored, "The dispute closed as lost: the license stays revoked"},
		} {
			d := f.apply("evt_two_"+step.id, step.e, "pi_two")
			if d.Outcome != step.outcome || val(d.Error) != step.msg {
				t.Fatalf("step %s: %s %q, want %s %q", step.id, d.Outcome, val(d.Error), step.outcome, step.msg)
			}
			if !f.revokedNow(key) {
				t.Fatalf("step %s: the license is active with a dispute open or lost", step.id)
			}
		}
	})
}

// A license the vendor revoked itself (revoke-license: a leaked key) stays revoked: a
// dispute changes nothing and says so, and its win does not reactivate it. Once the vendor
// reactivates it, the storefront's own revoke and reactivation work again.
func TestWonDisputeLeavesTheVendorsRevoke(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	key := f.buy("cs_leak", "pi_leak")
	if err := f.lic.SetRevoked(ctx, f.tenant, key, true); err != nil { // the vendor's revoke-license
		t.Fatal(err)
	}
	if d := f.apply("evt_leak_1", disputeOpened("dp_1"), "pi_leak"); d.Outcome != store.OutcomeIgnored || val(d.Error) != msgRevokedElsewhere {
		t.Fatalf("a dispute on a license the vendor revoked: %s %q", d.Outcome, val(d.Error))
	}
	d := f.apply("evt_leak_2", disputeClosed("dp_1", "won"), "pi_leak")
	if d.Outcome != store.OutcomeIgnored || val(d.Error) != "The dispute was won, but the license was revoked outside the storefront: it stays revoked" {
		t.Fatalf("won: %s %q", d.Outcome, val(d.Error))
	}
	if !f.revokedNow(key) {
		t.Fatal("the won dispute reactivated the license the vendor revoked")
	}

	if err := f.lic.SetRevoked(ctx, f.tenant, key, false); err != nil { // the vendor reactivates
		t.Fatal(err)
	}
	if d := f.apply("evt_leak_3", disputeOpened("dp_2"), "pi_leak"); d.Outcome != store.OutcomeRevokedDispute || !f.revokedNow(key) {
		t.Fatalf("a later dispute: %s, revoked %v", d.Outcome, f.revokedNow(key))
	}
	if d := f.apply("evt_leak_4", disputeClosed("dp_2", "won"), "pi_leak"); d.Outcome != store.OutcomeReactivated || f.revokedNow(key) {
		t.Fatalf("its win: %s, revoked %v", d.Outcome, f.revokedNow(key))
	}
}

// An invoice that pays within a period already paid (a mid-period change's proration)
// does not move the expiry and is not called a renewal; the invoice that did set the
// period keeps its outcome when its job runs again.
func TestProrationInvoiceIsNotARenewal(t *testing.T) {
	f := newFixture(t)
	end := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	jobs := f.receiveLifecycle("evt_co", stripeevent.CheckoutCompleted, []string{"sub_up"},
		stripeevent.Detail{Mode: stripeevent.ModeSubscription}, "cs_up")
	first := f.receiveLifecycle("evt_inv1", stripeevent.InvoicePaid, []string{"sub_up", "in_1"}, stripeevent.Detail{PeriodEnd: &end, First: true}, "")
	proration := f.receiveLifecycle("evt_inv2", stripeevent.InvoicePaid, []string{"sub_up", "in_2"}, stripeevent.Detail{PeriodEnd: &end}, "")
	for _, j := range slices.Concat(jobs, first, proration, first) { // the first invoice's job runs again last
		if err := f.w.process(context.Background(), f.tenant, j, false); err != nil {
			t.Fatal(err)
		}
	}
	if d := f.delivery(first[0].DeliveryID); d.Outcome != store.OutcomeExpirySet {
		t.Fatalf("first invoice: %s %q", d.Outcome, val(d.Error))
	}
	d := f.delivery(proration[0].DeliveryID)
	if d.Outcome != store.OutcomeIgnored || val(d.Error) != "The invoice pays within a period already paid (a change of plan, say): the expiry stays at the latest paid period" {
		t.Fatalf("proration invoice: %s %q", d.Outcome, val(d.Error))
	}
}
