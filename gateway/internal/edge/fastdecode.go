package edge

import (
	"github.com/keyhouse/keyhouse/gateway/internal/flatjson"
	"github.com/keyhouse/keyhouse/pkg/input"
	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	releasesv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/releases/v1"
	"google.golang.org/protobuf/proto"
)

// decodeHotRequest decodes the bodies of verify-license, check-update, leases, and
// activate- and deactivate-license without the generic path (encoding/json's syntax
// pass, the string-number pass and protojson), when the body is the plain case every
// client sends: one flat JSON object of known field names (each at most once) with string
// values of printable ASCII and no escapes. For such a body the generic path can only set
// those fields, so the result, and the input policy's answer (input.CheckMessage, shared), are
// the same. done is false for anything else, which the generic path decodes and words as
// it always has (TestHotRequestsDecodeAsGeneric).
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
		set = stringFieldsSetter(checkUpdateFields, &m.Key, &m.ProductId, &m.Channel, &m.Platform, &m.CurrentVersion)
	case *activationsv1.ActivateLicenseRequest:
		m.Key, m.InstanceId = "", ""
		set = stringFieldsSetter(activateFields, &m.Key, &m.InstanceId)
	case *activationsv1.DeactivateLicenseRequest:
		m.Key, m.Token = "", ""
		set = stringFieldsSetter(deactivateFields, &m.Key, &m.Token)
	case *activationsv1.CreateLeaseRequest:
		set = leaseRequestSetter(m) // leasejson.go
	default:
		return false, nil
	}
	if !flatjson.Object(body, set) {
		if m, ok := v.(proto.Message); ok {
			proto.Reset(m) // the generic path starts from an empty message
		}
		return false, nil
	}
	return true, input.CheckMessage(v.(proto.Message).ProtoReflect())
}

// The string fields of the hot requests decoded by name (stringFieldsSetter): each name
// protojson accepts, the field's proto name and its JSON name, to the field's index.
var (
	checkUpdateFields = map[string]int{"key": 0, "product_id": 1, "productId": 1, "channel": 2,
		"platform": 3, "current_version": 4, "currentVersion": 4}
	activateFields   = map[string]int{"key": 0, "instance_id": 1, "instanceId": 1}
	deactivateFields = map[string]int{"key": 0, "token": 1}
)

// stringFieldsSetter sets fields[names[name]] to each member's value, each field at most
// once; a field named twice (by either of its names) or an unknown name is left to the
// generic path, which refuses the first in protojson's words and discards the second.
func stringFieldsSetter(names map[string]int, fields ...*string) func(name, value []byte) bool {
	var seen uint32
	return func(name, value []byte) bool {
		i, ok := names[string(name)]
		if !ok || seen&(1<<i) != 0 {
			return false
		}
		seen |= 1 << i
		*fields[i] = string(value)
		return true
	}
}
