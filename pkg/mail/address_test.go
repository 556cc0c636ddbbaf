package mail_test

import (
	"strings"
	"testing"

	"github.com/keyhouse/keyhouse/pkg/mail"
)

func TestValidAddressHoldsTheSMTPLengthLimit(t *testing.T) {
	t.Parallel()
	at254 := strings.Repeat("x", mail.MaxAddressLen-len("@example.com")) + "@example.com"
	for s, want := range map[string]bool{
		"buyer@example.com":                 true,
		at254:                               true,
		"x" + at254:                         false,
		strings.Repeat("x", 800_000) + "@a": false,
		"Buyer <buyer@example.com>":         false,
		"a@example.com, b@example.com":      false,
	} {
		if got := mail.ValidAddress(s); got != want {
			t.Errorf("ValidAddress(%.40q…) = %v, want %v", s, got, want)
		}
	}
}
