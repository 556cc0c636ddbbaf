package signing

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// MinHMACSecretSize is the shortest HMAC secret a Keyring accepts (32 bytes = SHA-256's
// output size, RFC 2104's recommended minimum).
const MinHMACSecretSize = 32

// KeyringVersion is the "version" of the document MarshalKeyring writes.
const KeyringVersion = 1

var (
	// ErrInvalidKeyring: a keyring document or its parts are missing or wrong. Messages
	// name the offending field, never its contents.
	ErrInvalidKeyring = errors.New("signing: invalid keyring")
	// ErrEmptyKeyring: a method was called on a zero Keyring.
	ErrEmptyKeyring = errors.New("signing: empty keyring")
)

// Keyring holds the service's three secrets: the RSA private key (offline exports,
// release manifests), the HMAC secret (plain export "sig") and the AES-256 key (".lic"
// files). Every replica must load the same keyring. It may also hold a staged next RSA
// key, which signs nothing: its public half is published (GET /v1/public-keys) so that
// vendors ship apps that accept it before it is promoted to sign (docs/licensing.md,
// Rotating).
//
// A Keyring does not reveal its secrets when printed, logged or JSON-encoded: fmt (every
// verb, including %+v and %#v), slog and encoding/json all get a summary with the key id;
// the material is reachable only through a closure, which fmt and other reflection-based
// printers show as a bare address, so even printing a struct that holds a Keyring in an
// unexported field (where fmt cannot call the methods above and, for verbs such as %s or
// %q, dereferences plain pointers) reveals nothing. MarshalKeyring is the only way to get
// the secrets out. Copying a Keyring value shares the (immutable) material.
type Keyring struct {
	secrets func() *material
}

// mat returns the material, nil for a zero Keyring.
func (k Keyring) mat() *material {
	if k.secrets == nil {
		return nil
	}
	return k.secrets()
}

type material struct {
	priv   *rsa.PrivateKey
	hmac   []byte
	aes    []byte
	kid    string
	pubPEM string
	// next is the staged RSA key (nil: none), with its id and public PEM.
	next       *rsa.PrivateKey
	nextKid    string
	nextPubPEM string
}

// keyringDoc is the document MarshalKeyring writes and ParseKeyring reads, e.g. as a
// Kubernetes Secret mounted as a file:
//
//	{
//	  "version": 1,
//	  "key_id": "3f1c0e5b9a7d2c44",          // optional on input; checked when present
//	  "rsa_private_key": "-----BEGIN PRIVATE KEY-----\n...", // PKCS #8 (PKCS #1 accepted)
//	  "next_rsa_private_key": "-----BEGIN PRIVATE KEY-----\n...", // optional: staged, signs nothing
//	  "hmac_secret": "<standard base64, >= 32 bytes>",
//	  "aes_key": "<standard base64, exactly 32 bytes>"
//	}
//
// An operator can build one with:
//
//	openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out k.pem
//	jq -n --rawfile k k.pem --arg h "$(openssl rand -base64 32)" --arg a "$(openssl rand -base64 32)" \
//	  '{version:1, rsa_private_key:$k, hmac_secret:$h, aes_key:$a}'
type keyringDoc struct {
	Version       int    `json:"version"`
	KeyID         string `json:"key_id,omitempty"`
	RSAPrivateKey string `json:"rsa_private_key"`
	// NextRSAPrivateKey is the staged next RSA key: published, not signing.
	NextRSAPrivateKey string `json:"next_rsa_private_key,omitempty"`
	HMACSecret        string `json:"hmac_secret"`
	AESKey            string `json:"aes_key"`
}

// NewKeyring generates a fresh keyring: a DefaultRSABits RSA key and random 32-byte HMAC
// and AES keys.
func NewKeyring() (*Keyring, error) {
	priv, err := GenerateRSAKey(DefaultRSABits)
	if err != nil {
		return nil, err
	}
	h := make([]byte, MinHMACSecretSize)
	a := make([]byte, AESKeySize)
	if _, err := rand.Read(h); err != nil {
		return nil, err
	}
	if _, err := rand.Read(a); err != nil {
		return nil, err
	}
	return NewKeyringFrom(priv, h, a)
}

// NewKeyringFrom builds a keyring from its parts (copied). The RSA key must have at least
// MinRSABits, the HMAC secret at least MinHMACSecretSize bytes, the AES key AESKeySize.
func NewKeyringFrom(priv *rsa.PrivateKey, hmacSecret, aesKey []byte) (*Keyring, error) {
	if priv == nil {
		return nil, fmt.Errorf("%w: missing RSA private key", ErrInvalidKeyring)
	}
	if priv.N == nil || priv.N.BitLen() < MinRSABits {
		return nil, fmt.Errorf("%w: %w", ErrInvalidKeyring, ErrKeyTooSmall)
	}
	if err := priv.Validate(); err != nil {
		return nil, fmt.Errorf("%w: inconsistent RSA private key", ErrInvalidKeyring)
	}
	if len(hmacSecret) < MinHMACSecretSize {
		return nil, fmt.Errorf("%w: hmac_secret must be at least %d bytes, got %d", ErrInvalidKeyring, MinHMACSecretSize, len(hmacSecret))
	}
	if len(aesKey) != AESKeySize {
		return nil, fmt.Errorf("%w: aes_key must be %d bytes, got %d", ErrInvalidKeyring, AESKeySize, len(aesKey))
	}
	kid, err := KeyID(&priv.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidKeyring, err)
	}
	pubPEM, err := PublicKeyPEM(&priv.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidKeyring, err)
	}
	m := &material{
		priv:   priv,
		hmac:   bytes.Clone(hmacSecret),
		aes:    bytes.Clone(aesKey),
		kid:    kid,
		pubPEM: pubPEM,
	}
	return &Keyring{secrets: func() *material { return m }}, nil
}

// ParseKeyring reads the JSON document described at keyringDoc (unknown fields are
// refused, so a misspelt field name fails loudly). Errors never quote the document.
func ParseKeyring(data []byte) (*Keyring, error) {
	var doc keyringDoc
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		var unknown string
		if msg := err.Error(); strings.HasPrefix(msg, "json: unknown field ") {
			unknown = ": " + msg[len("json: "):]
		}
		return nil, fmt.Errorf("%w: not a keyring JSON document%s", ErrInvalidKeyring, unknown)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: trailing data after the JSON document", ErrInvalidKeyring)
	}
	if doc.Version != KeyringVersion {
		return nil, fmt.Errorf("%w: version %d, want %d", ErrInvalidKeyring, doc.Version, KeyringVersion)
	}
	if doc.RSAPrivateKey == "" || doc.HMACSecret == "" || doc.AESKey == "" {
		return nil, fmt.Errorf("%w: rsa_private_key, hmac_secret and aes_key are required", ErrInvalidKeyring)
	}
	priv, err := ParsePrivateKeyPEM(doc.RSAPrivateKey)
	if err != nil {
		return nil, fmt.Errorf("%w: rsa_private_key: %w", ErrInvalidKeyring, err)
	}
	h, err := base64.StdEncoding.DecodeString(strings.TrimSpace(doc.HMACSecret))
	if err != nil {
		return nil, fmt.Errorf("%w: hmac_secret is not standard base64", ErrInvalidKeyring)
	}
	a, err := base64.StdEncoding.DecodeString(strings.TrimSpace(doc.AESKey))
	if err != nil {
		return nil, fmt.Errorf("%w: aes_key is not standard base64", ErrInvalidKeyring)
	}
	k, err := NewKeyringFrom(priv, h, a)
	if err != nil {
		return nil, err
	}
	if doc.KeyID != "" && doc.KeyID != k.KeyID() {
		return nil, fmt.Errorf("%w: key_id %q does not match the RSA key (%s)", ErrInvalidKeyring, doc.KeyID, k.KeyID())
	}
	if doc.NextRSAPrivateKey == "" {
		return k, nil
	}
	next, err := ParsePrivateKeyPEM(doc.NextRSAPrivateKey)
	if err != nil {
		return nil, fmt.Errorf("%w: next_rsa_private_key: %w", ErrInvalidKeyring, err)
	}
	return k.WithNextRSAKey(next)
}

// WithNextRSAKey returns k with next staged as its next RSA key (in place of any staged
// before): the same keys sign, and next's public half is published beside the current
// one. next must have at least MinRSABits and differ from the current key.
func (k Keyring) WithNextRSAKey(next *rsa.PrivateKey) (*Keyring, error) {
	m := k.mat()
	if m == nil {
		return nil, ErrEmptyKeyring
	}
	if next == nil || next.N == nil || next.N.BitLen() < MinRSABits {
		return nil, fmt.Errorf("%w: next_rsa_private_key: %w", ErrInvalidKeyring, ErrKeyTooSmall)
	}
	if err := next.Validate(); err != nil {
		return nil, fmt.Errorf("%w: next_rsa_private_key: inconsistent RSA private key", ErrInvalidKeyring)
	}
	if next.PublicKey.Equal(&m.priv.PublicKey) {
		return nil, fmt.Errorf("%w: next_rsa_private_key is the current rsa_private_key", ErrInvalidKeyring)
	}
	kid, err := KeyID(&next.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("%w: next_rsa_private_key: %w", ErrInvalidKeyring, err)
	}
	pubPEM, err := PublicKeyPEM(&next.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("%w: next_rsa_private_key: %w", ErrInvalidKeyring, err)
	}
	staged := *m
	staged.next, staged.nextKid, staged.nextPubPEM = next, kid, pubPEM
	return &Keyring{secrets: func() *material { return &staged }}, nil
}

// MarshalKeyring writes k as the document ParseKeyring reads, secrets included. It is the
// only function that exposes key material.
func MarshalKeyring(k *Keyring) ([]byte, error) {
	if k == nil || k.mat() == nil {
		return nil, ErrEmptyKeyring
	}
	m := k.mat()
	privPEM, err := PrivateKeyPEM(m.priv)
	if err != nil {
		return nil, err
	}
	var nextPEM string
	if m.next != nil {
		if nextPEM, err = PrivateKeyPEM(m.next); err != nil {
			return nil, err
		}
	}
	return json.MarshalIndent(keyringDoc{
		Version:           KeyringVersion,
		KeyID:             m.kid,
		RSAPrivateKey:     privPEM,
		NextRSAPrivateKey: nextPEM,
		HMACSecret:        base64.StdEncoding.EncodeToString(m.hmac),
		AESKey:            base64.StdEncoding.EncodeToString(m.aes),
	}, "", "  ")
}

// KeyID is the RSA public key's id (see the KeyID function); "" for a zero Keyring.
func (k Keyring) KeyID() string {
	m := k.mat()
	if m == nil {
		return ""
	}
	return m.kid
}

// RSABits is the RSA modulus size; 0 for a zero Keyring.
func (k Keyring) RSABits() int {
	m := k.mat()
	if m == nil {
		return 0
	}
	return m.priv.N.BitLen()
}

// PublicKey returns the RSA public key (nil for a zero Keyring).
func (k Keyring) PublicKey() *rsa.PublicKey {
	m := k.mat()
	if m == nil {
		return nil
	}
	return &m.priv.PublicKey
}

// PublicKeyPEM returns the SPKI PEM served by GET /v1/public-key ("" for a zero Keyring).
func (k Keyring) PublicKeyPEM() string {
	m := k.mat()
	if m == nil {
		return ""
	}
	return m.pubPEM
}

// NextKeyID is the staged next RSA key's id; "" when none is staged.
func (k Keyring) NextKeyID() string {
	m := k.mat()
	if m == nil || m.next == nil {
		return ""
	}
	return m.nextKid
}

// NextPublicKey is the staged next RSA key's public half; nil when none is staged.
func (k Keyring) NextPublicKey() *rsa.PublicKey {
	m := k.mat()
	if m == nil || m.next == nil {
		return nil
	}
	return &m.next.PublicKey
}

// NextPublicKeyPEM is the staged next key's SPKI PEM; "" when none is staged.
func (k Keyring) NextPublicKeyPEM() string {
	m := k.mat()
	if m == nil || m.next == nil {
		return ""
	}
	return m.nextPubPEM
}

// SignRSA signs payload (see SignRSA).
func (k Keyring) SignRSA(payload []byte) (string, error) {
	m := k.mat()
	if m == nil {
		return "", ErrEmptyKeyring
	}
	return SignRSA(m.priv, payload)
}

// VerifyRSA verifies a signature made by SignRSA with this keyring's key.
func (k Keyring) VerifyRSA(payload []byte, sigB64 string) error {
	m := k.mat()
	if m == nil {
		return ErrEmptyKeyring
	}
	return VerifyRSA(&m.priv.PublicKey, payload, sigB64)
}

// SignJSON marshals v canonically and RSA-signs the result, returning both.
func (k Keyring) SignJSON(v any) (payload []byte, sigB64 string, err error) {
	if payload, err = Marshal(v); err != nil {
		return nil, "", err
	}
	if sigB64, err = k.SignRSA(payload); err != nil {
		return nil, "", err
	}
	return payload, sigB64, nil
}

// SignHMAC returns the hex HMAC-SHA256 of payload (see SignHMAC); "" for a zero Keyring.
func (k Keyring) SignHMAC(payload []byte) string {
	m := k.mat()
	if m == nil {
		return ""
	}
	return SignHMAC(m.hmac, payload)
}

// VerifyHMAC checks a hex HMAC (see VerifyHMAC); false for a zero Keyring.
func (k Keyring) VerifyHMAC(payload []byte, sigHex string) bool {
	m := k.mat()
	if m == nil {
		return false
	}
	return VerifyHMAC(m.hmac, payload, sigHex)
}

// HMACJSON marshals v canonically and returns the bytes with their hex HMAC.
func (k Keyring) HMACJSON(v any) (payload []byte, sigHex string, err error) {
	m := k.mat()
	if m == nil {
		return nil, "", ErrEmptyKeyring
	}
	if payload, err = Marshal(v); err != nil {
		return nil, "", err
	}
	return payload, SignHMAC(m.hmac, payload), nil
}

// Seal encrypts plaintext with the AES key (see Seal).
func (k Keyring) Seal(plaintext []byte) ([]byte, error) {
	m := k.mat()
	if m == nil {
		return nil, ErrEmptyKeyring
	}
	return Seal(m.aes, plaintext)
}

// Open decrypts a Seal blob (see Open for the errors).
func (k Keyring) Open(blob []byte) ([]byte, error) {
	m := k.mat()
	if m == nil {
		return nil, ErrEmptyKeyring
	}
	return Open(m.aes, blob)
}

// String is a summary without secrets, e.g.
// "signing.Keyring{key_id: 3f1c0e5b9a7d2c44, rsa_bits: 2048, secrets: redacted}".
func (k Keyring) String() string {
	m := k.mat()
	if m == nil {
		return "signing.Keyring{empty}"
	}
	if m.next != nil {
		return fmt.Sprintf("signing.Keyring{key_id: %s, rsa_bits: %d, next_key_id: %s, secrets: redacted}", m.kid, k.RSABits(), m.nextKid)
	}
	return fmt.Sprintf("signing.Keyring{key_id: %s, rsa_bits: %d, secrets: redacted}", m.kid, k.RSABits())
}

// GoString is String, so %#v does not dump fields.
func (k Keyring) GoString() string { return k.String() }

// Format makes every fmt verb (%d, %x, %+v, ...) print String, never the fields.
func (k Keyring) Format(f fmt.State, verb rune) {
	if verb == 'q' {
		fmt.Fprintf(f, "%q", k.String())
		return
	}
	io.WriteString(f, k.String())
}

// LogValue gives slog the key id and size only.
func (k Keyring) LogValue() slog.Value {
	m := k.mat()
	if m == nil {
		return slog.StringValue("empty")
	}
	attrs := []slog.Attr{slog.String("key_id", m.kid), slog.Int("rsa_bits", k.RSABits())}
	if m.next != nil {
		attrs = append(attrs, slog.String("next_key_id", m.nextKid))
	}
	return slog.GroupValue(append(attrs, slog.String("secrets", "redacted"))...)
}

// MarshalJSON writes a summary without secrets: {"key_id":…,"rsa_bits":…,"secrets":"redacted"}.
// Use MarshalKeyring to export the secrets.
func (k Keyring) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		KeyID   string `json:"key_id"`
		RSABits int    `json:"rsa_bits"`
		Secrets string `json:"secrets"`
	}{k.KeyID(), k.RSABits(), "redacted"})
}

// UnmarshalJSON refuses: a Keyring decoded as part of a larger document would otherwise
// stay silently empty. Read the secrets document with ParseKeyring.
func (k *Keyring) UnmarshalJSON([]byte) error {
	return errors.New("signing: decode a Keyring with ParseKeyring, not encoding/json")
}
