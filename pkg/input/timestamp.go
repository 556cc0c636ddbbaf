package input

import (
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
		t, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(k.StringValue))
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
