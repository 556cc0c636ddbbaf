// Package input is the one input policy of every entry point (the REST edge's paths,
// queries and JSON bodies, the console's and portal's paths and forms): what bytes a
// value may hold before anything parses, stores or forwards it.
//
//   - Every value is valid UTF-8 without U+0000: nothing downstream can store or carry
//     anything else (a gRPC string field refuses invalid UTF-8, Postgres text refuses
//     both), so letting such a value through turned into a 500.
//   - An identifier (a license key, an id, a token, an instance id, a path segment, a
//     query value, a one-line form field) also holds no control character (U+0000–U+001F,
//     U+007F–U+009F): none is ever part of a name this product hands out, and one in a
//     key only ever looked like a lookup of something else.
//
// Free text (notes, release notes) may hold line breaks and tabs; it is checked with Text.
package input

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Problem says what is wrong with a value; the messages name the field.
type Problem int

const (
	// OK is a value the policy accepts.
	OK Problem = iota
	// NotUTF8 is a value that is not valid UTF-8.
	NotUTF8
	// NUL is a value holding U+0000.
	NUL
	// Control is an identifier holding a control character.
	Control
)

// Text checks free text: valid UTF-8 and no U+0000.
func Text(s string) Problem {
	if !utf8.ValidString(s) {
		return NotUTF8
	}
	if strings.IndexByte(s, 0) >= 0 {
		return NUL
	}
	return OK
}

// Identifier checks a key, id, token or one-line field: valid UTF-8 and no control
// character.
func Identifier(s string) Problem {
	if p := Text(s); p != OK {
		return p
	}
	for _, r := range s {
		if IsControl(r) {
			return Control
		}
	}
	return OK
}

// TrimmedIdentifier checks an identifier the API compares after trimming its surrounding
// white space (api.md: check-update's product_id is compared whitespace-insensitively, so
// "  app\t" is "app"): white space at either end is allowed, the rest is an identifier.
func TrimmedIdentifier(s string) Problem {
	if p := Text(s); p != OK {
		return p
	}
	return Identifier(strings.TrimSpace(s))
}

// IsControl reports whether r is a control character (Unicode category Cc).
func IsControl(r rune) bool { return r < 0x20 || (r >= 0x7f && r <= 0x9f) }

// Describe is the one wording of a refused value: "<field> is not valid UTF-8",
// "<field> must not contain NUL characters", "<field> must not contain control
// characters".
func Describe(field string, p Problem) string {
	switch p {
	case NotUTF8:
		return field + " is not valid UTF-8"
	case NUL:
		return field + " must not contain NUL characters"
	case Control:
		return field + " must not contain control characters"
	}
	return ""
}

// Error is a refused value, naming its field.
type Error struct {
	Field   string
	Problem Problem
}

func (e *Error) Error() string { return Describe(e.Field, e.Problem) }

// CheckIdentifier returns an *Error naming field when s is not an acceptable identifier.
func CheckIdentifier(field, s string) error {
	if p := Identifier(s); p != OK {
		return &Error{Field: field, Problem: p}
	}
	return nil
}

// CheckText returns an *Error naming field when s is not acceptable free text.
func CheckText(field, s string) error {
	if p := Text(s); p != OK {
		return &Error{Field: field, Problem: p}
	}
	return nil
}

// NameField is the Field of an Error about a form or query parameter's name.
const NameField = "a field name"

// CheckValues checks decoded form or query values: every name is an identifier; every
// value is an identifier unless its name is in freeText, where line breaks and tabs are
// allowed. The first problem found, in the order of the sorted names, is returned (so the
// answer to one request is always the same).
func CheckValues(values url.Values, freeText ...string) error {
	names := make([]string, 0, len(values))
	for name := range values {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if p := Identifier(name); p != OK {
			return &Error{Field: NameField, Problem: p}
		}
		check := Identifier
		for _, f := range freeText {
			if f == name {
				check = Text
			}
		}
		for _, v := range values[name] {
			if p := check(v); p != OK {
				return &Error{Field: name, Problem: p}
			}
		}
	}
	return nil
}

// CheckPath checks a decoded URL path: each segment is an identifier.
func CheckPath(path string) error {
	if p := Identifier(path); p != OK {
		return &Error{Field: "the path", Problem: p}
	}
	return nil
}

// String is for tests and logs.
func (p Problem) String() string {
	switch p {
	case OK:
		return "ok"
	case NotUTF8:
		return "not UTF-8"
	case NUL:
		return "NUL"
	case Control:
		return "control character"
	}
	return fmt.Sprintf("Problem(%d)", int(p))
}

// Decimal reads a non-negative integer written as ASCII digits only, as every path id and
// query number (limit, offset) is read: a sign, white space or any other form ("+5",
// " 5", "5.0", "0x5") is not a number, so each of them gets the answer of any other
// non-number. Leading zeros are allowed ("05" is 5). ok is false also for a value beyond
// int64.
func Decimal(s string) (n int64, ok bool) {
	if s == "" || strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' }) >= 0 {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}
