package signing

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"
)

// ErrUnsupportedValue is returned (wrapped, with detail) by Marshal and FormatTime for a
// value JSON.stringify could not write identically: unsupported types, NaN/Inf, unsafe
// integers, invalid UTF-8, duplicate or unreproducibly ordered Object fields, out-of-range
// times, or nesting deeper than MaxDepth.
var ErrUnsupportedValue = errors.New("signing: value cannot be canonically serialized")

// MaxDepth bounds nesting (and so catches reference cycles through *Object or pointers).
const MaxDepth = 100

// MaxSafeInteger is JavaScript's Number.MAX_SAFE_INTEGER, 2^53-1: the largest magnitude a
// Go integer may have to be marshalled.
const MaxSafeInteger = 1<<53 - 1

// Field is one name/value pair of an Object.
type Field struct {
	Name  string
	Value any
}

// Object is a JSON object whose fields are written in the order they were added, the way
// a JavaScript object literal keeps insertion order. The zero value is an empty object.
type Object struct {
	fields []Field
}

// NewObject returns an Object holding fields in the given order.
func NewObject(fields ...Field) *Object {
	return &Object{fields: slices.Clone(fields)}
}

// Add appends a field and returns o, so calls chain:
//
//	signing.NewObject().Add("key", k).Add("tier", t)
//
// Duplicate names are reported by Marshal, not here.
func (o *Object) Add(name string, value any) *Object {
	o.fields = append(o.fields, Field{Name: name, Value: value})
	return o
}

// Fields returns a copy of the fields in order.
func (o *Object) Fields() []Field { return slices.Clone(o.fields) }

// Len is the number of fields.
func (o *Object) Len() int { return len(o.fields) }

// MarshalJSON returns Marshal(o), so an Object can be placed in an encoding/json document.
// (encoding/json re-escapes <, > and & in the result by default; the decoded values are
// unchanged, but use Marshal itself when the bytes matter.)
func (o *Object) MarshalJSON() ([]byte, error) { return Marshal(o) }

// Marshal returns the canonical JSON encoding of v (see the package documentation for the
// exact rules). Supported: nil, string, bool, all float and integer kinds (including named
// types), json.Number, time.Time, Object, *Object, maps with string-kind keys, slices and
// arrays (not []byte), and pointers or interfaces holding any of these.
func Marshal(v any) ([]byte, error) {
	e := encoder{buf: make([]byte, 0, 256)}
	if err := e.value(v, 0); err != nil {
		return nil, err
	}
	return e.buf, nil
}

type encoder struct {
	buf []byte
}

func unsupported(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrUnsupportedValue}, args...)...)
}

var timeType = reflect.TypeFor[time.Time]()
var objectType = reflect.TypeFor[Object]()

func (e *encoder) value(v any, depth int) error {
	if depth > MaxDepth {
		return unsupported("nesting deeper than %d", MaxDepth)
	}
	switch x := v.(type) {
	case nil:
		e.buf = append(e.buf, "null"...)
		return nil
	case string:
		return e.str(x)
	case bool:
		e.buf = strconv.AppendBool(e.buf, x)
		return nil
	case float64:
		return e.float(x)
	case int:
		return e.int(int64(x))
	case int64:
		return e.int(x)
	case json.Number:
		f, err := strconv.ParseFloat(string(x), 64)
		if err != nil {
			return unsupported("json.Number %q", string(x))
		}
		return e.float(f)
	case time.Time:
		s, err := FormatTime(x)
		if err != nil {
			return err
		}
		return e.str(s)
	case *Object:
		if x == nil {
			e.buf = append(e.buf, "null"...)
			return nil
		}
		return e.object(x, depth)
	case Object:
		return e.object(&x, depth)
	}
	return e.reflectValue(reflect.ValueOf(v), depth)
}

func (e *encoder) reflectValue(rv reflect.Value, depth int) error {
	if depth > MaxDepth {
		return unsupported("nesting deeper than %d", MaxDepth)
	}
	switch rv.Kind() {
	case reflect.Invalid:
		e.buf = append(e.buf, "null"...)
		return nil
	case reflect.Pointer, reflect.Interface:
		if rv.IsNil() {
			e.buf = append(e.buf, "null"...)
			return nil
		}
		return e.value(rv.Elem().Interface(), depth+1)
	}
	switch rv.Type() {
	case timeType, objectType:
		return e.value(rv.Interface(), depth)
	}
	switch rv.Kind() {
	case reflect.String:
		return e.str(rv.String())
	case reflect.Bool:
		e.buf = strconv.AppendBool(e.buf, rv.Bool())
		return nil
	case reflect.Float32, reflect.Float64:
		return e.float(rv.Float())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return e.int(rv.Int())
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		u := rv.Uint()
		if u > MaxSafeInteger {
			return unsupported("integer %d exceeds ±2^53-1", u)
		}
		return e.int(int64(u))
	case reflect.Map:
		if rv.Type().Key().Kind() != reflect.String {
			return unsupported("map key type %s (want a string kind)", rv.Type().Key())
		}
		return e.mapValue(rv, depth)
	case reflect.Slice, reflect.Array:
		if rv.Type().Elem().Kind() == reflect.Uint8 {
			return unsupported("byte slice/array %s", rv.Type())
		}
		e.buf = append(e.buf, '[')
		for i := range rv.Len() {
			if i > 0 {
				e.buf = append(e.buf, ',')
			}
			if err := e.reflectValue(rv.Index(i), depth+1); err != nil {
				return err
			}
		}
		e.buf = append(e.buf, ']')
		return nil
	}
	return unsupported("type %s (use Object for JSON objects)", rv.Type())
}

func (e *encoder) object(o *Object, depth int) error {
	// A JavaScript object always lists array-index keys first, ascending, whatever the
	// insertion order; an Object that states any other order is not writable by JS.
	seen := make(map[string]struct{}, len(o.fields))
	lastIndex, sawIndex, sawName := uint32(0), false, false
	for _, f := range o.fields {
		if _, dup := seen[f.Name]; dup {
			return unsupported("duplicate field %q", f.Name)
		}
		seen[f.Name] = struct{}{}
		if idx, ok := arrayIndex(f.Name); ok {
			if sawName || (sawIndex && idx <= lastIndex) {
				return unsupported("field %q: JavaScript orders array-index keys first and ascending", f.Name)
			}
			lastIndex, sawIndex = idx, true
		} else {
			sawName = true
		}
	}
	e.buf = append(e.buf, '{')
	for i, f := range o.fields {
		if i > 0 {
			e.buf = append(e.buf, ',')
		}
		if err := e.str(f.Name); err != nil {
			return err
		}
		e.buf = append(e.buf, ':')
		if err := e.value(f.Value, depth+1); err != nil {
			return fmt.Errorf("field %q: %w", f.Name, err)
		}
	}
	e.buf = append(e.buf, '}')
	return nil
}

func (e *encoder) mapValue(rv reflect.Value, depth int) error {
	keys := make([]string, 0, rv.Len())
	vals := make(map[string]reflect.Value, rv.Len())
	iter := rv.MapRange()
	for iter.Next() {
		k := iter.Key().String()
		keys = append(keys, k)
		vals[k] = iter.Value()
	}
	SortKeys(keys)
	e.buf = append(e.buf, '{')
	for i, k := range keys {
		if i > 0 {
			e.buf = append(e.buf, ',')
		}
		if err := e.str(k); err != nil {
			return err
		}
		e.buf = append(e.buf, ':')
		if err := e.reflectValue(vals[k], depth+1); err != nil {
			return fmt.Errorf("key %q: %w", k, err)
		}
	}
	e.buf = append(e.buf, '}')
	return nil
}

// SortKeys sorts object keys in the order Marshal writes map keys: array-index keys
// ("0".."4294967294" in canonical form) first by numeric value, then all other keys by
// UTF-16 code units, which is what a JavaScript verifier gets from sorting the keys and
// building an object from them.
func SortKeys(keys []string) {
	slices.SortFunc(keys, compareKeys)
}

func compareKeys(a, b string) int {
	ai, aok := arrayIndex(a)
	bi, bok := arrayIndex(b)
	switch {
	case aok && bok:
		return cmpUint32(ai, bi)
	case aok:
		return -1
	case bok:
		return 1
	}
	return compareUTF16(a, b)
}

func cmpUint32(a, b uint32) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// compareUTF16 compares as JavaScript compares strings: by UTF-16 code units. It differs
// from byte order only between supplementary characters (surrogate pairs, 0xD800-0xDBFF)
// and BMP characters U+E000-U+FFFF. Invalid UTF-8 compares as U+FFFD (Marshal refuses it
// anyway).
func compareUTF16(a, b string) int {
	for a != "" && b != "" {
		ra, na := utf8.DecodeRuneInString(a)
		rb, nb := utf8.DecodeRuneInString(b)
		if ra != rb {
			ua, ub := firstUnit(ra), firstUnit(rb)
			if ua != ub {
				return cmpUint32(uint32(ua), uint32(ub))
			}
			// Same high surrogate: the low surrogates order as the runes do.
			return cmpUint32(uint32(ra), uint32(rb))
		}
		a, b = a[na:], b[nb:]
	}
	return cmpUint32(uint32(len(a)), uint32(len(b)))
}

func firstUnit(r rune) rune {
	if r >= 0x10000 {
		hi, _ := utf16.EncodeRune(r)
		return hi
	}
	return r
}

// arrayIndex reports whether s is a canonical array index in ECMAScript's sense: the
// decimal form of an integer 0 <= n < 2^32-1 without leading zeros.
func arrayIndex(s string) (uint32, bool) {
	if s == "" || len(s) > 10 || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	var n uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	if n >= math.MaxUint32 {
		return 0, false
	}
	return uint32(n), true
}

const hexDigits = "0123456789abcdef"

// str appends s quoted exactly as JSON.stringify's QuoteJSONString does.
func (e *encoder) str(s string) error {
	if !utf8.ValidString(s) {
		return unsupported("string is not valid UTF-8")
	}
	e.buf = append(e.buf, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		e.buf = append(e.buf, s[start:i]...)
		switch c {
		case '"':
			e.buf = append(e.buf, '\\', '"')
		case '\\':
			e.buf = append(e.buf, '\\', '\\')
		case '\b':
			e.buf = append(e.buf, '\\', 'b')
		case '\f':
			e.buf = append(e.buf, '\\', 'f')
		case '\n':
			e.buf = append(e.buf, '\\', 'n')
		case '\r':
			e.buf = append(e.buf, '\\', 'r')
		case '\t':
			e.buf = append(e.buf, '\\', 't')
		default:
			e.buf = append(e.buf, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		start = i + 1
	}
	e.buf = append(e.buf, s[start:]...)
	e.buf = append(e.buf, '"')
	return nil
}

func (e *encoder) int(n int64) error {
	if n > MaxSafeInteger || n < -MaxSafeInteger {
		return unsupported("integer %d exceeds ±2^53-1", n)
	}
	e.buf = strconv.AppendInt(e.buf, n, 10)
	return nil
}

func (e *encoder) float(f float64) error {
	s, err := FormatNumber(f)
	if err != nil {
		return err
	}
	e.buf = append(e.buf, s...)
	return nil
}

// FormatNumber formats f as ECMAScript's Number::toString(10) does (ECMA-262
// §6.1.6.1.20): the shortest digit string that round-trips, in plain notation when the
// decimal exponent n satisfies -6 < n <= 21 and in exponent notation ("1e+21", "1.5e-7")
// otherwise; -0 gives "0". NaN and ±Inf are refused.
func FormatNumber(f float64) (string, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return "", unsupported("number %v", f)
	}
	if f == 0 {
		return "0", nil
	}
	var sign string
	if f < 0 {
		sign, f = "-", -f
	}
	// Go's shortest formatting yields the same digits as ECMAScript: the fewest digits k
	// that round-trip, and of those the ones closest to the value.
	es := strconv.FormatFloat(f, 'e', -1, 64) // d[.ddd]e±XX
	mant, exp, _ := strings.Cut(es, "e")
	digits := strings.Replace(mant, ".", "", 1)
	e10, err := strconv.Atoi(exp)
	if err != nil {
		return "", unsupported("number %v", f)
	}
	k, n := len(digits), e10+1 // value = 0.digits × 10^n
	var b strings.Builder
	b.WriteString(sign)
	switch {
	case k <= n && n <= 21:
		b.WriteString(digits)
		b.WriteString(strings.Repeat("0", n-k))
	case 0 < n && n <= 21:
		b.WriteString(digits[:n])
		b.WriteByte('.')
		b.WriteString(digits[n:])
	case -6 < n && n <= 0:
		b.WriteString("0.")
		b.WriteString(strings.Repeat("0", -n))
		b.WriteString(digits)
	default:
		b.WriteByte(digits[0])
		if k > 1 {
			b.WriteByte('.')
			b.WriteString(digits[1:])
		}
		b.WriteByte('e')
		if n-1 >= 0 {
			b.WriteByte('+')
		}
		b.WriteString(strconv.Itoa(n - 1))
	}
	return b.String(), nil
}

// FormatTime formats t the way Marshal writes a time.Time: RFC 3339 in UTC with "Z", and
// a fractional part of 0, 3, 6 or 9 digits: none when the sub-second part is zero, else
// the fewest of 3/6/9 that is exact (the protojson Timestamp layout). Examples:
// "2026-11-22T10:00:00Z", "2026-11-22T10:00:00.500Z", "2026-11-22T10:00:00.000001Z".
// Years outside 0001-9999 are refused.
func FormatTime(t time.Time) (string, error) {
	t = t.UTC()
	if y := t.Year(); y < 1 || y > 9999 {
		return "", unsupported("time %s outside years 0001-9999", t.Format(time.RFC3339))
	}
	const layout = "2006-01-02T15:04:05"
	ns := t.Nanosecond()
	switch {
	case ns == 0:
		return t.Format(layout) + "Z", nil
	case ns%1_000_000 == 0:
		return fmt.Sprintf("%s.%03dZ", t.Format(layout), ns/1_000_000), nil
	case ns%1_000 == 0:
		return fmt.Sprintf("%s.%06dZ", t.Format(layout), ns/1_000), nil
	}
	return fmt.Sprintf("%s.%09dZ", t.Format(layout), ns), nil
}
