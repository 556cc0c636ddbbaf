package plan

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/keyhouse/keyhouse/pkg/stripeinput"
	"github.com/stripe/stripe-go/v76"
)

// Order places a billing event in time. Stripe delivers events late, twice and out of
// order; a state is only replaced by one from a later Order, so a late event never undoes
// a newer state. Stripe's event time has one-second resolution, so events of the same
// second are ordered by Rank, the order in which a subscription's life goes.
type Order struct {
	At   time.Time
	Rank int
}

// After reports whether o comes strictly after p.
func (o Order) After(p Order) bool {
	if !o.At.Equal(p.At) {
		return o.At.After(p.At)
	}
	return o.Rank > p.Rank
}

// Kind is what an event says about the subscription.
type Kind int

// The kinds of change.
const (
	// Ignore: nothing about the plan (an unhandled type, a payment-mode checkout, an
	// unpaid checkout, an incomplete subscription, the failure of a subscription's first
	// invoice).
	Ignore Kind = iota
	// Replace: the event carries the whole state (a paid checkout, a subscription).
	Replace
	// PaymentFailed: the subscription's latest invoice failed; past_due until paid.
	PaymentFailed
)

// Event types handled (addendum §3), with the rank of each within one second.
var ranks = map[stripe.EventType]int{
	"checkout.session.completed":    0,
	"customer.subscription.created": 1,
	"customer.subscription.updated": 2,
	"invoice.payment_failed":        3,
	"customer.subscription.deleted": 4,
}

// Handled reports whether billing acts on events of type t.
func Handled(t stripe.EventType) bool {
	_, ok := ranks[t]
	return ok
}

// Change is one verified event read for what billing needs.
type Change struct {
	EventID string
	Type    stripe.EventType
	Order   Order
	Kind    Kind
	// State replaces the tenant's state (Kind Replace).
	State State
	// Tenant is named by the event itself: client_reference_id of a checkout session, or
	// metadata.tenant_id of a subscription (set at checkout) or of an invoice's
	// subscription details. Empty when the event does not say.
	Tenant string
	// Customer is the Stripe customer; Link says the event ties it to Tenant
	// (checkout.session.completed), so later events about the customer find the tenant.
	Customer string
	Link     bool
	// Subscription is the Stripe subscription the event is about.
	Subscription string
	// Ended: the subscription is over (deleted, canceled, expired).
	Ended bool
	// NeverPaid (with Ended): it ended without its first payment ever succeeding:
	// Stripe's incomplete_expired (the first invoice unpaid 23 hours after it was created,
	// e.g. a 3-D Secure check the buyer abandoned), or its deletion while incomplete. It
	// never gave the tenant a plan, so its end is no paid subscription that ended.
	NeverPaid bool
}

// Check holds the ids the event names, which billing stores, to pkg/stripeinput's rules
// (Stripe's ids and this installation's tenant ids are short ASCII tokens): a NUL or a
// megabyte there is refused with the field's name instead of reaching Postgres.
func (c Change) Check() error {
	for _, f := range []struct{ name, value string }{
		{"data.object.customer", c.Customer},
		{"data.object.subscription", c.Subscription},
		{"the tenant id (client_reference_id or metadata.tenant_id)", c.Tenant},
	} {
		if err := stripeinput.CheckID(f.name, f.value, false); err != nil {
			return err
		}
	}
	return nil
}

// Read turns a verified Stripe event into a Change. An error means a handled event whose
// object could not be read: the caller answers 400, and Stripe shows the failure.
func Read(e stripe.Event) (Change, error) {
	c := Change{EventID: e.ID, Type: e.Type, Order: Order{At: time.Unix(e.Created, 0).UTC(), Rank: ranks[e.Type]}}
	if !Handled(e.Type) {
		return c, nil
	}
	if e.Data == nil || len(e.Data.Raw) == 0 {
		return c, fmt.Errorf("event %s has no data.object", e.ID)
	}
	switch e.Type {
	case "checkout.session.completed":
		var s stripe.CheckoutSession
		if err := json.Unmarshal(e.Data.Raw, &s); err != nil {
			return c, err
		}
		return readCheckout(c, &s), nil
	case "invoice.payment_failed":
		var in stripe.Invoice
		if err := json.Unmarshal(e.Data.Raw, &in); err != nil {
			return c, err
		}
		links, err := stripeinput.ReadInvoiceLinks(e.Data.Raw)
		if err != nil {
			return c, err
		}
		return readInvoice(c, &in, links), nil
	default:
		var s stripe.Subscription
		if err := json.Unmarshal(e.Data.Raw, &s); err != nil {
			return c, err
		}
		if e.Type == "customer.subscription.deleted" {
			// The end whatever the status says; the end of one that never collected money
			// if it was still incomplete (deleting an incomplete subscription expires it).
			switch s.Status {
			case stripe.SubscriptionStatusIncomplete, stripe.SubscriptionStatusIncompleteExpired:
				s.Status = stripe.SubscriptionStatusIncompleteExpired
			default:
				s.Status = stripe.SubscriptionStatusCanceled
			}
		}
		newer(e.Data.Raw, &s)
		return readSubscription(c, &s), nil
	}
}

// newerShapes are the subscription's fields Stripe moved in API versions after stripe-go
// v76's (2025-03-31): the period end lives on its items. Read them, so a webhook endpoint
// created with a newer API version still works (an invoice's moved fields are read by
// stripeinput.ReadInvoiceLinks).
type newerShapes struct {
	Items struct {
		Data []struct {
			CurrentPeriodEnd int64 `json:"current_period_end"`
		} `json:"data"`
	} `json:"items"`
}

func newer(raw []byte, s *stripe.Subscription) {
	var n newerShapes
	if s.CurrentPeriodEnd != 0 || json.Unmarshal(raw, &n) != nil {
		return
	}
	for _, item := range n.Items.Data {
		s.CurrentPeriodEnd = max(s.CurrentPeriodEnd, item.CurrentPeriodEnd)
	}
}

func readCheckout(c Change, s *stripe.CheckoutSession) Change {
	if s.Mode != stripe.CheckoutSessionModeSubscription || s.ClientReferenceID == "" {
		// Payment-mode sessions are storefront purchases, not this account's plan.
		return c
	}
	c.Tenant, c.Link = s.ClientReferenceID, true
	if s.Customer != nil {
		c.Customer = s.Customer.ID
	}
	if s.Subscription != nil {
		c.Subscription = s.Subscription.ID
	}
	if s.Status == stripe.CheckoutSessionStatusComplete && s.PaymentStatus != stripe.CheckoutSessionPaymentStatusUnpaid {
		// Paid (or a trial, "no_payment_required"): Pro from now. The subscription's own
		// events, which usually follow within the second, fill in the period.
		c.Kind, c.State = Replace, State{Plan: Pro, Status: Active}
	}
	return c
}

func readInvoice(c Change, in *stripe.Invoice, links stripeinput.InvoiceLinks) Change {
	if links.Subscription == "" {
		return c // a one-off invoice: no plan involved
	}
	c.Subscription = links.Subscription
	if in.Customer != nil {
		c.Customer = in.Customer.ID
	}
	c.Tenant = links.SubscriptionMetadata["tenant_id"]
	if in.BillingReason == stripe.InvoiceBillingReasonSubscriptionCreate {
		// The first invoice: a subscription whose first payment failed is incomplete, not
		// past due, and gives the tenant nothing yet; its own events say how it ends
		// (active once paid, incomplete_expired after 23 hours).
		return c
	}
	c.Kind = PaymentFailed
	return c
}

func readSubscription(c Change, s *stripe.Subscription) Change {
	c.Subscription, c.Tenant = s.ID, s.Metadata["tenant_id"]
	if s.Customer != nil {
		c.Customer = s.Customer.ID
	}
	st := State{Plan: Pro, CancelAtPeriodEnd: s.CancelAtPeriodEnd}
	if s.CurrentPeriodEnd > 0 {
		end := time.Unix(s.CurrentPeriodEnd, 0).UTC()
		st.CurrentPeriodEnd = &end
	}
	if s.CancelAt > 0 {
		// A set cancellation date (cancel_at, with cancel_at_period_end false before API
		// version 2025-03-31): the subscription is canceled but not yet ended, and ends
		// then, as one canceled at period end ends at its period's end. So it is read as
		// that: CancelAtPeriodEnd, and the end shown (and the instant it reverts to Free)
		// is cancel_at.
		end := time.Unix(s.CancelAt, 0).UTC()
		st.CancelAtPeriodEnd, st.CurrentPeriodEnd = true, &end
	}
	switch s.Status {
	case stripe.SubscriptionStatusActive, stripe.SubscriptionStatusTrialing:
		st.Status = Active
	case stripe.SubscriptionStatusPastDue:
		st.Status, st.Reason = PastDue, ReasonPaymentFailed
	case stripe.SubscriptionStatusUnpaid, stripe.SubscriptionStatusPaused:
		// Unpaid (retries exhausted) and paused (no invoices until resumed) collect no
		// money either: not active, shown as past_due (api.md has no other status), and
		// the reason kept for the console, which says which.
		st.Status, st.Reason = PastDue, ReasonUnpaid
		if s.Status == stripe.SubscriptionStatusPaused {
			st.Reason = ReasonPaused
		}
	case stripe.SubscriptionStatusCanceled:
		st, c.Ended = State{Plan: Free, Status: Canceled}, true
	case stripe.SubscriptionStatusIncompleteExpired:
		// Its first payment never succeeded: it ends having given the tenant nothing.
		st, c.Ended, c.NeverPaid = State{Plan: Free, Status: Canceled}, true, true
	default:
		// incomplete: the first payment is still pending; checkout.session.completed or
		// the next update says how it ends.
		return c
	}
	c.Kind, c.State = Replace, st
	return c
}

// Sub is one Stripe subscription as its events left it. Each part only moves forward
// (a later Order replaces an earlier one; ended stays ended; never paid stays never paid),
// so the same events in any delivery order, any number of times, leave the same Sub.
type Sub struct {
	ID string
	// Snapshot is the state the latest subscription event (or the paid checkout) carried.
	Snapshot      State
	SnapshotOrder Order
	HasSnapshot   bool
	// FailedOrder is the latest invoice.payment_failed; past_due unless a later snapshot
	// (Stripe's update once the invoice is paid) says otherwise.
	FailedOrder Order
	HasFailed   bool
	// Ended: deleted, canceled or expired. Stripe never revives an ended subscription.
	Ended bool
	// NeverPaid (with Ended): an end event said its first payment never succeeded
	// (Change.NeverPaid). It counts for nothing in the tenant's plan.
	NeverPaid bool
}

// Merge returns s after c (an event about s.ID), and whether anything changed.
func (s Sub) Merge(c Change) (Sub, bool) {
	switch {
	case c.Ended:
		// Ends join, whatever their order: once an end event says the first payment never
		// succeeded, the subscription stays one that never paid, even if another end says
		// only "canceled". Stripe's own statuses do not disagree (incomplete_expired is
		// reached only from incomplete, before any payment, and is final); the join keeps
		// the merge order-independent if two events ever do.
		if s.Ended && (s.NeverPaid || !c.NeverPaid) {
			return s, false
		}
		s.Ended, s.NeverPaid = true, s.NeverPaid || c.NeverPaid
	case s.Ended || c.Kind == Ignore:
		return s, false
	case c.Kind == PaymentFailed:
		if s.HasFailed && !c.Order.After(s.FailedOrder) {
			return s, false
		}
		s.FailedOrder, s.HasFailed = c.Order, true
	default:
		if s.HasSnapshot && !c.Order.After(s.SnapshotOrder) {
			return s, false
		}
		s.Snapshot, s.SnapshotOrder, s.HasSnapshot = c.State, c.Order, true
	}
	return s, true
}

// live reports whether s is a subscription the tenant still holds.
func (s Sub) live() bool { return !s.Ended && (s.HasSnapshot || s.HasFailed) }

// latest is the Order of the newest thing known about s.
func (s Sub) latest() Order {
	if s.HasFailed && (!s.HasSnapshot || s.FailedOrder.After(s.SnapshotOrder)) {
		return s.FailedOrder
	}
	return s.SnapshotOrder
}

// State is the plan s gives its tenant.
func (s Sub) State() State {
	switch {
	case s.NeverPaid:
		return State{}
	case s.Ended:
		return State{Plan: Free, Status: Canceled}
	}
	st := s.Snapshot
	if s.HasFailed && (!s.HasSnapshot || s.FailedOrder.After(s.SnapshotOrder)) {
		st.Plan, st.Status, st.Reason = Pro, PastDue, ReasonPaymentFailed
	}
	return st
}

// Tenant is a tenant's plan in force at now from all its subscriptions (State.At applied
// to each): the one it still holds at now (an active one before a past_due one, then the
// newest), else Free and canceled once a paid subscription has ended (deleted, or its
// period ran out after a cancellation, whether or not Stripe's deletion has arrived),
// else no billing history. A subscription whose period ran out is never ranked as what it
// was: a new past-due subscription outranks an old one that ended at its period's end.
// One that never paid (Sub.NeverPaid) is not counted at all: the tenant is what it was
// without it (a checkout abandoned at 3-D Secure blocks nobody).
func Tenant(subs []Sub, now time.Time) State {
	return tenant(subs, func(s State) State { return s.At(now) })
}

// Moved says whether the tenant's plan or status moved from subscriptions before to
// after (billing.plan_changed): in force at now, or as the events alone leave them,
// without the period-end rule. The second catches the deletion of a subscription whose
// period already ran out after a cancellation: nothing moves in force then (it moved at
// the period's end, when no event came), and this deletion is the first event to tell.
func Moved(before, after []Sub, now time.Time) bool {
	differ := func(a, b State) bool { return a.Plan != b.Plan || a.Status != b.Status }
	eventsOnly := func(s State) State { return s.At(time.Time{}) }
	return differ(Tenant(before, now), Tenant(after, now)) ||
		differ(tenant(before, eventsOnly), tenant(after, eventsOnly))
}

// tenant is Tenant with each subscription's state taken through at.
func tenant(subs []Sub, at func(State) State) State {
	var best *Sub
	var bestState State
	ended := false
	for i := range subs {
		s := &subs[i]
		if s.NeverPaid {
			continue
		}
		if s.Ended {
			ended = true
		}
		if !s.live() {
			continue
		}
		st := at(s.State())
		if st.Status == Canceled {
			// Its period ran out after a cancellation: ended, though Stripe has not said so.
			ended = true
			continue
		}
		if best == nil || better(s, st, best, bestState) {
			best, bestState = s, st
		}
	}
	switch {
	case best != nil:
		return bestState
	case ended:
		return State{Plan: Free, Status: Canceled}
	}
	return at(State{})
}

// better says whether subscription a (in state as) outranks b (in bs).
func better(a *Sub, as State, b *Sub, bs State) bool {
	if aa, ba := as.Active(), bs.Active(); aa != ba {
		return aa
	}
	if la, lb := a.latest(), b.latest(); la.After(lb) || lb.After(la) {
		return la.After(lb)
	}
	return a.ID > b.ID
}
