package events

import (
	"fmt"
	"slices"

	eventsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/events/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
)

// PersonalFields are the fields of an event's data that can hold a person's data, by
// event type: issued_to (a licensee's name or email, as the vendor typed it) and
// instance_id (a machine's id, often its hostname). Redact replaces them with null
// (docs/privacy.md). Every other field of every type is the vendor's own (keys, product
// ids, tiers, limits, release and delivery ids) or Keyhouse's; notes, lease components,
// buyer emails and Stripe customer ids are in no event.
var PersonalFields = map[string][]string{
	TypeLicenseIssued:     {"issued_to"},
	TypeSeatActivated:     {"instance_id"},
	TypeSeatDeactivated:   {"instance_id"},
	TypeSeatTokenReissued: {"instance_id"},
}

// PersonalTypes are the types that have PersonalFields, sorted.
func PersonalTypes() []string {
	types := make([]string, 0, len(PersonalFields))
	for t := range PersonalFields {
		types = append(types, t)
	}
	slices.Sort(types)
	return types
}

// Redact returns body, an event's §11 JSON as the log stores it and a webhook delivers it,
// with its PersonalFields null, and whether that changed it: false for an event redacted
// before, or of a type without personal data, which comes back unchanged. Everything else
// (id, type, created_at, actor, the other data fields) is printed as it was.
func Redact(body []byte) ([]byte, bool, error) {
	rec := &eventsv1.EventRecord{}
	if err := protojson.Unmarshal(body, rec); err != nil {
		return nil, false, fmt.Errorf("events: redact: %w", err)
	}
	changed := false
	for _, f := range PersonalFields[rec.GetType()] {
		v, ok := rec.GetData().GetFields()[f]
		if !ok {
			continue
		}
		if _, null := v.GetKind().(*structpb.Value_NullValue); null {
			continue
		}
		rec.Data.Fields[f] = structpb.NewNullValue()
		changed = true
	}
	if !changed {
		return body, false, nil
	}
	out, err := RecordJSON(rec)
	return out, true, err
}
