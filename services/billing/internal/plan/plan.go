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

// State is a tenant's plan as the billing events left it. The zero State is a tenant with
// no billing history: plan null (Free), status active.
type State struct {
	// Plan is "" (no billing history), Free (a paid subscription ended) or Pro.
	Plan   string
	Status string
	// CancelAtPeriodEnd: canceled by the customer, still Pro until CurrentPeriodEnd.
	CancelAtPeriodEnd bool
	// CurrentPeriodEnd is the end of the paid period, when Stripe told it (nil before).
	CurrentPeriodEnd *time.Time
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

// Active says whether the subscription is in good standing (status active).
func (s State) Active() bool { return s.Status == Active || s.Status == "" }

// MayIssue says whether issuance, reactivation and register-release are allowed (within
// the quota). A past_due subscription is "not active" (addendum §7) and blocks them until
// paid. A canceled one has ended: the tenant is back on Free (api.md "reverts to Free"),
// which needs no subscription, so it may issue within Free's quota; an account over that
// quota keeps every license and issues again once under it (docs/billing.md).
func (s State) MayIssue() bool { return s.Status != PastDue }

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
