package edge

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/keyhouse/keyhouse/pkg/protojsonappend"
	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	releasesv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/releases/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// sampleStrings are the strings the hot answers are checked with: escapes, every control
// character class, HTML characters protojson leaves alone, multi-byte and astral runes,
// U+2028, a literal U+FFFD and invalid UTF-8 (protojson's error: the generic path).
var sampleStrings = []string{
	"", "pro", "app-1", `quote " and \ backslash`, "line\nbreak\ttab\rcr\bbs\fff",
	"\x00\x01\x1f\x7f", "<script>&amp;</script>", "héllo wörld", "日本語", "emoji 🎉🔑",
	"\u2028\u2029", "\ufffd", "bad \xff utf8", "\xc3", strings.Repeat("long ", 200),
}

var sampleNumbers = []float64{
	0, math.Copysign(0, -1), 1, -1, 5, 0.5, 1.5e-7, 1e-6, 9.99e-7, 123456789012, 1e20, 1e21,
	-1e21, 1.7976931348623157e308, 5e-324, 9007199254740993, 0.1 + 0.2, 1e-10, -2.5e-300,
	math.NaN(), math.Inf(1), math.Inf(-1),
}

var sampleTimestamps = []*timestamppb.Timestamp{
	nil, {}, {Seconds: 1764000000}, {Seconds: 1764000000, Nanos: 1}, {Seconds: 1764000000, Nanos: 1000},
	{Seconds: 1764000000, Nanos: 1000000}, {Seconds: 1764000000, Nanos: 120000000},
	{Seconds: 1764000000, Nanos: 999999999}, {Seconds: -62135596800}, {Seconds: 253402300799, Nanos: 999999999},
	{Seconds: -62135596801}, {Seconds: 253402300800}, {Seconds: 1, Nanos: -1}, {Seconds: 1, Nanos: 1000000000},
	{Seconds: -1, Nanos: 5},
}

func randomValue(r *rand.Rand, depth int) *structpb.Value {
	kind := r.IntN(8)
	if depth > 2 && kind >= 4 {
		kind = r.IntN(4)
	}
	switch kind {
	case 0:
		return structpb.NewNullValue()
	case 1:
		return structpb.NewBoolValue(r.IntN(2) == 0)
	case 2:
		return structpb.NewStringValue(sampleStrings[r.IntN(len(sampleStrings))])
	case 3:
		if r.IntN(2) == 0 {
			return structpb.NewNumberValue(sampleNumbers[r.IntN(len(sampleNumbers))])
		}
		return structpb.NewNumberValue(math.Float64frombits(r.Uint64()))
	case 4:
		return structpb.NewStructValue(randomStruct(r, depth+1))
	case 5:
		list := &structpb.ListValue{}
		for range r.IntN(4) {
			list.Values = append(list.Values, randomValue(r, depth+1))
		}
		return structpb.NewListValue(list)
	case 6:
		return &structpb.Value{} // no kind: protojson refuses it
	default:
		return structpb.NewNumberValue(float64(r.Int64N(1<<53)) - 1<<52)
	}
}

func randomStruct(r *rand.Rand, depth int) *structpb.Struct {
	s := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for range r.IntN(6) {
		s.Fields[sampleStrings[r.IntN(len(sampleStrings))]+string(rune('a'+r.IntN(26)))] = randomValue(r, depth)
	}
	return s
}

func randomString(r *rand.Rand) string {
	if r.IntN(3) > 0 {
		return sampleStrings[r.IntN(len(sampleStrings))]
	}
	b := make([]byte, r.IntN(24))
	for i := range b {
		b[i] = byte(r.IntN(256))
	}
	if r.IntN(2) == 0 {
		return strings.ToValidUTF8(string(b), "?")
	}
	return string(b)
}

func randomTimestamp(r *rand.Rand) *timestamppb.Timestamp {
	if r.IntN(2) == 0 {
		return sampleTimestamps[r.IntN(len(sampleTimestamps))]
	}
	return &timestamppb.Timestamp{Seconds: r.Int64N(protojsonappend.MaxTimestampSeconds-protojsonappend.MinTimestampSeconds) + protojsonappend.MinTimestampSeconds, Nanos: r.Int32N(1e9)}
}

func randomHotAnswer(r *rand.Rand) proto.Message {
	switch r.IntN(5) {
	case 0:
		m := &licensingv1.VerifyLicenseResponse{
			Valid: r.IntN(2) == 0, Tier: randomString(r), ProductId: randomString(r),
			ExpiresAt: randomTimestamp(r), IssuedAt: randomTimestamp(r), Status: randomString(r),
		}
		if r.IntN(4) > 0 {
			m.Limits = randomStruct(r, 0)
		}
		return m
	case 1:
		return &activationsv1.ValidateLicenseResponse{Valid: r.IntN(2) == 0}
	case 2:
		m := &activationsv1.ActivateLicenseResponse{Activated: r.IntN(2) == 0}
		if r.IntN(2) == 0 {
			m.Token = proto.String(randomString(r))
		}
		if r.IntN(2) == 0 {
			m.AlreadyActivated = proto.Bool(r.IntN(2) == 0)
		}
		return m
	case 3:
		return &activationsv1.DeactivateLicenseResponse{Deactivated: r.IntN(2) == 0}
	default:
		m := &releasesv1.CheckUpdateResponse{UpdateAvailable: r.IntN(2) == 0}
		if r.IntN(4) > 0 {
			m.Release = &releasesv1.Manifest{
				ProductId: randomString(r), Version: randomString(r), Channel: randomString(r),
				Platform: randomString(r), ArtifactUrl: randomString(r), Checksum: randomString(r),
				ReleaseNotes: randomString(r), Signature: randomString(r), IssuedAt: randomTimestamp(r),
			}
		}
		return m
	}
}

// The hot answers' encoder writes exactly protojson's bytes (compacted, as every answer
// is), or leaves the message to the generic path when protojson would refuse it: no
// answer byte of these routes may change.
func TestHotAnswersMatchProtojson(t *testing.T) {
	m := newJSONMarshaler()
	generic := protoMarshaler(m)
	r := rand.New(rand.NewPCG(27, 2026))
	messages := []proto.Message{
		&licensingv1.VerifyLicenseResponse{}, &activationsv1.ValidateLicenseResponse{},
		&releasesv1.CheckUpdateResponse{}, &releasesv1.CheckUpdateResponse{Release: &releasesv1.Manifest{}},
		&licensingv1.VerifyLicenseResponse{Limits: &structpb.Struct{}},
		&activationsv1.ActivateLicenseResponse{}, &activationsv1.DeactivateLicenseResponse{},
		&activationsv1.ActivateLicenseResponse{Activated: true, Token: proto.String("")},
	}
	for _, n := range sampleNumbers {
		messages = append(messages, &licensingv1.VerifyLicenseResponse{Limits: &structpb.Struct{Fields: map[string]*structpb.Value{"n": structpb.NewNumberValue(n)}}})
	}
	for _, s := range sampleStrings {
		messages = append(messages, &licensingv1.VerifyLicenseResponse{Tier: s, Limits: &structpb.Struct{Fields: map[string]*structpb.Value{s: structpb.NewStringValue(s)}}})
	}
	for _, ts := range sampleTimestamps {
		messages = append(messages, &licensingv1.VerifyLicenseResponse{ExpiresAt: ts})
	}
	for range 20000 {
		messages = append(messages, randomHotAnswer(r))
	}
	fast, refused := 0, 0
	for _, msg := range messages {
		want, wantErr := generic.marshalGeneric(msg)
		got, ok := appendHotAnswer(nil, msg)
		if !ok {
			// Left to the generic path, which answers what it always answered.
			refused++
			continue
		}
		fast++
		if wantErr != nil {
			t.Fatalf("protojson refuses %v (%v) but the hot encoder wrote %s", msg, wantErr, got)
		}
		if string(got) != string(want) {
			t.Fatalf("hot encoder wrote\n%s\nprotojson\n%s\nfor %v", got, want, msg)
		}
		viaMarshal, err := m.Marshal(msg)
		if err != nil || string(viaMarshal) != string(want) {
			t.Fatalf("Marshal wrote %s, %v; want %s", viaMarshal, err, want)
		}
	}
	// Both paths must be exercised, or the comparison proves nothing.
	if fast < len(messages)/3 || refused == 0 {
		t.Fatalf("%d of %d messages took the hot encoder, %d the generic path", fast, len(messages), refused)
	}
}

// Whatever the hot encoder leaves to the generic path is still answered by Marshal as
// protojson answers it (or refused as protojson refuses it).
func TestHotAnswersLeftToProtojsonStayProtojsons(t *testing.T) {
	m := newJSONMarshaler()
	generic := protoMarshaler(m)
	for _, msg := range []proto.Message{
		&licensingv1.VerifyLicenseResponse{Tier: "bad \xff"},
		&licensingv1.VerifyLicenseResponse{Limits: &structpb.Struct{Fields: map[string]*structpb.Value{"n": structpb.NewNumberValue(math.NaN())}}},
		&licensingv1.VerifyLicenseResponse{ExpiresAt: &timestamppb.Timestamp{Seconds: protojsonappend.MaxTimestampSeconds + 1}},
		&licensingv1.VerifyLicenseResponse{Limits: &structpb.Struct{Fields: map[string]*structpb.Value{"v": {}}}},
		&licensingv1.VerifyLicenseResponse{Limits: &structpb.Struct{Fields: map[string]*structpb.Value{"s": {Kind: &structpb.Value_StructValue{}}}}},
	} {
		want, wantErr := generic.marshalGeneric(msg)
		got, err := m.Marshal(msg)
		if string(got) != string(want) || (err == nil) != (wantErr == nil) {
			t.Fatalf("Marshal(%v) = %s, %v; protojson %s, %v", msg, got, err, want, wantErr)
		}
	}
}

func protoMarshaler(m runtime.Marshaler) *jsonMarshaler {
	return m.(*runtime.HTTPBodyMarshaler).Marshaler.(*jsonMarshaler)
}

func BenchmarkMarshalVerifyLicenseResponse(b *testing.B) {
	limits, _ := structpb.NewStruct(map[string]any{"seats": 5, "features": []any{"sync", "export"}})
	msg := &licensingv1.VerifyLicenseResponse{
		Valid: true, Tier: "pro", ProductId: "app", Limits: limits,
		ExpiresAt: &timestamppb.Timestamp{Seconds: 1795536000}, IssuedAt: &timestamppb.Timestamp{Seconds: 1764000000}, Status: "active",
	}
	m := protoMarshaler(newJSONMarshaler())
	b.Run("hot", func(b *testing.B) {
		for b.Loop() {
			_, _ = m.Marshal(msg)
		}
	})
	b.Run("protojson", func(b *testing.B) {
		for b.Loop() {
			_, _ = m.marshalGeneric(msg)
		}
	})
}
