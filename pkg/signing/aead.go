package signing

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
)

// The sealed ".lic" format, version 1:
//
//	"KHL1" (4 bytes) | nonce (12 random bytes) | AES-256-GCM ciphertext+tag (len(plaintext)+16)
//
// The 4-byte header is authenticated as additional data, so a future version cannot be
// confused with this one. A fresh random nonce per Seal is safe for far more files than
// one key will ever seal (NIST's bound for random 96-bit nonces is 2^32 messages).
const (
	sealMagic    = "KHL1"
	sealNonceLen = 12
	sealTagLen   = 16
	// SealOverhead is how many bytes Seal adds to the plaintext.
	SealOverhead = len(sealMagic) + sealNonceLen + sealTagLen
	// AESKeySize is the AES-256 key length Seal and Open require.
	AESKeySize = 32
)

var (
	// ErrMalformed: the blob is not a sealed license of a known version, or is truncated.
	ErrMalformed = errors.New("signing: malformed sealed license")
	// ErrTampered: the blob has the right shape but fails authentication: it was modified,
	// or sealed under another key.
	ErrTampered = errors.New("signing: sealed license failed authentication")
	// ErrKeySize: the AES key is not AESKeySize bytes (a configuration error).
	ErrKeySize = errors.New("signing: AES key must be 32 bytes")
)

func newGCM(key []byte) (cipher.AEAD, error) {
	if len(key) != AESKeySize {
		return nil, ErrKeySize
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, ErrKeySize
	}
	return cipher.NewGCM(block)
}

// Seal encrypts and authenticates plaintext under a 32-byte key (see the format above).
func Seal(key, plaintext []byte) ([]byte, error) {
	aead, err := newGCM(key)
	if err != nil {
		return nil, err
	}
	out := make([]byte, len(sealMagic)+sealNonceLen, SealOverhead+len(plaintext))
	copy(out, sealMagic)
	nonce := out[len(sealMagic):]
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return aead.Seal(out, nonce, plaintext, out[:len(sealMagic)]), nil
}

// Open reverses Seal. It returns ErrMalformed when blob is not in the format (wrong magic
// or version, shorter than SealOverhead), ErrTampered when authentication fails, and
// ErrKeySize for a bad key; it never panics, whatever blob holds.
func Open(key, blob []byte) ([]byte, error) {
	aead, err := newGCM(key)
	if err != nil {
		return nil, err
	}
	if len(blob) < SealOverhead || string(blob[:len(sealMagic)]) != sealMagic {
		return nil, ErrMalformed
	}
	header := blob[:len(sealMagic)]
	nonce := blob[len(sealMagic) : len(sealMagic)+sealNonceLen]
	pt, err := aead.Open(nil, nonce, blob[len(sealMagic)+sealNonceLen:], header)
	if err != nil {
		return nil, ErrTampered
	}
	if pt == nil {
		pt = []byte{}
	}
	return pt, nil
}
