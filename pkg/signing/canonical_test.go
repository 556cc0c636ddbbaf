package signing

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

type tier string

func TestMarshal(t *testing.T) {
	exp := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	var nilObj *Object
	var nilTime *time.Time
	var nilMap map[string]float64
	var nilSlice []string
	tests := []struct {
		name string
		in   any
		want string
	}{
		{"nil is null", nil, `null`},
		{"bool", []any{true, false}, `[true,false]`},
		{"string quote and backslash escaped", `a"b\c`, `"a\"b\\c"`},
		{"string short escapes b f n r t", "\b\f\n\r\t", `"\b\f\n\r\t"`},
		{"string other controls as lowercase u00xx", "\x00\x01\x0b\x1a\x1f", `"\u0000\u0001\u000b\u001a\u001f"`},
		{"string DEL and C1 controls literal", "\x7f\u0080\u009f", "\"\x7f\u0080\u009f\""},
		{"string no HTML escaping", `<script>&amp;</script>`, `"<script>&amp;</script>"`},
		{"string U+2028 U+2029 literal", "a\u2028b\u2029c", "\"a\u2028b\u2029c\""},
		{"string non-ASCII literal", "héllo 😀 \ufffd \U0010ffff", "\"héllo 😀 \ufffd \U0010ffff\""},
		{"string slash not escaped", "a/b", `"a/b"`},
		{"named string type", tier("pro"), `"pro"`},
		{"integer float without .0", 100.0, `100`},
		{"negative zero is 0", math.Copysign(0, -1), `0`},
		{"fraction", 0.1, `0.1`},
		{"shortest round-trip digits", 0.30000000000000004, `0.30000000000000004`},
		{"1e21 switches to exponent", 1e21, `1e+21`},
		{"just below 1e21 is plain", 999999999999999900000.0, `999999999999999900000`},
		{"1e20 plain with zeros", 1e20, `100000000000000000000`},
		{"1e-7 switches to exponent", 1e-7, `1e-7`},
		{"1.5e-7 exponent with fraction", 1.5e-7, `1.5e-7`},
		{"1e-6 is plain", 1e-6, `0.000001`},
		{"1.2345e-6 plain", 1.2345e-6, `0.0000012345`},
		{"negative exponent form", -1.5e300, `-1.5e+300`},
		{"smallest subnormal", 5e-324, `5e-324`},
		{"max float", math.MaxFloat64, `1.7976931348623157e+308`},
		{"float32 widened", float32(0.5), `0.5`},
		{"ints", []any{0, -1, int8(-8), uint16(16), int64(MaxSafeInteger), -MaxSafeInteger}, `[0,-1,-8,16,9007199254740991,-9007199254740991]`},
		{"json.Number reformatted", json.Number("1.50E+2"), `150`},
		{"time RFC 3339 UTC Z no fraction", exp, `"2026-11-22T10:00:00Z"`},
		{"time converted to UTC", exp.In(time.FixedZone("X", 3600)), `"2026-11-22T10:00:00Z"`},
		{"time milliseconds 3 digits", exp.Add(120 * time.Millisecond), `"2026-11-22T10:00:00.120Z"`},
		{"time microseconds 6 digits", exp.Add(123400 * time.Microsecond), `"2026-11-22T10:00:00.123400Z"`},
		{"time nanoseconds 9 digits", exp.Add(1), `"2026-11-22T10:00:00.000000001Z"`},
		{"time pointer", &exp, `"2026-11-22T10:00:00Z"`},
		{"nil time pointer is null", nilTime, `null`},
		{"nil *Object is null", nilObj, `null`},
		{"nil map is empty object", nilMap, `{}`},
		{"nil slice is empty array", nilSlice, `[]`},
		{"object keeps stated order", NewObject().Add("z", 1).Add("a", 2).Add("m", nil), `{"z":1,"a":2,"m":null}`},
		{"object value (not pointer)", *NewObject(Field{"k", "v"}), `{"k":"v"}`},
		{"empty object", &Object{}, `{}`},
		{"object with leading ascending index keys", NewObject().Add("1", 1).Add("10", 2).Add("a", 3), `{"1":1,"10":2,"a":3}`},
		{"map keys sorted", map[string]float64{"users": 5, "seats": 10, "api_calls_per_day": 1000}, `{"api_calls_per_day":1000,"seats":10,"users":5}`},
		{"map index keys first numerically", map[string]int{"b": 1, "10": 2, "2": 3, "01": 4, "a": 5}, `{"2":3,"10":2,"01":4,"a":5,"b":1}`},
		{"map 2^32-1 is not an index", map[string]int{"4294967295": 1, "4294967294": 2, "0": 3}, `{"0":3,"4294967294":2,"4294967295":1}`},
		{"map keys by UTF-16 units not bytes", map[string]int{"\uffff": 1, "😀": 2, "\ue000": 3}, "{\"😀\":2,\"\ue000\":3,\"\uffff\":1}"},
		{"nested map in any", map[string]any{"b": []any{1, "x"}, "a": map[string]any{"y": true, "x": nil}}, `{"a":{"x":null,"y":true},"b":[1,"x"]}`},
		{"array", [2]string{"a", "b"}, `["a","b"]`},
		{
			"offline export license shape",
			NewObject().Add("key", "KH-1").Add("tier", "pro").Add("product_id", "app").Add("expires_at", exp).Add("limits", map[string]float64{"users": 5, "seats": 2.5}),
			`{"key":"KH-1","tier":"pro","product_id":"app","expires_at":"2026-11-22T10:00:00Z","limits":{"seats":2.5,"users":5}}`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Marshal(tc.in)
			if err != nil {
				t.Fatalf("Marshal: %v", err)
			}
			if string(got) != tc.want {
				t.Errorf("Marshal = %s\n          want %s", got, tc.want)
			}
		})
	}
}

func TestMarshalRefuses(t *testing.T) {
	type st struct{ A int }
	loop := map[string]any{}
	loop["self"] = loop
	tests := []struct {
		name string
		in   any
	}{
		{"NaN", math.NaN()},
		{"+Inf", math.Inf(1)},
		{"-Inf inside object", NewObject().Add("x", math.Inf(-1))},
		{"int beyond 2^53-1", int64(MaxSafeInteger + 1)},
		{"negative int beyond 2^53-1", int64(-MaxSafeInteger - 1)},
		{"uint64 beyond 2^53-1", uint64(math.MaxUint64)},
		{"invalid UTF-8 string", "a\xffb"},
		{"invalid UTF-8 field name", NewObject().Add("\xc3", 1)},
		{"invalid UTF-8 map key", map[string]int{"\xed\xa0\x80": 1}},
		{"duplicate field", NewObject().Add("a", 1).Add("a", 2)},
		{"index key after a name key", NewObject().Add("a", 1).Add("1", 2)},
		{"index keys descending", NewObject().Add("2", 1).Add("1", 2)},
		{"struct", st{1}},
		{"byte slice", []byte("x")},
		{"non-string map key", map[int]int{1: 1}},
		{"func", func() {}},
		{"channel in slice", []any{make(chan int)}},
		{"year 10000", time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
		{"year 0", time.Date(0, 12, 31, 0, 0, 0, 0, time.UTC)},
		{"json.Number not a number", json.Number("abc")},
		{"json.Number overflowing", json.Number("1e400")},
		{"cycle", loop},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Marshal(tc.in)
			if !errors.Is(err, ErrUnsupportedValue) {
				t.Fatalf("Marshal = %q, %v; want ErrUnsupportedValue", got, err)
			}
		})
	}
}

func TestObjectAPI(t *testing.T) {
	fields := []Field{{"a", 1}}
	o := NewObject(fields...)
	fields[0].Name = "changed" // NewObject copies
	o.Add("b", 2)
	got := o.Fields()
	got[0].Name = "changed" // Fields copies
	if o.Len() != 2 || o.Fields()[0].Name != "a" {
		t.Fatalf("Object aliasing: %+v", o.Fields())
	}
	b, err := json.Marshal(map[string]any{"o": o})
	if err != nil || string(b) != `{"o":{"a":1,"b":2}}` {
		t.Fatalf("json.Marshal with Object = %s, %v", b, err)
	}
}

func TestFormatTimeMatchesRFC3339Parse(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		tm := time.Unix(r.Int64N(253402300799), r.Int64N(1e9)).UTC()
		if r.IntN(3) == 0 {
			tm = tm.Truncate(time.Microsecond)
		}
		s, err := FormatTime(tm)
		if err != nil {
			t.Fatal(err)
		}
		back, err := time.Parse(time.RFC3339Nano, s)
		if err != nil || !back.Equal(tm) {
			t.Fatalf("FormatTime(%v) = %q, parses back to %v, %v", tm, s, back, err)
		}
		if frac := strings.TrimSuffix(s[19:], "Z"); !(frac == "" || len(frac) == 4 || len(frac) == 7 || len(frac) == 10) {
			t.Fatalf("FormatTime(%v) = %q: fraction must have 0, 3, 6 or 9 digits", tm, s)
		}
	}
}

// jsNumber is the grammar of Number::toString output.
var jsNumber = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]*[1-9])?$|^-?[1-9](\.[0-9]*[1-9])?e[+-][1-9][0-9]*$|^-?0\.0*[1-9][0-9]*$`)

func checkNumber(t *testing.T, f float64) {
	s, err := FormatNumber(f)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		if !errors.Is(err, ErrUnsupportedValue) {
			t.Fatalf("FormatNumber(%v) = %q, %v; want error", f, s, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("FormatNumber(%v): %v", f, err)
	}
	back, err := strconv.ParseFloat(s, 64)
	if err != nil || back != f {
		t.Fatalf("FormatNumber(%v) = %q does not round-trip (%v, %v)", f, s, back, err)
	}
	if !jsNumber.MatchString(s) {
		t.Fatalf("FormatNumber(%v) = %q is not in Number::toString form", f, s)
	}
	if a := math.Abs(f); (a >= 1e21 || (a < 1e-6 && a != 0)) != strings.Contains(s, "e") {
		t.Fatalf("FormatNumber(%v) = %q: wrong notation for the magnitude", f, s)
	}
}

func FuzzFormatNumber(f *testing.F) {
	for _, x := range []float64{0, 1, -1, 0.1, 1e21, 1e-7, 5e-324, math.MaxFloat64, math.NaN(), math.Inf(1)} {
		f.Add(math.Float64bits(x))
	}
	f.Fuzz(func(t *testing.T, bits uint64) { checkNumber(t, math.Float64frombits(bits)) })
}

// unescapeLineSeparators turns encoding/json's \u2028 and \u2029 escapes back into the
// literal characters, skipping over other escapes (so `\\u2028` is left alone).
func unescapeLineSeparators(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			if rest := s[i:]; strings.HasPrefix(rest, `\u2028`) || strings.HasPrefix(rest, `\u2029`) {
				b.WriteString(map[string]string{`\u2028`: "\u2028", `\u2029`: "\u2029"}[rest[:6]])
				i += 5
				continue
			}
			b.WriteString(s[i : i+2])
			i++
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func FuzzMarshalString(f *testing.F) {
	for _, s := range []string{"", "plain", `"\`, "\x00\x1f\x7f", "<>&", "\u2028\u2029", `\u2028`, "😀\ufffd", "\xff", "\b\f\n\r\t"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := Marshal(s)
		if !utf8.ValidString(s) {
			if !errors.Is(err, ErrUnsupportedValue) {
				t.Fatalf("Marshal(%q) = %q, %v; want ErrUnsupportedValue for invalid UTF-8", s, got, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("Marshal(%q): %v", s, err)
		}
		var back string
		if err := json.Unmarshal(got, &back); err != nil || back != s {
			t.Fatalf("Marshal(%q) = %q decodes to %q, %v", s, got, back, err)
		}
		// encoding/json (Go >= 1.22) escapes exactly like JSON.stringify except for the
		// line separators and HTML characters.
		var sb strings.Builder
		enc := json.NewEncoder(&sb)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		if want := unescapeLineSeparators(strings.TrimSuffix(sb.String(), "\n")); string(got) != want {
			t.Fatalf("Marshal(%q) = %q, want %q", s, got, want)
		}
	})
}

func TestMarshalAgreesWithNode(t *testing.T) {
	node := requireTool(t, "node")
	r := rand.New(rand.NewChaCha8([32]byte{'k', 'e', 'y', 'h', 'o', 'u', 's', 'e'}))

	var values []any
	// Strings: every ASCII character alone and in context, plus the characters Go's
	// encoder treats differently from JSON.stringify, plus random valid UTF-8.
	for c := 0; c < 0x80; c++ {
		values = append(values, string(rune(c)), "a"+string(rune(c))+"z")
	}
	values = append(values, "\u2028", "\u2029", "\u0085", "\u00a0", "\ufeff", "\ufffd", "\U0010ffff", "😀", "</script>", "&amp;", `\u0000`, "é\u0301", "")
	pool := []rune{0, 8, 9, 10, 12, 13, 0x1f, '"', '\\', '/', '<', '>', '&', 'a', 0x7f, 0x80, 0x2028, 0x2029, 0xd7ff, 0xe000, 0xfffe, 0xffff, 0x10000, 0x1f600, 0x10ffff}
	for range 500 {
		var b strings.Builder
		for range r.IntN(12) {
			b.WriteRune(pool[r.IntN(len(pool))])
		}
		values = append(values, b.String())
	}
	// Numbers: thresholds and their neighbours, powers of ten, extremes, random doubles.
	var nums []float64
	for _, x := range []float64{0, math.Copysign(0, -1), 1, 0.1, 0.30000000000000004, 1.0 / 3, 2.0 / 3, 4.35, 0.000001, 1e-7, 1.5e-7, 1e21, 1e20, 123e-20,
		5e-324, math.SmallestNonzeroFloat64 * 3, 2.2250738585072014e-308, math.MaxFloat64, MaxSafeInteger, MaxSafeInteger + 2, 1 << 62, 1e300} {
		nums = append(nums, x, -x, math.Nextafter(x, math.Inf(1)), math.Nextafter(x, math.Inf(-1)))
	}
	for e := -325; e <= 308; e++ {
		p := math.Pow(10, float64(e))
		nums = append(nums, p, math.Nextafter(p, 0), math.Nextafter(p, math.Inf(1)), 1.5*p, 9.999*p)
	}
	for range 20000 {
		x := math.Float64frombits(r.Uint64())
		if !math.IsNaN(x) && !math.IsInf(x, 0) {
			nums = append(nums, x)
		}
	}
	for range 5000 {
		nums = append(nums, float64(r.Int64N(MaxSafeInteger)), float64(r.IntN(1e6))/math.Pow(10, float64(r.IntN(12))))
	}
	for _, x := range nums {
		if !math.IsNaN(x) && !math.IsInf(x, 0) {
			values = append(values, x)
		}
	}

	// Maps whose key order must match what a JS verifier gets by sorting keys.
	sorted := []any{
		map[string]any{"users": 5, "seats": 10.5, "api_calls_per_day": 1e6, "features": 3, "admins": 1e21},
		map[string]any{"b": 1, "10": 2, "2": 3, "01": 4, "a": 5, "4294967295": 6, "4294967294": 7, "-1": 8, "1.5": 9},
		map[string]any{"\uffff": 1, "😀": 2, "\ue000": 3, "\U0010ffff": 4, "Z": 5, "a": 6, "é": 7, "": 8},
		map[string]any{"nested": map[string]any{"z": []any{map[string]any{"y": 1, "x": 2}}, "a": nil}},
	}

	exp := time.Date(2026, 11, 22, 10, 0, 0, 123456000, time.UTC)
	var docs []string
	for _, v := range []any{
		NewObject().Add("key", "KH-ÄÖ-<&>").Add("tier", "enterprise").Add("product_id", "app\u2028x").Add("expires_at", exp).Add("limits", map[string]float64{"users": 5, "seats": 1e-7}),
		NewObject().Add("product_id", "p").Add("version", "1.2.3+build").Add("channel", "stable").Add("platform", "linux/amd64").
			Add("artifact_url", "https://example.com/a?b=1&c=<2>").Add("checksum", "sha256:00").Add("release_notes", "line1\nline2\t\"quoted\"\x01").Add("issued_at", exp),
		NewObject().Add("0", 1).Add("7", 2).Add("z", map[string]any{"3": 1, "b": 2, "a": []any{1.5, "x", nil, true}}),
		sorted[1], sorted[2],
	} {
		b, err := Marshal(v)
		if err != nil {
			t.Fatalf("Marshal(%v): %v", v, err)
		}
		docs = append(docs, string(b))
	}

	input, err := json.Marshal(map[string]any{"values": values, "sorted": sorted, "docs": docs})
	if err != nil {
		t.Fatal(err)
	}
	const script = `
const inp = JSON.parse(require('fs').readFileSync(0, 'utf8'));
const sortDeep = v => Array.isArray(v) ? v.map(sortDeep)
  : (v !== null && typeof v === 'object') ? Object.fromEntries(Object.keys(v).sort().map(k => [k, sortDeep(v[k])]))
  : v;
process.stdout.write(JSON.stringify({
  values: inp.values.map(v => JSON.stringify(v)),
  sorted: inp.sorted.map(v => JSON.stringify(sortDeep(v))),
  docs: inp.docs.map(d => JSON.stringify(JSON.parse(d))),
}));`
	out, err := run(t, input, node, "-e", script)
	if err != nil {
		t.Fatalf("node: %v", err)
	}
	var res struct{ Values, Sorted, Docs []string }
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("decoding node output: %v", err)
	}
	if len(res.Values) != len(values) || len(res.Sorted) != len(sorted) || len(res.Docs) != len(docs) {
		t.Fatalf("node returned %d/%d/%d results, want %d/%d/%d", len(res.Values), len(res.Sorted), len(res.Docs), len(values), len(sorted), len(docs))
	}
	failures := 0
	check := func(kind string, i int, in any, want string) {
		got, err := Marshal(in)
		if err != nil || string(got) != want {
			failures++
			if failures <= 20 {
				t.Errorf("%s[%d] %#v: Marshal = %q, %v; JSON.stringify = %q", kind, i, in, got, err, want)
			}
		}
	}
	for i, v := range values {
		check("value", i, v, res.Values[i])
	}
	for i, v := range sorted {
		check("sorted map", i, v, res.Sorted[i])
	}
	for i, d := range docs {
		if d != res.Docs[i] {
			failures++
			t.Errorf("doc[%d] is not stable under JSON.stringify(JSON.parse(.)):\n ours %s\n node %s", i, d, res.Docs[i])
		}
	}
	t.Logf("compared %d values, %d sorted maps, %d documents with node; %d mismatches", len(values), len(sorted), len(docs), failures)
}

// The SDKs' shared vectors (clients/testdata/vectors.json) hold the numbers a signed
// license may carry as JSON.stringify writes them; the SDKs that re-serialize a parsed
// license are held to the same table, so the server must sign exactly these bytes.
func TestFormatNumberMatchesSDKVectors(t *testing.T) {
	b, err := os.ReadFile("../../clients/testdata/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Numbers []struct{ Name, In, JSON string } `json:"numbers"`
	}
	if err := json.Unmarshal(b, &v); err != nil || len(v.Numbers) == 0 {
		t.Fatalf("no numbers vectors: %v", err)
	}
	for _, n := range v.Numbers {
		f, err := strconv.ParseFloat(n.In, 64)
		if err != nil {
			t.Fatalf("%s: %v", n.Name, err)
		}
		if got, err := Marshal(map[string]float64{"n": f}); err != nil || string(got) != `{"n":`+n.JSON+`}` {
			t.Errorf("%s: Marshal = %s, %v; want {\"n\":%s}", n.Name, got, err, n.JSON)
		}
	}
}
