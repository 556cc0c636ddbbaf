// Package stripeevent reads the Stripe events the storefront callback accepts: it checks
// the Stripe-Signature header with stripe-go's webhook package (HMAC-SHA256 over
// "t.payload", 300 s tolerance) and extracts from a Checkout Session what fulfillment
// needs.
package stripeevent

import (
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/webhook"
)

// The event types fulfillment acts on (api.md Events); others are acknowledged and ignored.
const (
	CheckoutCompleted         = "checkout.session.completed"
	AsyncPaymentSucceeded     = "checkout.session.async_payment_succeeded"
	AsyncPaymentFailed        = "checkout.session.async_payment_failed"
	PaymentStatusUnpaid       = "unpaid"
	ServiceRefMetadataKey     = "service_ref"
	maxFieldLen               = 500
	signatureToleranceSeconds = 300
)

// Tolerance is how old a signature's timestamp may be.
const Tolerance = signatureToleranceSeconds * time.Second

var (
	// ErrSignature: missing, malformed, wrong or expired signature.
	ErrSignature = errors.New("invalid signature")
	// ErrPayload: signed, but not an event this service can read.
	ErrPayload = errors.New("invalid payload")
)

// Handled reports whether fulfillment acts on events of type t.
func Handled(t string) bool {
	return t == CheckoutCompleted || t == AsyncPaymentSucceeded || t == AsyncPaymentFailed
}

// Event is a verified event with its checkout session.
type Event struct {
	ID   string
	Type string
	// Created is when Stripe created the event.
	Created time.Time
	// Session is set for the checkout events, Lifecycle for the events that follow a
	// purchase (IsLifecycle); both are nil for event types the storefront ignores.
	Session   *Session
	Lifecycle *Lifecycle
}

// Session is what fulfillment reads from a Checkout Session.
type Session struct {
	ID            string
	PaymentLink   string // "" when the session did not come from a payment link
	ServiceRef    string // metadata.service_ref, "" when absent
	PaymentStatus string // paid, unpaid, no_payment_required
	Customer      string // the Stripe customer id, "" for guest checkouts
	// Email is customer_details.email: the buyer's address, used for the send and never stored.
	Email   string
	Created time.Time
	// Mode is payment or subscription; Refs the session's subscription, payment intent
	// and invoice ids, which later events name the purchase by.
	Mode string
	Refs []string
}

// Parse verifies payload against secret and reads it. The signature is checked before
// anything in the payload is looked at.
func Parse(payload []byte, sigHeader, secret string) (*Event, error) {
	if err := webhook.ValidatePayloadWithTolerance(payload, sigHeader, secret, Tolerance); err != nil {
		return nil, ErrSignature
	}
	var ev stripe.Event
	if err := json.Unmarshal(payload, &ev); err != nil || ev.ID == "" || ev.Type == "" {
		return nil, ErrPayload
	}
	out := &Event{ID: clip(ev.ID), Type: clip(string(ev.Type)), Created: time.Unix(ev.Created, 0).UTC()}
	if !Handled(out.Type) && !IsLifecycle(out.Type) {
		return out, nil
	}
	if ev.Data == nil || len(ev.Data.Raw) == 0 {
		return nil, ErrPayload
	}
	if IsLifecycle(out.Type) {
		// An object without what the type needs (an invoice of no subscription, say) is
		// not about a storefront purchase: acknowledged and ignored like other types.
		if l, ok := parseLifecycle(out.Type, ev.Data.Raw); ok {
			out.Lifecycle = l
		}
		return out, nil
	}
	var cs stripe.CheckoutSession
	if err := json.Unmarshal(ev.Data.Raw, &cs); err != nil || cs.ID == "" {
		return nil, ErrPayload
	}
	s := &Session{ID: clip(cs.ID), PaymentStatus: clip(string(cs.PaymentStatus)), ServiceRef: clip(cs.Metadata[ServiceRefMetadataKey])}
	if cs.PaymentLink != nil {
		s.PaymentLink = clip(cs.PaymentLink.ID)
	}
	if cs.Customer != nil {
		s.Customer = clip(cs.Customer.ID)
	}
	if cs.CustomerDetails != nil {
		s.Email = strings.TrimSpace(cs.CustomerDetails.Email)
	}
	s.Mode = clip(string(cs.Mode))
	var ids []string
	if cs.Subscription != nil {
		ids = append(ids, cs.Subscription.ID)
	}
	if cs.PaymentIntent != nil {
		ids = append(ids, cs.PaymentIntent.ID)
	}
	if cs.Invoice != nil {
		ids = append(ids, cs.Invoice.ID)
	}
	s.Refs = refs(ids...)
	if cs.Created > 0 {
		s.Created = time.Unix(cs.Created, 0).UTC()
	} else {
		s.Created = time.Unix(ev.Created, 0).UTC()
	}
	out.Session = s
	return out, nil
}

// clip bounds what a payload can make the service store, and drops NUL (Postgres text
// cannot hold it) and invalid UTF-8.
func clip(s string) string {
	s = strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", ""), "")
	if len(s) > maxFieldLen {
		s = strings.ToValidUTF8(s[:maxFieldLen], "")
	}
	return s
}
