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
	// InvoicePaymentPaid names the payment intent or charge that paid an invoice. From API
	// version 2025-03-31.basil it is how a renewal's charge leads to its subscription:
	// the invoice no longer names its payments, nor a charge its invoice.
	InvoicePaymentPaid = "invoice_payment.paid"
	ModeSubscription   = "subscription"
	DisputeWon         = "won"
)

// IsLifecycle reports whether events of type t act on a purchase already made.
func IsLifecycle(t string) bool {
	switch t {
	case InvoicePaid, SubscriptionDeleted, ChargeRefunded, DisputeCreated, DisputeClosed, InvoicePaymentPaid:
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

// MaxInvoicePayments caps the payments an invoice.paid event may list
// (data.object.payments.data, API versions from 2025-03-31.basil): Stripe includes ten at
// most, and each one's ids are stored to find the purchase by.
const MaxInvoicePayments = 10

type id = stripeinput.ExpandableID

type lifecycleObject struct {
	ID             string `json:"id"`
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
	// invoice_payment (API versions from 2025-03-31.basil).
	Payment struct {
		PaymentIntent id `json:"payment_intent"`
		Charge        id `json:"charge"`
	} `json:"payment"`
}

// parseLifecycle reads the event's object. An object that lacks what the type needs is
// not about a storefront purchase: it comes back nil with the reason it is ignored. One
// that breaks the caps is a refusal.
//
// The shapes of API versions 2023-10-16 through 2025-03-31.basil and later are read
// alike: basil moved an invoice's subscription under parent.subscription_details and its
// payments to its payments list and to invoice_payment.paid, and took a charge's invoice
// away (stripeinput.ReadInvoiceLinks). Either way each event adds the ids it carries to
// the purchase's, so a charge's refund or dispute finds the license through its payment
// intent or charge id.
func parseLifecycle(eventType string, raw []byte) (l *Lifecycle, ignored string, err error) {
	kind := strings.SplitN(eventType, ".", 2)[0]
	var o lifecycleObject
	if err := json.Unmarshal(raw, &o); err != nil {
		return nil, "", refuse("data.object is not a Stripe %s object", kind)
	}
	if o.ID == "" {
		return nil, "The " + kind + " has no id", nil
	}
	l = &Lifecycle{}
	switch eventType {
	case InvoicePaid:
		links, err := stripeinput.ReadInvoiceLinks(raw)
		if err != nil {
			return nil, "", refuse("data.object is not a Stripe invoice object")
		}
		if len(links.Payments) > MaxInvoicePayments {
			return nil, "", refuse("data.object.payments.data must hold at most %d payments", MaxInvoicePayments)
		}
		if links.Subscription == "" {
			return nil, "The invoice is not a subscription's (no subscription, nor parent.subscription_details.subscription)", nil
		}
		end := o.PeriodEnd
		for _, line := range o.Lines.Data {
			end = max(end, line.Period.End)
		}
		if end <= 0 {
			return nil, "The invoice has no period end", nil
		}
		t := time.Unix(end, 0).UTC()
		l.Detail.PeriodEnd = &t
		l.Detail.First = o.BillingReason == "subscription_create"
		l.Refs = refs(links.Subscription, o.ID)
		for _, p := range links.Payments {
			l.Refs = append(l.Refs, refs(p.PaymentIntent, p.Charge)...)
		}
	case InvoicePaymentPaid:
		if o.Invoice == "" {
			return nil, "The invoice payment names no invoice", nil
		}
		l.Refs = refs(string(o.Invoice), string(o.Payment.PaymentIntent), string(o.Payment.Charge))
	case SubscriptionDeleted:
		l.Refs = refs(o.ID)
	case ChargeRefunded:
		l.Detail.Amount, l.Detail.AmountRefunded = o.Amount, o.AmountRefunded
		l.Refs = refs(string(o.PaymentIntent), o.ID, string(o.Invoice))
	case DisputeCreated, DisputeClosed:
		if o.Charge == "" && o.PaymentIntent == "" {
			return nil, "The dispute names no charge or payment intent", nil
		}
		if len(o.Status) > MaxPaymentStatusLen || !stripeinput.PrintableASCII(o.Status) {
			return nil, "", refuse("data.object.status must be at most %d printable ASCII characters", MaxPaymentStatusLen)
		}
		l.Detail.DisputeID, l.Detail.DisputeStatus = o.ID, o.Status
		l.Refs = refs(string(o.PaymentIntent), string(o.Charge))
	}
	if err := checkRefs("data.object", append([]string{o.ID}, l.Refs...)); err != nil {
		return nil, "", err
	}
	return l, "", nil
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
