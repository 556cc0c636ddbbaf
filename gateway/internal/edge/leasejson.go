package edge

import (
	"github.com/keyhouse/keyhouse/pkg/protojsonappend"
	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	"google.golang.org/protobuf/proto"
)

// The lease route's answer and request on the fast paths of verify-license's
// (appendHotAnswer, decodeHotRequest): every lease and floating renewal goes through
// them. The bytes and the decoded requests are the generic path's
// (TestLeaseAnswersMatchProtojson, TestLeaseRequestsDecodeAsGeneric).

// appendCreateLeaseResponse writes POST /v1/leases's answer: lease, expires_at,
// renew_after, and token only when set (a reinstall's).
func appendCreateLeaseResponse(b []byte, m *activationsv1.CreateLeaseResponse) (_ []byte, ok bool) {
	if m == nil {
		return b, false
	}
	b = append(b, `{"lease":`...)
	if b, ok = protojsonappend.String(b, m.Lease); !ok {
		return b, false
	}
	b = append(b, `,"expires_at":`...)
	if b, ok = protojsonappend.TimestampOrNull(b, m.ExpiresAt); !ok {
		return b, false
	}
	b = append(b, `,"renew_after":`...)
	if b, ok = protojsonappend.TimestampOrNull(b, m.RenewAfter); !ok {
		return b, false
	}
	if m.Token != nil {
		b = append(b, `,"token":`...)
		if b, ok = protojsonappend.String(b, *m.Token); !ok {
			return b, false
		}
	}
	return append(b, '}'), true
}

// leaseRequestSetter sets the members of a plain lease request body (key, token,
// instance_id, nonce: each at most once) on m, emptied first; components, or any other
// member, leave the body to the generic path.
func leaseRequestSetter(m *activationsv1.CreateLeaseRequest) func(name, value []byte) bool {
	m.Key, m.Token, m.InstanceId, m.Components, m.Nonce = "", "", "", nil, nil
	var seen [4]bool
	return func(name, value []byte) bool {
		var field *string
		var i int
		switch string(name) {
		case "key":
			field, i = &m.Key, 0
		case "token":
			field, i = &m.Token, 1
		case "instance_id", "instanceId":
			field, i = &m.InstanceId, 2
		case "nonce":
			if seen[3] {
				return false
			}
			seen[3] = true
			m.Nonce = proto.String(string(value))
			return true
		default:
			return false
		}
		if seen[i] {
			return false // protojson refuses a field named twice, in its words
		}
		seen[i] = true
		*field = string(value)
		return true
	}
}
