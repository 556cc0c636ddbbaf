package protojsonappend

import (
	"math"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// matchesProtojson fails t unless got is protojson's answer for m, or ok is false and
// protojson refuses m.
func matchesProtojson(t *testing.T, m proto.Message, got []byte, ok bool) {
	t.Helper()
	want, err := protojson.Marshal(m)
	if err != nil {
		if ok {
			t.Fatalf("protojson refuses %v (%v), the appender wrote %s", m, err, got)
		}
		return
	}
	if !ok || string(got) != string(want) {
		t.Fatalf("appender wrote %s (ok %v), protojson %s, for %v", got, ok, want, m)
	}
}

func TestStringMatchesProtojson(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	samples := []string{
		"", "pro", `quote " and \ backslash`, "line\nbreak\ttab\rcr\bbs\fff", "\x00\x01\x1f\x7f",
		"<script>&amp;</script>", "héllo", "emoji 🎉", "\u2028\u2029", "\ufffd", "bad \xff utf8", "\xc3", "\xed\xa0\x80",
	}
	for range 20000 {
		b := make([]byte, r.IntN(12))
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		samples = append(samples, string(b))
	}
	for _, s := range samples {
		got, ok := String(nil, s)
		matchesProtojson(t, wrapperspb.String(s), got, ok)
	}
}

func TestTimestampAndDurationMatchProtojson(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	nanos := []int64{0, 1, 999, 1000, 120000, 1000000, 500000000, 999999999, -1, 1000000000}
	seconds := []int64{0, 1, -1, 1764000000, MinTimestampSeconds, MaxTimestampSeconds, MinTimestampSeconds - 1,
		MaxTimestampSeconds + 1, maxDurationSeconds, -maxDurationSeconds, maxDurationSeconds + 1}
	check := func(s, n int64) {
		got, ok := Timestamp(nil, s, n)
		matchesProtojson(t, &timestamppb.Timestamp{Seconds: s, Nanos: int32(n)}, got, ok)
		got, ok = Duration(nil, s, n)
		matchesProtojson(t, &durationpb.Duration{Seconds: s, Nanos: int32(n)}, got, ok)
		got, ok = Duration(nil, -s, -n)
		matchesProtojson(t, &durationpb.Duration{Seconds: -s, Nanos: int32(-n)}, got, ok)
	}
	for _, s := range seconds {
		for _, n := range nanos {
			check(s, n)
		}
	}
	for range 20000 {
		check(r.Int64N(MaxTimestampSeconds-MinTimestampSeconds)+MinTimestampSeconds, r.Int64N(1e9)/[]int64{1, 1e3, 1e6}[r.IntN(3)])
	}
	if got, _ := TimestampOrNull(nil, nil); string(got) != "null" {
		t.Fatalf("unset timestamp: %s", got)
	}
}

func TestFloatAndNumberMatchProtojson(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	samples := []float64{
		0, math.Copysign(0, -1), 0.1, 1e21, -1e21, 1e20, 1e-6, 1e-7, 9.99e-7, 5e-324, math.MaxFloat64,
		math.SmallestNonzeroFloat32, math.MaxFloat32, 9007199254740993, math.NaN(), math.Inf(1), math.Inf(-1),
	}
	for range 20000 {
		samples = append(samples, math.Float64frombits(r.Uint64()), float64(math.Float32frombits(r.Uint32())))
	}
	for _, f := range samples {
		matchesProtojson(t, wrapperspb.Double(f), Float(nil, f, 64), true)
		matchesProtojson(t, wrapperspb.Float(float32(f)), Float(nil, float64(float32(f)), 32), true)
		got, ok := Number(nil, f)
		matchesProtojson(t, structpb.NewNumberValue(f), got, ok)
	}
}
