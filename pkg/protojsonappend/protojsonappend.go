// Package protojsonappend writes JSON values byte for byte as protojson writes them, for the
// encoders that print a known message without protojson's reflection and without its
// deliberately unstable whitespace: the REST edge's hot answers (gateway/internal/edge)
// and the event envelope (pkg/events). Each function that can fail reports ok false where
// protojson would refuse the value, so that its caller leaves the message to protojson,
// which words the error.
package protojsonappend

import (
	"math"
	"math/bits"
	"strconv"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/timestamppb"
)

// String escapes as protojson does: `"` and `\`, the control characters below U+0020
// (\b \f \n \r \t by name, the others as \u00xx in lower-case hex), everything else as is
// (no HTML escaping, U+2028 and U+2029 unescaped). Invalid UTF-8 is protojson's error.
func String(b []byte, s string) (_ []byte, ok bool) {
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
	MinTimestampSeconds = -62135596800
	MaxTimestampSeconds = 253402300799
)

// TimestampOrNull writes ts as Timestamp does; null when unset.
func TimestampOrNull(b []byte, ts *timestamppb.Timestamp) (_ []byte, ok bool) {
	if ts == nil {
		return append(b, "null"...), true
	}
	return Timestamp(b, ts.GetSeconds(), int64(ts.GetNanos()))
}

// Timestamp writes a google.protobuf.Timestamp: RFC 3339 in UTC with 0, 3, 6 or 9
// fraction digits.
func Timestamp(b []byte, seconds, nanos int64) (_ []byte, ok bool) {
	if seconds < MinTimestampSeconds || seconds > MaxTimestampSeconds || nanos < 0 || nanos > maxNanos {
		return b, false
	}
	b = append(b, '"')
	b = time.Unix(seconds, nanos).UTC().AppendFormat(b, "2006-01-02T15:04:05")
	b = appendFraction(b, nanos)
	return append(b, `Z"`...), true
}

// The bounds protojson accepts for a google.protobuf.Duration.
const (
	maxDurationSeconds = 315576000000
	maxNanos           = 999999999
)

// Duration writes a google.protobuf.Duration: seconds with 0, 3, 6 or 9 fraction digits
// and the suffix "s".
func Duration(b []byte, seconds, nanos int64) (_ []byte, ok bool) {
	if seconds < -maxDurationSeconds || seconds > maxDurationSeconds || nanos < -maxNanos || nanos > maxNanos ||
		(seconds > 0 && nanos < 0) || (seconds < 0 && nanos > 0) {
		return b, false
	}
	b = append(b, '"')
	if seconds < 0 || nanos < 0 {
		b = append(b, '-')
		seconds, nanos = -seconds, -nanos
	}
	b = strconv.AppendInt(b, seconds, 10)
	b = appendFraction(b, nanos)
	return append(b, `s"`...), true
}

// appendFraction writes nanos (0 to 999,999,999) as protojson does: nothing for 0, else a
// point and the fewest of 3, 6 or 9 digits that hold it.
func appendFraction(b []byte, nanos int64) []byte {
	digits := 9
	switch {
	case nanos == 0:
		return b
	case nanos%1e6 == 0:
		digits, nanos = 3, nanos/1e6
	case nanos%1e3 == 0:
		digits, nanos = 6, nanos/1e3
	}
	var d [9]byte
	for i := digits - 1; i >= 0; i-- {
		d[i] = byte('0' + nanos%10)
		nanos /= 10
	}
	b = append(b, '.')
	return append(b, d[:digits]...)
}

// Float writes a float or double field (bitSize 32 or 64): encoding/json's rules ('f'
// unless the magnitude is below 1e-6 or from 1e21, then 'e' with a two-digit minimum
// exponent cut to one), NaN and the infinities as the strings "NaN", "Infinity" and
// "-Infinity".
func Float(b []byte, n float64, bitSize int) []byte {
	switch {
	case math.IsNaN(n):
		return append(b, `"NaN"`...)
	case math.IsInf(n, 1):
		return append(b, `"Infinity"`...)
	case math.IsInf(n, -1):
		return append(b, `"-Infinity"`...)
	}
	format := byte('f')
	if abs := math.Abs(n); abs != 0 {
		if bitSize == 64 && (abs < 1e-6 || abs >= 1e21) || bitSize == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21) {
			format = 'e'
		}
	}
	b = strconv.AppendFloat(b, n, format, -1, bitSize)
	if format == 'e' {
		if l := len(b); l >= 4 && b[l-4] == 'e' && b[l-3] == '-' && b[l-2] == '0' {
			b[l-2] = b[l-1]
			b = b[:l-1]
		}
	}
	return b
}

// Number writes a google.protobuf.Value's number, which protojson refuses when it is NaN
// or infinite.
func Number(b []byte, n float64) (_ []byte, ok bool) {
	if math.IsNaN(n) || math.IsInf(n, 0) {
		return b, false
	}
	return Float(b, n, 64), true
}
