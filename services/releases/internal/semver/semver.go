// Package semver orders release versions by SemVer 2.0.0 precedence (semver.org §11), in
// a form Postgres can index: Key turns a version into bytes whose plain byte order is
// that precedence, so "the latest release" is the first row of an index scan.
package semver

import (
	"bytes"
	"cmp"
	"strings"
)

// Version is a parsed semantic version. Build metadata is dropped: it never affects
// precedence (§10).
type Version struct {
	// Major, Minor and Patch are the decimal digits, without leading zeros. Strings, not
	// integers: the spec puts no bound on them, and digit strings of equal length
	// compare as the numbers do.
	Major, Minor, Patch string
	// Pre holds the dot-separated pre-release identifiers; empty for a release.
	Pre []string
}

// maxDigits bounds a numeric identifier so its length fits the one-byte prefix of Key.
// Registered versions are at most 100 characters, so only a client's current_version
// could exceed it, and such a string is treated as not a version.
const maxDigits = 255

// Parse reads a SemVer 2.0.0 version. One leading "v" is accepted ("v1.2.3"), as
// node-semver and Go modules accept it, because release tags are often written so.
// Anything else that is not exactly major.minor.patch[-pre][+build] is not a version.
func Parse(s string) (Version, bool) {
	s = strings.TrimPrefix(s, "v")
	if core, build, found := strings.Cut(s, "+"); found {
		if !validIdents(build, func(id string) bool { return id != "" && alnumHyphen(id) }) {
			return Version{}, false
		}
		s = core
	}
	var v Version
	if core, pre, found := strings.Cut(s, "-"); found {
		if !validIdents(pre, validPreIdent) {
			return Version{}, false
		}
		v.Pre = strings.Split(pre, ".")
		s = core
	}
	parts := strings.Split(s, ".")
	if len(parts) != 3 {
		return Version{}, false
	}
	for _, p := range parts {
		if !isNumericIdent(p) {
			return Version{}, false
		}
	}
	v.Major, v.Minor, v.Patch = parts[0], parts[1], parts[2]
	return v, true
}

func validIdents(s string, ok func(string) bool) bool {
	for _, id := range strings.Split(s, ".") {
		if !ok(id) {
			return false
		}
	}
	return true
}

// validPreIdent: a numeric identifier without leading zeros, or an alphanumeric one.
func validPreIdent(id string) bool {
	if id == "" || !alnumHyphen(id) {
		return false
	}
	return !allDigits(id) || isNumericIdent(id)
}

// isNumericIdent: digits, no leading zero unless it is "0" itself.
func isNumericIdent(s string) bool {
	return s != "" && len(s) <= maxDigits && allDigits(s) && (s == "0" || s[0] != '0')
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func alnumHyphen(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '-') {
			return false
		}
	}
	return true
}

// Compare returns -1, 0 or +1 as a has lower, equal or higher precedence than b, by the
// rules of semver.org §11 as written. Key encodes the same order; the tests hold the two
// to each other.
func Compare(a, b Version) int {
	for _, pair := range [][2]string{{a.Major, b.Major}, {a.Minor, b.Minor}, {a.Patch, b.Patch}} {
		if c := compareNumeric(pair[0], pair[1]); c != 0 {
			return c
		}
	}
	switch {
	case len(a.Pre) == 0 && len(b.Pre) == 0:
		return 0
	case len(a.Pre) == 0:
		return 1 // a release outranks its pre-releases
	case len(b.Pre) == 0:
		return -1
	}
	for i := 0; i < len(a.Pre) && i < len(b.Pre); i++ {
		x, y := a.Pre[i], b.Pre[i]
		xn, yn := allDigits(x), allDigits(y)
		var c int
		switch {
		case xn && yn:
			c = compareNumeric(x, y)
		case xn:
			c = -1 // numeric identifiers rank below alphanumeric ones
		case yn:
			c = 1
		default:
			c = strings.Compare(x, y) // ASCII order
		}
		if c != 0 {
			return c
		}
	}
	return cmp.Compare(len(a.Pre), len(b.Pre)) // more identifiers rank higher when all others are equal
}

func compareNumeric(a, b string) int {
	if c := cmp.Compare(len(a), len(b)); c != 0 {
		return c
	}
	return strings.Compare(a, b)
}

// Byte markers of Key. Each part is self-delimiting and order-preserving, so the
// concatenation compares part by part.
const (
	keyNotSemver = 0x00 // every unparseable version: below every version
	keySemver    = 0x01

	preEnd     = 0x00 // end of the pre-release identifiers: fewer identifiers rank lower
	preNumeric = 0x01 // numeric identifiers rank below alphanumeric ones
	preAlnum   = 0x02
	hasPre     = 0x01 // a pre-release ranks below the release
	noPre      = 0x02
	alnumEnd   = 0x00 // below every character, so "alpha" < "alpha1"
)

// NotSemverKey is the Key of every string Parse refuses. It sorts below every version,
// so a non-semver release never beats a parseable one, and all non-semver releases tie
// (the most recently registered wins).
var NotSemverKey = []byte{keyNotSemver}

// Key returns bytes whose lexicographic order is v's precedence: equal keys for equal
// precedence (build metadata differs), bytes.Compare(Key(a), Key(b)) == Compare(a, b).
// A number is its digit count then its digits, which orders numbers without leading
// zeros numerically.
func (v Version) Key() []byte {
	var b bytes.Buffer
	b.WriteByte(keySemver)
	for _, n := range []string{v.Major, v.Minor, v.Patch} {
		writeNumber(&b, n)
	}
	if len(v.Pre) == 0 {
		b.WriteByte(noPre)
		return b.Bytes()
	}
	b.WriteByte(hasPre)
	for _, id := range v.Pre {
		if allDigits(id) {
			b.WriteByte(preNumeric)
			writeNumber(&b, id)
		} else {
			b.WriteByte(preAlnum)
			b.WriteString(id)
			b.WriteByte(alnumEnd)
		}
	}
	b.WriteByte(preEnd)
	return b.Bytes()
}

func writeNumber(b *bytes.Buffer, digits string) {
	b.WriteByte(byte(len(digits)))
	b.WriteString(digits)
}

// KeyOf is Key for a version string, NotSemverKey when it does not parse.
func KeyOf(s string) []byte {
	v, ok := Parse(s)
	if !ok {
		return NotSemverKey
	}
	return v.Key()
}

// Newer reports whether latest should be offered to a client running current: by
// precedence when both are versions; a version is newer than a non-version and never the
// reverse; two non-versions can only be told apart, so any other string is newer (the
// latest of such a channel is simply the most recently registered).
func Newer(latest, current string) bool {
	lv, lok := Parse(latest)
	cv, cok := Parse(current)
	switch {
	case lok && cok:
		return Compare(lv, cv) > 0
	case lok:
		return true
	case cok:
		return false
	}
	return latest != current
}
