package stripeevent

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/keyhouse/keyhouse/pkg/stripeinput"
)

// The events that follow a purchase after its checkout (docs/storefront.md, lifecycle).
const (
	InvoicePaid         = "invoice.paid"
	SubscriptionDeleted = "customer.subscription.deleted"
	ChargeRefunded      = "charge.refunded"
	DisputeCreated      = "charge.dispute.created"
	DisputeClosed       = "charge.dispute.closed"
	ModeSubscription    = "subscription"
	DisputeWon          = "won"
)

// IsLifecycle reports whether events of type t act on a purchase already made.
func IsLifecycle(t string) bool {
	switch t {
	case InvoicePaid, SubscriptionDeleted, ChargeRefunded, DisputeCreated, DisputeClosed:
		return true
	}
	return false
}

// Lifecycle is what the worker reads from an invoice, subscription, charge or dispute.
type Lifecycle struct {
	// Refs are the Stripe ids that can lead to the checkout session, the most telling
	// first (the subscription of an invoice, the payment intent of a charge).
	Refs   []string
	Detail Detail
}

// Detail is the part of a lifecycle event the worker acts on; stored with the delivery.
type Detail struct {
	// Checkout sessions: payment or subscription.
	Mode string `json:"mode,omitempty"`
	// Invoices: the end of the period the invoice paid for (its lines' latest end), and
	// whether it is the subscription's first invoice.
	PeriodEnd *time.Time `json:"period_end,omitempty"`
	First     bool       `json:"first,omitempty"`
	// Charges: the amount and what of it was refunded, in the smallest currency unit.
	Amount         int64 `json:"amount,omitempty"`
	AmountRefunded int64 `json:"amount_refunded,omitempty"`
	// Disputes.
	DisputeID     string `json:"dispute_id,omitempty"`
	DisputeStatus string `json:"dispute_status,omitempty"`
}

// FullRefund says a charge was refunded in full.
func (d Detail) FullRefund() bool { return d.Amount > 0 && d.AmountRefunded >= d.Amount }

// id reads an expandable Stripe field: an id string or an object with an id.
type id string

func (x *id) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*x = id(s)
		return nil
	}
	var o struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(b, &o); err != nil {
		return err
	}
	*x = id(o.ID)
	return nil
}

type lifecycleObject struct {
	ID             string `json:"id"`
	Subscription   id     `json:"subscription"`
	PaymentIntent  id     `json:"payment_intent"`
	Charge         id     `json:"charge"`
	Invoice        id     `json:"invoice"`
	BillingReason  string `json:"billing_reason"`
	PeriodEnd      int64  `json:"period_end"`
	Amount         int64  `json:"amount"`
	AmountRefunded int64  `json:"amount_refunded"`
	Status         string `json:"status"`
	Lines          struct {
		Data []struct {
			Period struct {
				End int64 `json:"end"`
			} `json:"period"`
		} `json:"data"`
	} `json:"lines"`
}

// parseLifecycle reads the event's object: nil when it lacks what the type needs (not a
// storefront purchase), a refusal when it breaks the caps.
func parseLifecycle(eventType string, raw []byte) (*Lifecycle, error) {
	var o lifecycleObject
	if err := json.Unmarshal(raw, &o); err != nil {
		return nil, refuse("data.object is not a Stripe %s object", strings.SplitN(eventType, ".", 2)[0])
	}
	if o.ID == "" {
		return nil, nil
	}
	l := &Lifecycle{}
	switch eventType {
	case InvoicePaid:
		end := o.PeriodEnd
		for _, line := range o.Lines.Data {
			end = max(end, line.Period.End)
		}
		if o.Subscription == "" || end <= 0 {
			return nil, nil
		}
		t := time.Unix(end, 0).UTC()
		l.Detail.PeriodEnd = &t
		l.Detail.First = o.BillingReason == "subscription_create"
		l.Refs = refs(string(o.Subscription), o.ID, string(o.PaymentIntent), string(o.Charge))
	case SubscriptionDeleted:
		l.Refs = refs(o.ID)
	case ChargeRefunded:
		l.Detail.Amount, l.Detail.AmountRefunded = o.Amount, o.AmountRefunded
		l.Refs = refs(string(o.PaymentIntent), o.ID, string(o.Invoice))
	case DisputeCreated, DisputeClosed:
		if o.Charge == "" && o.PaymentIntent == "" {
			return nil, nil
		}
		if len(o.Status) > MaxPaymentStatusLen || !stripeinput.PrintableASCII(o.Status) {
			return nil, refuse("data.object.status must be at most %d printable ASCII characters", MaxPaymentStatusLen)
		}
		l.Detail.DisputeID, l.Detail.DisputeStatus = o.ID, o.Status
		l.Refs = refs(string(o.PaymentIntent), string(o.Charge))
	}
	if err := checkRefs("data.object", append([]string{o.ID}, l.Refs...)); err != nil {
		return nil, err
	}
	return l, nil
}

// checkRefs holds Stripe ids to pkg/stripeinput's caps.
func checkRefs(name string, ids []string) error {
	for _, id := range ids {
		if err := stripeinput.CheckID(name+" id", id, false); err != nil {
			return err
		}
	}
	return nil
}

func refs(ids ...string) []string {
	var out []string
	for _, s := range ids {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}
