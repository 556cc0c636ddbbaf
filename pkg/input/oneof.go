package input

import (
	"strings"

	"github.com/keyhouse/keyhouse/pkg/apierr"
)

// NotOneOf is the one 400 of a value outside a fixed set (a status filter, a plan, a
// policy's fingerprint_match…): "<field> must be a, b or c". It is the wording the
// contract gives its own such refusals (addendum: `on_refund must be revoke or keep`), so
// every route refuses an out-of-set value alike:
//
//   - allowed is listed in the order the API reference lists the values, bare (not
//     quoted), the last joined with "or"; a set too large to list is one phrase that
//     describes it (`an event type or a prefix of one ending in "."`);
//   - the refused value is not echoed: it is whatever the caller sent, a secret pasted
//     into the wrong field included, and the field's name already says which one it was.
//
// Two contract messages keep their own words, byte for byte: `scope must be "full" or
// "read"` (quoted) and `Unknown limit key: <key>` (echoed).
func NotOneOf(field string, allowed ...string) *apierr.Error {
	return apierr.Invalid("%s must be %s", field, choices(allowed))
}

// choices joins values as a sentence does: "a", "a or b", "a, b or c".
func choices(values []string) string {
	n := len(values)
	if n < 2 {
		return strings.Join(values, "")
	}
	return strings.Join(values[:n-1], ", ") + " or " + values[n-1]
}
