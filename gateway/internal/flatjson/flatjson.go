// Package flatjson holds the two scanning steps of the gateway's hand-written readers of
// flat JSON objects (the hot routes' bodies in edge, the license key admission control
// peeks at): one copy, so that both accept exactly the same strings.
package flatjson

// PlainString reads a string starting at body[i] that needs no unescaping: printable
// ASCII only, no backslash. ok is false for anything else, which the callers leave to
// encoding/json.
func PlainString(body []byte, i int) (s []byte, next int, ok bool) {
	if i >= len(body) || body[i] != '"' {
		return nil, 0, false
	}
	for j := i + 1; j < len(body); j++ {
		switch c := body[j]; {
		case c == '"':
			return body[i+1 : j], j + 1, true
		case c < 0x20 || c > 0x7e || c == '\\':
			return nil, 0, false
		}
	}
	return nil, 0, false
}

// SkipSpace returns the index of the first byte at or after i that is not JSON
// whitespace.
func SkipSpace(body []byte, i int) int {
	for i < len(body) {
		switch body[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}
