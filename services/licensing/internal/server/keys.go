package server

import (
	"crypto/rand"
	"strings"
)

// License keys are 28 Crockford base32 characters in seven groups of four, e.g.
// "7KQ2-M9XD-4HRT-0BWN-ZC3E-P6YA-1GVF": 140 bits from the CSPRNG, read aloud without
// spelling (no I, L, O or U to confuse with 1, 0 or V). Typed back, a key is forgiving: case,
// spaces, missing dashes, and the look-alikes o/O → 0 and i/I/l/L → 1 are accepted.
const (
	keyAlphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
	keyChars    = 28
	keyGroup    = 4
)

// newLicenseKey returns a fresh key.
func newLicenseKey() string {
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

// canonicalKey returns the key as issued for input that a person may have typed, or the
// input unchanged when it cannot be a key (it then matches nothing, which is the answer
// for any unknown string).
func canonicalKey(input string) string {
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
		if r > 0x7f || !strings.ContainsRune(keyAlphabet, r) {
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
