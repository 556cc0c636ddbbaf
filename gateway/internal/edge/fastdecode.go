package edge

import (
	"github.com/keyhouse/keyhouse/gateway/internal/flatjson"
	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	releasesv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/releases/v1"
	"google.golang.org/protobuf/proto"
)

// decodeHotRequest decodes the bodies of verify-license, check-update and leases without the
// generic path (encoding/json's syntax pass, the string-number pass and protojson), when
// the body is the plain case every client sends: one flat JSON object of known field
// names (each at most once) with string values of printable ASCII and no escapes. For
// such a body the generic path can only set those fields, so the result, and the input
// policy's answer (checkStrings, shared), are the same. done is false for anything else,
// which the generic path decodes and words as it always has (TestHotRequestsDecodeAsGeneric).
func decodeHotRequest(body []byte, v any) (done bool, err error) {
	var set func(name, value []byte) bool
	switch m := v.(type) {
	case *licensingv1.VerifyLicenseRequest:
		m.Key = nil
		set = func(name, value []byte) bool {
			if string(name) != "key" || m.Key != nil {
				return false
			}
			m.Key = proto.String(string(value))
			return true
		}
	case *releasesv1.CheckUpdateRequest:
		m.Key, m.ProductId, m.Channel, m.Platform, m.CurrentVersion = "", "", "", "", ""
		var seen [5]bool
		set = func(name, value []byte) bool {
			var field *string
			var i int
			switch string(name) {
			case "key":
				field, i = &m.Key, 0
			case "product_id", "productId":
				field, i = &m.ProductId, 1
			case "channel":
				field, i = &m.Channel, 2
			case "platform":
				field, i = &m.Platform, 3
			case "current_version", "currentVersion":
				field, i = &m.CurrentVersion, 4
			default:
				return false // unknown fields: the generic path discards them
			}
			if seen[i] {
				return false // protojson refuses a field named twice, in its words
			}
			seen[i] = true
			*field = string(value)
			return true
		}
	case *activationsv1.CreateLeaseRequest:
		set = leaseRequestSetter(m) // leasejson.go
	default:
		return false, nil
	}
	if !scanFlatStringObject(body, set) {
		if m, ok := v.(proto.Message); ok {
			proto.Reset(m) // the generic path starts from an empty message
		}
		return false, nil
	}
	return true, checkStrings(v.(proto.Message).ProtoReflect())
}

// scanFlatStringObject calls set for each member of body when body is exactly one JSON
// object whose names and values are strings of printable ASCII without `"` or `\`; it
// returns false at the first thing outside that (or when set refuses a member).
func scanFlatStringObject(body []byte, set func(name, value []byte) bool) bool {
	i := flatjson.SkipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return false
	}
	i = flatjson.SkipSpace(body, i+1)
	if i < len(body) && body[i] == '}' {
		return flatjson.SkipSpace(body, i+1) == len(body)
	}
	for {
		name, next, ok := flatjson.PlainString(body, i)
		if !ok {
			return false
		}
		i = flatjson.SkipSpace(body, next)
		if i >= len(body) || body[i] != ':' {
			return false
		}
		value, next, ok := flatjson.PlainString(body, flatjson.SkipSpace(body, i+1))
		if !ok || !set(name, value) {
			return false
		}
		i = flatjson.SkipSpace(body, next)
		if i >= len(body) {
			return false
		}
		switch body[i] {
		case ',':
			i = flatjson.SkipSpace(body, i+1)
		case '}':
			return flatjson.SkipSpace(body, i+1) == len(body)
		default:
			return false
		}
	}
}
