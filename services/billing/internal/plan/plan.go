// Package plan is hosted billing's domain: what a tenant's plan allows, and how Stripe's
// billing events move it (api.md "Subscription", addendum §3). It is plain Go, with no
// SQL and no network, so every rule is unit-tested here; the store persists State and the
// server feeds events in.
package plan

import "time"

// The active-license quotas of api.md's Limits.
const (
	FreeLicenseLimit = 5
	ProLicenseLimit  = 1000
)

// Plans and statuses as api.md spells them.
const (
	Free = "free"
	Pro  = "pro"

	Active   = "active"
	PastDue  = "past_due"
	Canceled = "canceled"
)

// Why a subscription is past_due (State.Reason). api.md's status has one value for every
// subscription that is held but collects no money; the console tells the tenant which.
const (
	// ReasonPaymentFailed: a payment failed (invoice.payment_failed, or Stripe's
	// past_due); Stripe retries it.
	ReasonPaymentFailed = "payment_failed"
	// ReasonUnpaid: Stripe's unpaid: the retries are exhausted, the subscription is kept
	// and its latest invoice stays open.
	ReasonUnpaid = "unpaid"
	// ReasonPaused: Stripe's paused: no invoices until it is resumed (what a trial that
	// ends without a payment method becomes); not a failed payment.
	ReasonPaused = "paused"
)

// State is a tenant's plan as the billing events left it. The zero State is a tenant with
// no billing history: plan null (Free), status active.
type State struct {
	// Plan is "" (no billing history), Free (a paid subscription ended) or Pro.
	Plan   string
	Status string
	// CancelAtPeriodEnd: canceled by the customer (at period end, or at a set date), still
	// Pro until CurrentPeriodEnd.
	CancelAtPeriodEnd bool
	// CurrentPeriodEnd is the end of the paid period, when Stripe told it (nil before);
	// for a subscription with a set cancellation date (Stripe's cancel_at), that date:
	// the instant it ends.
	CurrentPeriodEnd *time.Time
	// Reason is why Status is past_due (ReasonPaymentFailed, ReasonUnpaid, ReasonPaused);
	// "" otherwise, and for a snapshot recorded before billing kept it.
	Reason string
}

// At is the state in force at now. A subscription canceled at period end stays Pro until
// CurrentPeriodEnd and is Free (canceled) from then on, even if Stripe's
// customer.subscription.deleted is late or lost.
func (s State) At(now time.Time) State {
	if s.Status == "" {
		s.Status = Active
	}
	if s.Plan == Pro && s.CancelAtPeriodEnd && s.CurrentPeriodEnd != nil && !now.Before(*s.CurrentPeriodEnd) {
		return State{Plan: Free, Status: Canceled}
	}
	return s
}

// Paid says whether the tenant holds a paid subscription (active or past due), the case
// where checkout answers the Billing Portal instead of a second subscription.
func (s State) Paid() bool { return s.Plan == Pro && s.Status != Canceled }

// Active says whether the subscription is in good standing (status active): what
// issuance, reactivation and register-release require (within the quota). past_due and
// canceled are "not active" (addendum §7): a tenant whose paid subscription ended is on
// Free's limits, and writes again once it subscribes again; reads never depend on it.
func (s State) Active() bool { return s.Status == Active || s.Status == "" }

// LicenseLimit is the plan's active-license quota.
func (s State) LicenseLimit() int {
	if s.Plan == Pro {
		return ProLicenseLimit
	}
	return FreeLicenseLimit
}

// ShownPeriodEnd is currentPeriodEnd of the status record: null unless the subscription
// is canceled at period end (api.md).
func (s State) ShownPeriodEnd() *time.Time {
	if !s.CancelAtPeriodEnd {
		return nil
	}
	return s.CurrentPeriodEnd
}
