// Package stripeevent reads the Stripe events the storefront callback accepts: it checks
// the Stripe-Signature header with stripe-go's webhook package (HMAC-SHA256 over
// "t.payload", 300 s tolerance, and no timestamp from the future) and extracts from a
// Checkout Session what fulfillment needs, refusing what breaks the caps below (so a
// signed event can never make the service store or publish more than they allow).
package stripeevent

import (
	"encoding/json"
	"errors"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/keyhouse/keyhouse/pkg/mail"
	"github.com/keyhouse/keyhouse/pkg/stripeinput"
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
	signatureToleranceSeconds = 300
)

// The caps on what a signed event may carry besides pkg/stripeinput's (ids at most 255
// printable ASCII characters); docs/storefront.md lists them all. Stripe's own values are
// far inside them.
const (
	MaxTypeLen          = 255
	MaxPaymentStatusLen = 64
	MaxServiceRefLen    = 500 // Stripe's own limit on a metadata value
	MaxEmailLen         = mail.MaxAddressLen
)

// Tolerance is how old a signature's timestamp may be (and how far ahead, see
// stripeinput.FutureDated).
const Tolerance = signatureToleranceSeconds * time.Second

// ErrSignature: missing, malformed, wrong, expired or future-dated signature. A signed
// event this service cannot read or accept is a *stripeinput.Error that says why.
var ErrSignature = errors.New("invalid signature")

// refuse is stripeinput.Refuse: the storefront's refusals are the same kind of error.
var refuse = stripeinput.Refuse

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
	// purchase (IsLifecycle); both are nil for the events the storefront ignores, and
	// Ignored says why.
	Session   *Session
	Lifecycle *Lifecycle
	Ignored   string
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
	// stripe-go refuses a stale timestamp only; one from the future would make a captured
	// request replayable for as long as it is ahead.
	now := time.Now()
	if stripeinput.FutureDated(sigHeader, now) {
		return nil, ErrSignature
	}
	var ev stripe.Event
	if utf8.Valid(payload) && (json.Unmarshal(payload, &ev) != nil || ev.Type == "") {
		return nil, refuse("not a Stripe event")
	}
	if err := stripeinput.CheckEnvelope(payload, ev.ID, ev.Created, now); err != nil {
		return nil, err
	}
	if len(ev.Type) > MaxTypeLen || !stripeinput.PrintableASCII(string(ev.Type)) {
		return nil, refuse("type must be at most %d printable ASCII characters", MaxTypeLen)
	}
	out := &Event{ID: ev.ID, Type: string(ev.Type), Created: time.Unix(ev.Created, 0).UTC()}
	if !Handled(out.Type) && !IsLifecycle(out.Type) {
		out.Ignored = "The storefront does not act on " + out.Type + " events"
		return out, nil
	}
	if ev.Data == nil || len(ev.Data.Raw) == 0 {
		return nil, refuse("data.object is missing")
	}
	if IsLifecycle(out.Type) {
		// An object without what the type needs (an invoice of no subscription, say) is
		// not about a storefront purchase: acknowledged and ignored like other types.
		l, ignored, err := parseLifecycle(out.Type, ev.Data.Raw)
		if err != nil {
			return nil, err
		}
		out.Lifecycle, out.Ignored = l, ignored
		return out, nil
	}
	var cs stripe.CheckoutSession
	if err := json.Unmarshal(ev.Data.Raw, &cs); err != nil {
		return nil, refuse("data.object is not a checkout session")
	}
	s := &Session{ID: cs.ID, PaymentStatus: string(cs.PaymentStatus), ServiceRef: cs.Metadata[ServiceRefMetadataKey]}
	if cs.PaymentLink != nil {
		s.PaymentLink = cs.PaymentLink.ID
	}
	if cs.Customer != nil {
		s.Customer = cs.Customer.ID
	}
	if cs.CustomerDetails != nil {
		s.Email = strings.TrimSpace(cs.CustomerDetails.Email)
	}
	s.Mode = string(cs.Mode)
	if cs.Subscription != nil {
		s.Refs = append(s.Refs, cs.Subscription.ID)
	}
	if cs.PaymentIntent != nil {
		s.Refs = append(s.Refs, cs.PaymentIntent.ID)
	}
	if cs.Invoice != nil {
		s.Refs = append(s.Refs, cs.Invoice.ID)
	}
	if err := s.check(); err != nil {
		return nil, err
	}
	if err := stripeinput.CheckCreated("data.object.created", cs.Created, now); err != nil {
		return nil, err
	}
	if cs.Created > 0 {
		s.Created = time.Unix(cs.Created, 0).UTC()
	} else {
		s.Created = time.Unix(ev.Created, 0).UTC()
	}
	out.Session = s
	return out, nil
}

// check holds the session's fields to their caps.
func (s *Session) check() error {
	for _, f := range []struct {
		name, value string
		required    bool
	}{
		{"data.object.id", s.ID, true},
		{"data.object.payment_link", s.PaymentLink, false},
		{"data.object.customer", s.Customer, false},
	} {
		if err := stripeinput.CheckID(f.name, f.value, f.required); err != nil {
			return err
		}
	}
	if err := checkRefs("data.object", s.Refs); err != nil {
		return err
	}
	if len(s.Mode) > MaxPaymentStatusLen || !stripeinput.PrintableASCII(s.Mode) {
		return refuse("data.object.mode must be at most %d printable ASCII characters", MaxPaymentStatusLen)
	}
	if len(s.PaymentStatus) > MaxPaymentStatusLen || !stripeinput.PrintableASCII(s.PaymentStatus) {
		return refuse("data.object.payment_status must be at most %d printable ASCII characters", MaxPaymentStatusLen)
	}
	if utf8.RuneCountInString(s.ServiceRef) > MaxServiceRefLen || strings.ContainsFunc(s.ServiceRef, unicode.IsControl) {
		return refuse("data.object.metadata.service_ref must be at most %d characters, without control characters", MaxServiceRefLen)
	}
	if len(s.Email) > MaxEmailLen {
		return refuse("data.object.customer_details.email must be at most %d characters", MaxEmailLen)
	}
	return nil
}
