package stripeevent_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/pkg/stripeinput"
	"github.com/keyhouse/keyhouse/services/storefront/internal/stripeevent"
	"github.com/stripe/stripe-go/v76/webhook"
)

const secret = "whsec_unit_test_secret"

func sign(payload []byte, secret string, at time.Time) string {
	return webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: secret, Timestamp: at}).Header
}

func payload(t *testing.T, typ string, obj map[string]any) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{"id": "evt_1", "object": "event", "type": typ, "created": 1700000000,
		"api_version": "2020-08-27", "data": map[string]any{"object": obj}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestACheckoutSessionIsRead(t *testing.T) {
	p := payload(t, stripeevent.CheckoutCompleted, map[string]any{
		"id": "cs_1", "object": "checkout.session", "payment_link": "plink_1", "payment_status": "unpaid",
		"customer": "cus_1", "customer_details": map[string]any{"email": "buyer@example.com"},
		"metadata": map[string]any{"service_ref": "pro-yearly"}, "created": 1700000100,
	})
	ev, err := stripeevent.Parse(p, sign(p, secret, time.Now()), secret)
	if err != nil {
		t.Fatal(err)
	}
	s := ev.Session
	if ev.ID != "evt_1" || ev.Type != stripeevent.CheckoutCompleted || s == nil || s.ID != "cs_1" ||
		s.PaymentLink != "plink_1" || s.ServiceRef != "pro-yearly" || s.PaymentStatus != "unpaid" ||
		s.Customer != "cus_1" || s.Email != "buyer@example.com" || !s.Created.Equal(time.Unix(1700000100, 0)) {
		t.Fatalf("event %+v session %+v", ev, s)
	}
}

// An expanded payment link (an object, not an id) reads the same.
func TestExpandedPaymentLink(t *testing.T) {
	p := payload(t, stripeevent.AsyncPaymentSucceeded, map[string]any{
		"id": "cs_2", "payment_link": map[string]any{"id": "plink_2", "object": "payment_link"}, "payment_status": "paid",
	})
	ev, err := stripeevent.Parse(p, sign(p, secret, time.Now()), secret)
	if err != nil || ev.Session.PaymentLink != "plink_2" {
		t.Fatalf("%+v %v", ev, err)
	}
}

func TestSignatureIsCheckedFirst(t *testing.T) {
	p := payload(t, stripeevent.CheckoutCompleted, map[string]any{"id": "cs_1"})
	tampered := append([]byte(nil), p...)
	tampered[len(tampered)-3] = 'X'
	for name, tc := range map[string]struct {
		body   []byte
		header string
	}{
		"wrong secret":       {p, sign(p, "whsec_other", time.Now())},
		"tampered body":      {tampered, sign(p, secret, time.Now())},
		"no header":          {p, ""},
		"garbage header":     {p, "t=abc,v1=zz"},
		"older than 300 s":   {p, sign(p, secret, time.Now().Add(-6*time.Minute))},
		"not JSON, unsigned": {[]byte("{"), ""},
	} {
		if _, err := stripeevent.Parse(tc.body, tc.header, secret); !errors.Is(err, stripeevent.ErrSignature) {
			t.Errorf("%s: %v, want ErrSignature", name, err)
		}
	}
}

func TestSignedButUnreadable(t *testing.T) {
	for name, body := range map[string][]byte{
		"not JSON":           []byte("{not json"),
		"no event id":        []byte(`{"type":"checkout.session.completed","data":{"object":{"id":"cs_1"}}}`),
		"session without id": payload(t, stripeevent.CheckoutCompleted, map[string]any{"payment_status": "paid"}),
	} {
		var pe *stripeinput.Error
		if _, err := stripeevent.Parse(body, sign(body, secret, time.Now()), secret); !errors.As(err, &pe) {
			t.Errorf("%s: %v, want a payload refusal", name, err)
		}
	}
}

// Other event types, and lifecycle events that are not about a subscription or a charge,
// are verified and returned with nothing to act on and why: acknowledged, ignored.
func TestOtherEventTypes(t *testing.T) {
	for _, tc := range []struct {
		p    []byte
		want string
	}{
		{payload(t, "invoice.paid", map[string]any{"id": "in_1", "period_end": 1700000000}),
			"The invoice is not a subscription's (no subscription, nor parent.subscription_details.subscription)"},
		{payload(t, "invoice.paid", map[string]any{"id": "in_1", "parent": map[string]any{"type": "quote_details"}}),
			"The invoice is not a subscription's (no subscription, nor parent.subscription_details.subscription)"},
		{payload(t, "invoice.paid", map[string]any{"id": "in_1", "subscription": "sub_1"}), "The invoice has no period end"},
		{payload(t, "charge.dispute.created", map[string]any{"id": "dp_1"}), "The dispute names no charge or payment intent"},
		{payload(t, "invoice_payment.paid", map[string]any{"id": "inpay_1"}), "The invoice payment names no invoice"},
		{payload(t, "customer.created", map[string]any{"id": "cus_1"}), "The storefront does not act on customer.created events"},
	} {
		ev, err := stripeevent.Parse(tc.p, sign(tc.p, secret, time.Now()), secret)
		if err != nil || ev.Session != nil || ev.Lifecycle != nil || ev.Ignored != tc.want {
			t.Errorf("%+v %v, want ignored with %q", ev, err, tc.want)
		}
	}
}

// Lifecycle events yield the ids that lead to the purchase, the most telling first, and
// the fields the worker acts on.
func TestLifecycleEvents(t *testing.T) {
	end := time.Date(2027, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		typ  string
		obj  map[string]any
		refs []string
		want stripeevent.Detail
	}{
		{stripeevent.InvoicePaid, map[string]any{"id": "in_1", "subscription": "sub_1", "payment_intent": "pi_1",
			"charge": map[string]any{"id": "ch_1"}, "billing_reason": "subscription_create", "period_end": end.Add(-time.Hour).Unix(),
			"lines": map[string]any{"data": []any{map[string]any{"period": map[string]any{"end": end.Unix()}}}}},
			[]string{"sub_1", "in_1", "pi_1", "ch_1"}, stripeevent.Detail{PeriodEnd: &end, First: true}},
		// API version 2025-03-31.basil: the subscription under parent.subscription_details,
		// the payments (when included) in the payments list.
		{stripeevent.InvoicePaid, map[string]any{"id": "in_2", "billing_reason": "subscription_cycle",
			"parent": map[string]any{"type": "subscription_details", "subscription_details": map[string]any{"subscription": "sub_1"}},
			"lines":  map[string]any{"data": []any{map[string]any{"period": map[string]any{"end": end.Unix()}}}}},
			[]string{"sub_1", "in_2"}, stripeevent.Detail{PeriodEnd: &end}},
		{stripeevent.InvoicePaid, map[string]any{"id": "in_2", "period_end": end.Unix(),
			"parent":   map[string]any{"subscription_details": map[string]any{"subscription": "sub_1"}},
			"payments": map[string]any{"data": []any{map[string]any{"payment": map[string]any{"type": "payment_intent", "payment_intent": "pi_2"}}}}},
			[]string{"sub_1", "in_2", "pi_2"}, stripeevent.Detail{PeriodEnd: &end}},
		{stripeevent.InvoicePaymentPaid, map[string]any{"id": "inpay_1", "object": "invoice_payment", "invoice": "in_2", "status": "paid",
			"payment": map[string]any{"type": "payment_intent", "payment_intent": "pi_2"}},
			[]string{"in_2", "pi_2"}, stripeevent.Detail{}},
		{stripeevent.SubscriptionDeleted, map[string]any{"id": "sub_1"}, []string{"sub_1"}, stripeevent.Detail{}},
		{stripeevent.ChargeRefunded, map[string]any{"id": "ch_1", "payment_intent": "pi_1", "amount": 100, "amount_refunded": 40},
			[]string{"pi_1", "ch_1"}, stripeevent.Detail{Amount: 100, AmountRefunded: 40}},
		{stripeevent.DisputeClosed, map[string]any{"id": "dp_1", "charge": "ch_1", "status": "won"},
			[]string{"ch_1"}, stripeevent.Detail{DisputeID: "dp_1", DisputeStatus: "won"}},
	} {
		p := payload(t, tc.typ, tc.obj)
		ev, err := stripeevent.Parse(p, sign(p, secret, time.Now()), secret)
		if err != nil || ev.Lifecycle == nil {
			t.Fatalf("%s: %+v %v", tc.typ, ev, err)
		}
		got, _ := json.Marshal(ev.Lifecycle)
		want, _ := json.Marshal(stripeevent.Lifecycle{Refs: tc.refs, Detail: tc.want})
		if string(got) != string(want) {
			t.Errorf("%s: %s, want %s", tc.typ, got, want)
		}
	}
	full := stripeevent.Detail{Amount: 100, AmountRefunded: 100}
	if !full.FullRefund() || (stripeevent.Detail{Amount: 100, AmountRefunded: 99}).FullRefund() {
		t.Error("FullRefund")
	}
}

// What a signed payload can make the service store or publish is bounded and valid text:
// anything else is refused, naming the field, instead of being clipped or stored.
func TestFieldsOverTheirCapsAreRefused(t *testing.T) {
	long := strings.Repeat("a", 5000)
	session := func(mutate func(m map[string]any)) map[string]any {
		m := map[string]any{"id": "cs_1", "payment_status": "paid", "customer_details": map[string]any{"email": "b@example.com"}}
		mutate(m)
		return m
	}
	event := func(mutate func(m map[string]any)) []byte {
		m := map[string]any{"id": "evt_1", "object": "event", "type": stripeevent.CheckoutCompleted, "created": 1700000000,
			"data": map[string]any{"object": session(func(map[string]any) {})}}
		mutate(m)
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	inSession := func(mutate func(m map[string]any)) []byte {
		return event(func(m map[string]any) { m["data"] = map[string]any{"object": session(mutate)} })
	}
	invalidUTF8 := []byte(`{"id":"evt_1","object":"event","type":"checkout.session.completed","created":1700000000,"data":{"object":{"id":"cs_` + "\xff\xfe" + `","payment_status":"paid"}}}`)
	for name, tc := range map[string]struct {
		body []byte
		want string
	}{
		"empty event id":          {event(func(m map[string]any) { m["id"] = "" }), "id is required"},
		"event id over 255":       {event(func(m map[string]any) { m["id"] = "evt_" + long }), "id must be at most 255"},
		"event id with a newline": {event(func(m map[string]any) { m["id"] = "evt_1\n" }), "id must be at most 255"},
		"event from the future":   {event(func(m map[string]any) { m["created"] = time.Now().Add(time.Hour).Unix() }), "created is in the future"},
		"session from the future": {inSession(func(m map[string]any) { m["created"] = time.Now().Add(time.Hour).Unix() }), "data.object.created is in the future"},
		"session without id":      {inSession(func(m map[string]any) { delete(m, "id") }), "data.object.id is required"},
		"session id over 255":     {inSession(func(m map[string]any) { m["id"] = "cs_" + long }), "data.object.id must be at most 255"},
		"session id with NUL":     {inSession(func(m map[string]any) { m["id"] = "cs_\u0000" }), "data.object.id must be"},
		"session id not ASCII":    {inSession(func(m map[string]any) { m["id"] = "cs_\ufffd" }), "data.object.id must be"},
		"customer over 255":       {inSession(func(m map[string]any) { m["customer"] = "cus_" + long }), "data.object.customer must be"},
		"payment link over 255":   {inSession(func(m map[string]any) { m["payment_link"] = "plink_" + long }), "data.object.payment_link must be"},
		"service_ref over 500":    {inSession(func(m map[string]any) { m["metadata"] = map[string]any{"service_ref": long} }), "data.object.metadata.service_ref must be at most 500"},
		"email over 254": {inSession(func(m map[string]any) {
			m["customer_details"] = map[string]any{"email": strings.Repeat("x", 800_000) + "@example.com"}
		}), "data.object.customer_details.email must be at most 254"},
		"payload not UTF-8": {invalidUTF8, "not valid UTF-8"},
		"invoice with 11 payments": {event(func(m map[string]any) {
			var payments []any
			for range 11 {
				payments = append(payments, map[string]any{"payment": map[string]any{"payment_intent": "pi_1"}})
			}
			m["type"], m["data"] = stripeevent.InvoicePaid, map[string]any{"object": map[string]any{"id": "in_1", "period_end": 1700000000,
				"parent": map[string]any{"subscription_details": map[string]any{"subscription": "sub_1"}}, "payments": map[string]any{"data": payments}}}
		}), "data.object.payments.data must hold at most 10 payments"},
	} {
		_, err := stripeevent.Parse(tc.body, sign(tc.body, secret, time.Now()), secret)
		var pe *stripeinput.Error
		if !errors.As(err, &pe) || !strings.Contains(pe.Reason, tc.want) {
			t.Errorf("%s: %v, want a payload error with %q", name, err, tc.want)
		}
	}
	// At the caps, accepted.
	ok := inSession(func(m map[string]any) {
		m["id"] = "cs_" + long[:252]
		m["metadata"] = map[string]any{"service_ref": strings.Repeat("é", 500)}
		m["customer_details"] = map[string]any{"email": strings.Repeat("x", 254-len("@example.com")) + "@example.com"}
	})
	if _, err := stripeevent.Parse(ok, sign(ok, secret, time.Now()), secret); err != nil {
		t.Fatalf("fields at their caps refused: %v", err)
	}
}

func TestFutureDatedSignatureIsRefused(t *testing.T) {
	p := payload(t, stripeevent.CheckoutCompleted, map[string]any{"id": "cs_1", "payment_status": "paid"})
	if _, err := stripeevent.Parse(p, sign(p, secret, time.Now().Add(6*time.Minute)), secret); !errors.Is(err, stripeevent.ErrSignature) {
		t.Fatalf("signature 6 minutes ahead: %v, want ErrSignature", err)
	}
	if _, err := stripeevent.Parse(p, sign(p, secret, time.Now().Add(time.Minute)), secret); err != nil {
		t.Fatalf("signature 1 minute ahead (clock skew): %v", err)
	}
}

func FuzzParseNeverPanics(f *testing.F) {
	f.Add([]byte(`{"id":"evt","type":"checkout.session.completed","data":{"object":{"id":"cs"}}}`))
	f.Add([]byte(`{"data":{"object":{"payment_link":{"id":7}}}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		_, _ = stripeevent.Parse(body, sign(body, secret, time.Now()), secret)
	})
}
