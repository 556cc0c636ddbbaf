package input

import (
	"testing"

	"google.golang.org/grpc/codes"
)

func TestNotOneOfNamesTheFieldAndListsTheSetAsTheContractDoes(t *testing.T) {
	for _, tc := range []struct {
		field   string
		allowed []string
		want    string
	}{
		// The contract's own message (addendum §4), which the helper must reproduce.
		{"on_refund", []string{"revoke", "keep"}, "on_refund must be revoke or keep"},
		{"provider", []string{"stripe"}, "provider must be stripe"},
		{"fingerprint_match", []string{"none", "any", "most", "all"}, "fingerprint_match must be none, any, most or all"},
		{"events[2]", []string{`an event type or a prefix of one ending in "."`}, `events[2] must be an event type or a prefix of one ending in "."`},
	} {
		err := NotOneOf(tc.field, tc.allowed...)
		if err.Code != codes.InvalidArgument || err.Message != tc.want {
			t.Errorf("NotOneOf(%q, %q) = %v %q, want InvalidArgument %q", tc.field, tc.allowed, err.Code, err.Message, tc.want)
		}
	}
}
