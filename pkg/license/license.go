// Package license is the license vocabulary several modules share: the key format
// (licensing issues and reads keys, the gateway counts the per-license-key rate tier by
// them) and api.md's allowlist of limit keys (licensing validates limits, activations
// meters usage against them).
package license

import (
	"crypto/rand"
	"strings"
	"time"
)

// EventRetention is how long licensing remembers a deletion whose purge may still be
// pending in activations: as long as the event stream keeps the license.deleted event
// (pkg/events.StreamMaxAge), from which a consumer that was down catches up.
const EventRetention = 7 * 24 * time.Hour

// ChangedSubject is the core NATS subject (no stream: it is outside the event stream) on
// which licensing announces that a license row changed (revoked, reactivated, deleted, new
// terms or notes); the payload is the license key. Every process that caches licenses
// (pkg/licensecache) drops the key when it hears it.
const ChangedSubject = "keyhouse.licenses.changed"

// SeatRemovedSubject is the core NATS subject on which activations announces that a seat of
// a license went away (the payload is the license key). Only caches of answers that depend
// on seats (the gateway's validate-license answers) follow it; license rows do not change.
const SeatRemovedSubject = "keyhouse.seats.removed"

// ReleasesChangedSubject is the core NATS subject on which releases announces that a
// release was registered or unpublished (the payload is empty). Caches of check-update's
// answers (the gateway's) empty themselves.
const ReleasesChangedSubject = "keyhouse.releases.changed"

// Keys are 28 Crockford base32 characters in seven groups of four, e.g.
// "7KQ2-M9XD-4HRT-0BWN-ZC3E-P6YA-1GVF": 140 bits from the CSPRNG, read aloud without
// spelling (no I, L, O or U to confuse with 1, 0 or V). Typed back, a key is forgiving: case,
// spaces, missing dashes, and the look-alikes o/O → 0 and i/I/l/L → 1 are accepted.
const (
	keyAlphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
	keyChars    = 28
	keyGroup    = 4
)

// NewKey returns a fresh key.
func NewKey() string {
	// 32 divides 256, so a byte mod 32 is uniform.
	var b [keyChars]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	var sb strings.Builder
	for i, c := range b {
		if i > 0 && i%keyGroup == 0 {
			sb.WriteByte('-')
		}
		sb.WriteByte(keyAlphabet[c%32])
	}
	return sb.String()
}

// CanonicalKey returns the key as issued for input that a person may have typed, or the
// input unchanged when it cannot be a key (it then matches nothing, which is the answer
// for any unknown string). Everything that counts or looks up by key goes through it, so
// that two spellings of one key are one key.
func CanonicalKey(input string) string {
	if issued(input) {
		// What apps send, and what every hop after the first passes on: every hot route
		// canonicalizes its key at least twice, and building the copy took 0.7 µs and
		// four allocations a time.
		return input
	}
	var chars []byte
	for _, r := range input {
		switch {
		case r == '-' || r == ' ':
			continue
		case r >= 'a' && r <= 'z':
			r -= 'a' - 'A'
		}
		switch r {
		case 'O':
			r = '0'
		case 'I', 'L':
			r = '1'
		}
		if r > 0x7f || !inAlphabet[r] {
			return input
		}
		chars = append(chars, byte(r))
	}
	if len(chars) != keyChars {
		return input
	}
	var sb strings.Builder
	for i, c := range chars {
		if i > 0 && i%keyGroup == 0 {
			sb.WriteByte('-')
		}
		sb.WriteByte(c)
	}
	return sb.String()
}

// issued reports whether input is a key written as issued (NewKey's form), which
// CanonicalKey returns as it is.
func issued(input string) bool {
	if len(input) != keyChars+keyChars/keyGroup-1 {
		return false
	}
	for i := 0; i < len(input); i++ {
		if (i+1)%(keyGroup+1) == 0 {
			if input[i] != '-' {
				return false
			}
		} else if !inAlphabet[input[i]] {
			return false
		}
	}
	return true
}

// inAlphabet says which bytes are characters of keyAlphabet.
var inAlphabet = func() (in [256]bool) {
	for i := 0; i < len(keyAlphabet); i++ {
		in[keyAlphabet[i]] = true
	}
	return in
}()

// AllowedLimitKeys is api.md's allowlist in api.md's order (the order a 400 lists them
// in): the only limit keys, and so the only metric names.
var AllowedLimitKeys = []string{
	"users", "seats", "admins", "projects", "environments",
	"tenants", "api_calls_per_day", "rate_limit_rps",
	"concurrent_sessions", "features",
}

// LimitKeys is AllowedLimitKeys as a set.
var LimitKeys = func() map[string]bool {
	set := make(map[string]bool, len(AllowedLimitKeys))
	for _, k := range AllowedLimitKeys {
		set[k] = true
	}
	return set
}()
