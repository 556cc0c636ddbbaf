package edge

import (
	"sort"
	"strconv"

	"github.com/keyhouse/keyhouse/pkg/protojsonappend"
	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	releasesv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/releases/v1"
	"google.golang.org/protobuf/types/known/structpb"
)

// appendHotAnswer writes the answers of the hot public routes (verify-license,
// validate-license, check-update, leases, activate- and deactivate-license) without
// protojson's reflection: the profile of the uniform key spread had protojson plus the
// compaction at a tenth of the gateway's CPU.
// The bytes are the ones jsonMarshaler's generic path writes (TestHotAnswersMatchProtojson
// compares them over generated messages). ok is false for any other message and for
// anything protojson would refuse or word in its own way (invalid UTF-8, a NaN in limits,
// a timestamp out of range, an unset Value): those take the generic path.
func appendHotAnswer(b []byte, v any) (_ []byte, ok bool) {
	switch m := v.(type) {
	case *licensingv1.VerifyLicenseResponse:
		return appendVerifyLicenseResponse(b, m)
	case *activationsv1.ValidateLicenseResponse:
		return appendBoolAnswer(b, m != nil, `{"valid":`, m.GetValid())
	case *releasesv1.CheckUpdateResponse:
		return appendCheckUpdateResponse(b, m)
	case *activationsv1.CreateLeaseResponse:
		return appendCreateLeaseResponse(b, m) // leasejson.go
	case *activationsv1.ActivateLicenseResponse:
		return appendActivateLicenseResponse(b, m)
	case *activationsv1.DeactivateLicenseResponse:
		return appendBoolAnswer(b, m != nil, `{"deactivated":`, m.GetDeactivated())
	}
	return b, false
}

// appendBoolAnswer writes an answer whose one member is a bool (open is `{"name":`); a
// nil message (not set) is left to the generic path.
func appendBoolAnswer(b []byte, set bool, open string, v bool) (_ []byte, ok bool) {
	if !set {
		return b, false
	}
	b = append(b, open...)
	return append(strconv.AppendBool(b, v), '}'), true
}

// appendActivateLicenseResponse writes activate-license's answer: token and
// alreadyActivated only when set (optional fields, absent rather than null).
func appendActivateLicenseResponse(b []byte, m *activationsv1.ActivateLicenseResponse) (_ []byte, ok bool) {
	if m == nil {
		return b, false
	}
	b = append(b, `{"activated":`...)
	b = strconv.AppendBool(b, m.Activated)
	if m.Token != nil {
		b = append(b, `,"token":`...)
		if b, ok = protojsonappend.String(b, *m.Token); !ok {
			return b, false
		}
	}
	if m.AlreadyActivated != nil {
		b = append(b, `,"alreadyActivated":`...)
		b = strconv.AppendBool(b, *m.AlreadyActivated)
	}
	return append(b, '}'), true
}

func appendVerifyLicenseResponse(b []byte, m *licensingv1.VerifyLicenseResponse) (_ []byte, ok bool) {
	if m == nil {
		return b, false
	}
	b = append(b, `{"valid":`...)
	b = strconv.AppendBool(b, m.Valid)
	b = append(b, `,"tier":`...)
	if b, ok = protojsonappend.String(b, m.Tier); !ok {
		return b, false
	}
	b = append(b, `,"product_id":`...)
	if b, ok = protojsonappend.String(b, m.ProductId); !ok {
		return b, false
	}
	b = append(b, `,"limits":`...)
	if m.Limits == nil {
		b = append(b, "null"...)
	} else if b, ok = appendStruct(b, m.Limits); !ok {
		return b, false
	}
	b = append(b, `,"expires_at":`...)
	if b, ok = protojsonappend.TimestampOrNull(b, m.ExpiresAt); !ok {
		return b, false
	}
	b = append(b, `,"issued_at":`...)
	if b, ok = protojsonappend.TimestampOrNull(b, m.IssuedAt); !ok {
		return b, false
	}
	b = append(b, `,"status":`...)
	if b, ok = protojsonappend.String(b, m.Status); !ok {
		return b, false
	}
	return append(b, '}'), true
}

func appendCheckUpdateResponse(b []byte, m *releasesv1.CheckUpdateResponse) (_ []byte, ok bool) {
	if m == nil {
		return b, false
	}
	b = append(b, `{"update_available":`...)
	b = strconv.AppendBool(b, m.UpdateAvailable)
	b = append(b, `,"release":`...)
	r := m.Release
	if r == nil {
		return append(b, "null}"...), true
	}
	for _, f := range [...]struct {
		name  string
		value string
	}{
		{`{"product_id":`, r.ProductId},
		{`,"version":`, r.Version},
		{`,"channel":`, r.Channel},
		{`,"platform":`, r.Platform},
		{`,"artifact_url":`, r.ArtifactUrl},
		{`,"checksum":`, r.Checksum},
		{`,"release_notes":`, r.ReleaseNotes},
		{`,"signature":`, r.Signature},
	} {
		b = append(b, f.name...)
		if b, ok = protojsonappend.String(b, f.value); !ok {
			return b, false
		}
	}
	b = append(b, `,"issued_at":`...)
	if b, ok = protojsonappend.TimestampOrNull(b, r.IssuedAt); !ok {
		return b, false
	}
	return append(b, "}}"...), true
}

// appendStruct writes a google.protobuf.Struct: its keys sorted, as protojson sorts a
// map's keys.
func appendStruct(b []byte, s *structpb.Struct) (_ []byte, ok bool) {
	if s == nil {
		return b, false
	}
	keys := make([]string, 0, len(s.Fields))
	for k := range s.Fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		if b, ok = protojsonappend.String(b, k); !ok {
			return b, false
		}
		b = append(b, ':')
		if b, ok = appendValue(b, s.Fields[k]); !ok {
			return b, false
		}
	}
	return append(b, '}'), true
}

func appendValue(b []byte, v *structpb.Value) (_ []byte, ok bool) {
	if v == nil {
		return b, false
	}
	switch k := v.Kind.(type) {
	case *structpb.Value_NullValue:
		return append(b, "null"...), true
	case *structpb.Value_BoolValue:
		return strconv.AppendBool(b, k.BoolValue), true
	case *structpb.Value_StringValue:
		return protojsonappend.String(b, k.StringValue)
	case *structpb.Value_NumberValue:
		return protojsonappend.Number(b, k.NumberValue)
	case *structpb.Value_StructValue:
		return appendStruct(b, k.StructValue)
	case *structpb.Value_ListValue:
		if k.ListValue == nil {
			return b, false
		}
		b = append(b, '[')
		for i, item := range k.ListValue.Values {
			if i > 0 {
				b = append(b, ',')
			}
			if b, ok = appendValue(b, item); !ok {
				return b, false
			}
		}
		return append(b, ']'), true
	}
	return b, false // no kind set: protojson's error
}
