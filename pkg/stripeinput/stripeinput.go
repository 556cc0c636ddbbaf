// Package stripeinput is the one set of rules for what a signed Stripe event may carry
// into Keyhouse, shared by the two endpoints that receive them (billing's
// /v1/webhooks/billing and the storefront's callback). A valid signature says who sent
// the bytes, not that they are sane: a tenant signs its own storefront events, so they
// are held to the caps below before anything is stored or published.
//
// The signature itself is checked by stripe-go's webhook package in each service (it
// refuses a stale timestamp); this package adds what stripe-go does not check.
package stripeinput

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Tolerance is how far a Stripe-Signature timestamp may be from now, either way, and how
// far in the future an event's created may be (clock skew).
const Tolerance = 300 * time.Second

// MaxIDLen caps every Stripe id (event, checkout session, customer, subscription,
// payment link) and tenant reference read from an event. Stripe's ids are short ASCII
// tokens, far inside it.
const MaxIDLen = 255

// Error is a signed event refused, and why, naming the field ("data.object.customer must
// be …"). Callers answer 400 "Invalid payload: " + Reason.
type Error struct{ Reason string }

func (e *Error) Error() string { return "invalid payload: " + e.Reason }

// Refuse makes an *Error.
func Refuse(format string, args ...any) error {
	return &Error{Reason: fmt.Sprintf(format, args...)}
}

// FutureDated reports whether the t= timestamp of a Stripe-Signature header that already
// verified lies more than Tolerance after now (or is missing). stripe-go refuses only a
// stale one; a future one would make a captured request replayable for as long as it is
// ahead. Callers answer it as a bad signature.
func FutureDated(sigHeader string, now time.Time) bool {
	for _, part := range strings.Split(sigHeader, ",") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(part), "t="); ok {
			sec, err := strconv.ParseInt(v, 10, 64)
			return err != nil || time.Unix(sec, 0).Sub(now) > Tolerance
		}
	}
	return true
}

// CheckEnvelope holds an event's payload and envelope to the rules: valid UTF-8 (JSON
// decoding would silently turn bad bytes into U+FFFD), an id, and a created time that is
// not in the future.
func CheckEnvelope(payload []byte, id string, created int64, now time.Time) error {
	if !utf8.Valid(payload) {
		return Refuse("not valid UTF-8")
	}
	if err := CheckID("id", id, true); err != nil {
		return err
	}
	return CheckCreated("created", created, now)
}

// CheckCreated refuses a Unix time more than Tolerance after now.
func CheckCreated(name string, unix int64, now time.Time) error {
	if time.Unix(unix, 0).Sub(now) > Tolerance {
		return Refuse("%s is in the future", name)
	}
	return nil
}

// CheckID holds a Stripe id to its shape: at most MaxIDLen printable ASCII characters
// without spaces; "" only when not required.
func CheckID(name, v string, required bool) error {
	switch {
	case v == "" && required:
		return Refuse("%s is required", name)
	case len(v) > MaxIDLen || !PrintableASCII(v) || strings.Contains(v, " "):
		return Refuse("%s must be at most %d printable ASCII characters without spaces", name, MaxIDLen)
	}
	return nil
}

// PrintableASCII reports whether s holds only bytes 0x20-0x7e.
func PrintableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
