// Package flatjson holds the gateway's hand-written reader of flat JSON objects and its
// scanning steps (the hot routes' bodies in edge, the license key admission control
// peeks at and the rate limiter counts by): one copy, so that all accept exactly the same
// strings.
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

// Object calls set for each member of body when body is exactly one JSON object whose
// names and values are strings of printable ASCII without `"` or `\`; it returns false
// at the first thing outside that (or when set refuses a member).
func Object(body []byte, set func(name, value []byte) bool) bool {
	i := SkipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return false
	}
	i = SkipSpace(body, i+1)
	if i < len(body) && body[i] == '}' {
		return SkipSpace(body, i+1) == len(body)
	}
	for {
		name, next, ok := PlainString(body, i)
		if !ok {
			return false
		}
		i = SkipSpace(body, next)
		if i >= len(body) || body[i] != ':' {
			return false
		}
		value, next, ok := PlainString(body, SkipSpace(body, i+1))
		if !ok || !set(name, value) {
			return false
		}
		i = SkipSpace(body, next)
		if i >= len(body) {
			return false
		}
		switch body[i] {
		case ',':
			i = SkipSpace(body, i+1)
		case '}':
			return SkipSpace(body, i+1) == len(body)
		default:
			return false
		}
	}
}
