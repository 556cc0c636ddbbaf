package stripeinput

import (
	"reflect"
	"testing"
)

// An invoice names its subscription and payments in the shape of its API version: the
// links read the same from either.
func TestReadInvoiceLinks(t *testing.T) {
	for _, tc := range []struct {
		name, raw string
		want      InvoiceLinks
	}{
		{"2023-10-16", `{"id":"in_1","subscription":"sub_1","subscription_details":{"metadata":{"tenant_id":"t_1"}},
			"payment_intent":"pi_1","charge":"ch_1"}`,
			InvoiceLinks{Subscription: "sub_1", SubscriptionMetadata: map[string]string{"tenant_id": "t_1"},
				Payments: []InvoicePayment{{"pi_1", "ch_1"}}}},
		{"2023-10-16, expanded", `{"id":"in_1","subscription":{"id":"sub_1"},"payment_intent":{"id":"pi_1"}}`,
			InvoiceLinks{Subscription: "sub_1", Payments: []InvoicePayment{{PaymentIntent: "pi_1"}}}},
		{"2025-03-31.basil", `{"id":"in_1","parent":{"type":"subscription_details","subscription_details":
			{"subscription":"sub_1","metadata":{"tenant_id":"t_1"}}}}`,
			InvoiceLinks{Subscription: "sub_1", SubscriptionMetadata: map[string]string{"tenant_id": "t_1"}}},
		{"2025-03-31.basil, payments included", `{"id":"in_1","parent":{"subscription_details":{"subscription":"sub_1"}},
			"payments":{"object":"list","data":[{"id":"inpay_1","payment":{"type":"payment_intent","payment_intent":"pi_1"}},
			{"id":"inpay_2","payment":{"type":"charge","charge":"ch_2"}}]}}`,
			InvoiceLinks{Subscription: "sub_1", Payments: []InvoicePayment{{PaymentIntent: "pi_1"}, {Charge: "ch_2"}}}},
		{"one-off", `{"id":"in_1","parent":null}`, InvoiceLinks{}},
	} {
		got, err := ReadInvoiceLinks([]byte(tc.raw))
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %+v %v, want %+v", tc.name, got, err, tc.want)
		}
	}
	if _, err := ReadInvoiceLinks([]byte(`{"subscription":1}`)); err == nil {
		t.Error("a subscription that is neither an id nor an object must be an error")
	}
}
