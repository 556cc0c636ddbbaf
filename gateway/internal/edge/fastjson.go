package edge

import (
	"math"
	"math/bits"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	releasesv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/releases/v1"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// appendHotAnswer writes the answers of the hot public routes (verify-license,
// validate-license, check-update) without protojson's reflection: the profile of the
// uniform key spread had protojson plus the compaction at a tenth of the gateway's CPU.
// The bytes are the ones jsonMarshaler's generic path writes (TestHotAnswersMatchProtojson
// compares them over generated messages). ok is false for any other message and for
// anything protojson would refuse or word in its own way (invalid UTF-8, a NaN in limits,
// a timestamp out of range, an unset Value): those take the generic path.
func appendHotAnswer(b []byte, v any) (_ []byte, ok bool) {
	switch m := v.(type) {
	case *licensingv1.VerifyLicenseResponse:
		return appendVerifyLicenseResponse(b, m)
	case *activationsv1.ValidateLicenseResponse:
		if m == nil {
			return b, false
		}
		b = append(b, `{"valid":`...)
		return append(strconv.AppendBool(b, m.Valid), '}'), true
	case *releasesv1.CheckUpdateResponse:
		return appendCheckUpdateResponse(b, m)
	case *activationsv1.CreateLeaseResponse:
		return appendCreateLeaseResponse(b, m) // leasejson.go
	}
	return b, false
}

func appendVerifyLicenseResponse(b []byte, m *licensingv1.VerifyLicenseResponse) (_ []byte, ok bool) {
	if m == nil {
		return b, false
	}
	b = append(b, `{"valid":`...)
	b = strconv.AppendBool(b, m.Valid)
	b = append(b, `,"tier":`...)
	if b, ok = appendJSONString(b, m.Tier); !ok {
		return b, false
	}
	b = append(b, `,"product_id":`...)
	if b, ok = appendJSONString(b, m.ProductId); !ok {
		return b, false
	}
	b = append(b, `,"limits":`...)
	if m.Limits == nil {
		b = append(b, "null"...)
	} else if b, ok = appendStruct(b, m.Limits); !ok {
		return b, false
	}
	b = append(b, `,"expires_at":`...)
	if b, ok = appendTimestamp(b, m.ExpiresAt); !ok {
		return b, false
	}
	b = append(b, `,"issued_at":`...)
	if b, ok = appendTimestamp(b, m.IssuedAt); !ok {
		return b, false
	}
	b = append(b, `,"status":`...)
	if b, ok = appendJSONString(b, m.Status); !ok {
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
		if b, ok = appendJSONString(b, f.value); !ok {
			return b, false
		}
	}
	b = append(b, `,"issued_at":`...)
	if b, ok = appendTimestamp(b, r.IssuedAt); !ok {
		return b, false
	}
	return append(b, "}}"...), true
}

// appendJSONString escapes as protojson does: `"` and `\`, the control characters below
// U+0020 (\b \f \n \r \t by name, the others as \u00xx in lower-case hex), everything
// else as is (no HTML escaping). Invalid UTF-8 is protojson's error, so not ok.
func appendJSONString(b []byte, s string) (_ []byte, ok bool) {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, n := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && n == 1 {
				return b, false
			}
			i += n
			continue
		}
		if c >= ' ' && c != '"' && c != '\\' {
			i++
			continue
		}
		b = append(b, s[start:i]...)
		b = append(b, '\\')
		switch c {
		case '"', '\\':
			b = append(b, c)
		case '\b':
			b = append(b, 'b')
		case '\f':
			b = append(b, 'f')
		case '\n':
			b = append(b, 'n')
		case '\r':
			b = append(b, 'r')
		case '\t':
			b = append(b, 't')
		default:
			b = append(b, 'u')
			b = append(b, "0000"[1+(bits.Len32(uint32(c))-1)/4:]...)
			b = strconv.AppendUint(b, uint64(c), 16)
		}
		i++
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"'), true
}

// The range protojson accepts for a google.protobuf.Timestamp: 0001-01-01 to 9999-12-31.
const (
	minTimestampSeconds = -62135596800
	maxTimestampSeconds = 253402300799
)

// appendTimestamp writes RFC 3339 in UTC with 0, 3, 6 or 9 fraction digits, as protojson
// does; null when unset.
func appendTimestamp(b []byte, ts *timestamppb.Timestamp) (_ []byte, ok bool) {
	if ts == nil {
		return append(b, "null"...), true
	}
	secs, nanos := ts.GetSeconds(), int64(ts.GetNanos())
	if secs < minTimestampSeconds || secs > maxTimestampSeconds || nanos < 0 || nanos > 999999999 {
		return b, false
	}
	b = append(b, '"')
	start := len(b)
	b = time.Unix(secs, nanos).UTC().AppendFormat(b, "2006-01-02T15:04:05.000000000")
	x := string(b[start:]) // short, and only to trim as protojson trims
	x = strings.TrimSuffix(x, "000")
	x = strings.TrimSuffix(x, "000")
	x = strings.TrimSuffix(x, ".000")
	b = append(b[:start], x...)
	return append(b, `Z"`...), true
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
		if b, ok = appendJSONString(b, k); !ok {
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
		return appendJSONString(b, k.StringValue)
	case *structpb.Value_NumberValue:
		return appendNumber(b, k.NumberValue)
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

// appendNumber formats a double as protojson does (encoding/json's rules: 'f' unless the
// magnitude is below 1e-6 or from 1e21, then 'e' with a two-digit minimum exponent cut
// to one). NaN and the infinities are protojson's error in a Value.
func appendNumber(b []byte, n float64) (_ []byte, ok bool) {
	if math.IsNaN(n) || math.IsInf(n, 0) {
		return b, false
	}
	format := byte('f')
	if abs := math.Abs(n); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, n, format, -1, 64)
	if format == 'e' {
		if l := len(b); l >= 4 && b[l-4] == 'e' && b[l-3] == '-' && b[l-2] == '0' {
			b[l-2] = b[l-1]
			b = b[:l-1]
		}
	}
	return b, true
}
