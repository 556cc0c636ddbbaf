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

// Other event types are verified and returned without a session: acknowledged, ignored.
func TestOtherEventTypes(t *testing.T) {
	p := payload(t, "invoice.paid", map[string]any{"id": "in_1"})
	ev, err := stripeevent.Parse(p, sign(p, secret, time.Now()), secret)
	if err != nil || ev.Session != nil || ev.Type != "invoice.paid" {
		t.Fatalf("%+v %v", ev, err)
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
