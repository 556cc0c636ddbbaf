package input

import (
	"errors"
	"regexp"
	"strings"
	"time"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/signing"
	"google.golang.org/protobuf/types/known/structpb"
)

// OptionalTime is the one reader of an optional timestamp in a JSON body (a license's
// expires_at or issued_at, an API key's expires_at): an RFC 3339 string, or null or
// absent (a nil result). Anything else is a 400 naming the field.
//
// The result is in UTC at whole seconds: expiries are compared in seconds, and a
// whole-second value prints the same in every response, export and signed payload
// (signing.FormatTime), so a value that cannot be signed is refused here, at the input.
func OptionalTime(field string, v *structpb.Value) (*time.Time, error) {
	switch k := v.GetKind().(type) {
	case nil, *structpb.Value_NullValue:
		return nil, nil
	case *structpb.Value_StringValue:
		t, err := ParseRFC3339(strings.TrimSpace(k.StringValue))
		if err != nil {
			break
		}
		t = t.UTC().Truncate(time.Second)
		if _, err := signing.FormatTime(t); err != nil {
			return nil, apierr.Invalid("%s must be between years 0001 and 9999", field)
		}
		return &t, nil
	}
	return nil, apierr.Invalid("%s must be an ISO 8601 timestamp (e.g. 2027-01-31T00:00:00Z) or null", field)
}

// rfc3339 is RFC 3339's date-time (§5.6): full-date "T" full-time, "T" and "Z" in either
// case, a fraction after a period (any number of digits), an offset "Z" or ±hh:mm.
var rfc3339 = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-](\d{2}):(\d{2}))$`)

var errNotRFC3339 = errors.New("not an RFC 3339 date-time")

// ParseRFC3339 is the one parser of a timestamp a client sends (a body's expires_at or
// issued_at through OptionalTime, the event log's since and until): RFC 3339 exactly, so
// "t" and "z" are taken, and an offset beyond ±23:59 or a comma before the fraction (which
// time.Parse accepts) is refused. A leap second (:60) is refused too: Go has no time for it.
func ParseRFC3339(s string) (time.Time, error) {
	m := rfc3339.FindStringSubmatch(s)
	if m == nil || (m[3] != "" && (m[3] > "23" || m[4] > "59")) {
		return time.Time{}, errNotRFC3339
	}
	// time.Parse checks the calendar and the clock's ranges; it wants "T" and "Z".
	b := []byte(s)
	b[10] = 'T'
	if m[2] == "z" {
		b[len(b)-1] = 'Z'
	}
	return time.Parse(time.RFC3339Nano, string(b))
}
