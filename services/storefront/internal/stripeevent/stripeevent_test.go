package stripeevent_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

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
		if _, err := stripeevent.Parse(body, sign(body, secret, time.Now()), secret); !errors.Is(err, stripeevent.ErrPayload) {
			t.Errorf("%s: %v, want ErrPayload", name, err)
		}
	}
}

// Other event types, and lifecycle events that are not about a subscription or a charge,
// are verified and returned with nothing to act on: acknowledged, ignored.
func TestOtherEventTypes(t *testing.T) {
	for _, p := range [][]byte{
		payload(t, "invoice.paid", map[string]any{"id": "in_1"}),
		payload(t, "customer.created", map[string]any{"id": "cus_1"}),
	} {
		ev, err := stripeevent.Parse(p, sign(p, secret, time.Now()), secret)
		if err != nil || ev.Session != nil || ev.Lifecycle != nil {
			t.Fatalf("%+v %v", ev, err)
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

// What a payload can make the service store is bounded and valid text.
func TestFieldsAreClipped(t *testing.T) {
	long := make([]byte, 5000)
	for i := range long {
		long[i] = 'a'
	}
	p := payload(t, stripeevent.CheckoutCompleted, map[string]any{"id": "cs_\u0000" + string(long), "payment_status": "paid"})
	ev, err := stripeevent.Parse(p, sign(p, secret, time.Now()), secret)
	if err != nil {
		t.Fatal(err)
	}
	if len(ev.Session.ID) > 500 || ev.Session.ID[:4] != "cs_a" {
		t.Fatalf("session id %d bytes: %.10q", len(ev.Session.ID), ev.Session.ID)
	}
}

func FuzzParseNeverPanics(f *testing.F) {
	f.Add([]byte(`{"id":"evt","type":"checkout.session.completed","data":{"object":{"id":"cs"}}}`))
	f.Add([]byte(`{"data":{"object":{"payment_link":{"id":7}}}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		_, _ = stripeevent.Parse(body, sign(body, secret, time.Now()), secret)
	})
}
