package stripeinput

import "encoding/json"

// ExpandableID reads an expandable Stripe field: an id string, or the object with its id.
type ExpandableID string

// UnmarshalJSON implements json.Unmarshaler.
func (x *ExpandableID) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*x = ExpandableID(s)
		return nil
	}
	var o struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(b, &o); err != nil {
		return err
	}
	*x = ExpandableID(o.ID)
	return nil
}

// InvoiceLinks are the ids an invoice names its subscription and its payments by, read
// from the shape of any API version. Up to 2025-02-24.acacia they are top-level fields
// (subscription, subscription_details.metadata, payment_intent, charge); 2025-03-31.basil
// moved the subscription under parent.subscription_details and the payments to the
// invoice's payments list (in an event only when it was included; the
// invoice_payment.paid event names them otherwise). Billing pins 2023-10-16 and the
// storefront takes either, so both read invoices through this.
type InvoiceLinks struct {
	Subscription         string
	SubscriptionMetadata map[string]string
	// Payments are the payment intents and charges that paid the invoice, as listed.
	Payments []InvoicePayment
}

// InvoicePayment is one payment of an invoice: a payment intent, a charge, or both.
type InvoicePayment struct{ PaymentIntent, Charge string }

type invoiceShapes struct {
	Subscription        ExpandableID `json:"subscription"`
	SubscriptionDetails struct {
		Metadata map[string]string `json:"metadata"`
	} `json:"subscription_details"`
	PaymentIntent ExpandableID `json:"payment_intent"`
	Charge        ExpandableID `json:"charge"`
	Parent        struct {
		SubscriptionDetails struct {
			Subscription ExpandableID      `json:"subscription"`
			Metadata     map[string]string `json:"metadata"`
		} `json:"subscription_details"`
	} `json:"parent"`
	Payments struct {
		Data []struct {
			Payment paymentShape `json:"payment"`
		} `json:"data"`
	} `json:"payments"`
}

type paymentShape struct {
	PaymentIntent ExpandableID `json:"payment_intent"`
	Charge        ExpandableID `json:"charge"`
}

func (p paymentShape) payment() InvoicePayment {
	return InvoicePayment{PaymentIntent: string(p.PaymentIntent), Charge: string(p.Charge)}
}

// ReadInvoiceLinks reads raw, an invoice object.
func ReadInvoiceLinks(raw []byte) (InvoiceLinks, error) {
	var in invoiceShapes
	if err := json.Unmarshal(raw, &in); err != nil {
		return InvoiceLinks{}, err
	}
	l := InvoiceLinks{Subscription: string(in.Subscription), SubscriptionMetadata: in.SubscriptionDetails.Metadata}
	if l.Subscription == "" {
		l.Subscription = string(in.Parent.SubscriptionDetails.Subscription)
	}
	if l.SubscriptionMetadata == nil {
		l.SubscriptionMetadata = in.Parent.SubscriptionDetails.Metadata
	}
	if in.PaymentIntent != "" || in.Charge != "" {
		l.Payments = append(l.Payments, paymentShape{in.PaymentIntent, in.Charge}.payment())
	}
	for _, p := range in.Payments.Data {
		l.Payments = append(l.Payments, p.Payment.payment())
	}
	return l, nil
}
