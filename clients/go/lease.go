package keyhouse

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"strconv"
	"strings"
	"time"
)

// JWK is one lease signing key as GET /v1/lease-keys lists it.
type JWK struct {
	Kty    string `json:"kty"`
	Crv    string `json:"crv"`
	X      string `json:"x"`
	Kid    string `json:"kid"`
	Use    string `json:"use,omitempty"`
	Alg    string `json:"alg,omitempty"`
	Status string `json:"status,omitempty"`
}

// JWKS is a set of lease keys.
type JWKS struct {
	Keys []JWK `json:"keys"`
}

// ParseJWKS reads a key set (the JSON of GET /v1/lease-keys).
func ParseJWKS(data []byte) (JWKS, error) {
	var set JWKS
	err := json.Unmarshal(data, &set)
	return set, err
}

func (s JWKS) key(kid string) ed25519.PublicKey {
	for _, k := range s.Keys {
		if k.Kid == kid && k.Kty == "OKP" && k.Crv == "Ed25519" {
			if x, err := base64.RawURLEncoding.DecodeString(k.X); err == nil && len(x) == ed25519.PublicKeySize {
				return ed25519.PublicKey(x)
			}
		}
	}
	return nil
}

// merge returns s with the keys of other whose kid s lacks.
func (s JWKS) merge(other JWKS) JWKS {
	out := JWKS{Keys: append([]JWK(nil), s.Keys...)}
	for _, k := range other.Keys {
		if s.key(k.Kid) == nil {
			out.Keys = append(out.Keys, k)
		}
	}
	return out
}

// LeaseClaims are the claims of a lease (a JWS signed with Ed25519).
type LeaseClaims struct {
	Issuer           string             `json:"iss"`
	Subject          string             `json:"sub"`
	Audience         string             `json:"aud"`
	ID               string             `json:"jti"`
	IssuedAt         int64              `json:"iat"`
	ExpiresAt        int64              `json:"exp"`
	RenewAfter       int64              `json:"renew_after"`
	Tier             string             `json:"tier"`
	Status           string             `json:"status"`
	LicenseExpiresAt *int64             `json:"license_expires_at"`
	Limits           map[string]float64 `json:"limits"`
	Entitlements     []string           `json:"entitlements"`
	InstanceID       string             `json:"instance_id"`
	Floating         bool               `json:"floating"`
	Components       map[string]string  `json:"components"`
	// TenantID is the hosted tenant whose keys sign the lease ("" self-hosted).
	TenantID string `json:"tenant_id,omitempty"`
	Nonce    string `json:"nonce,omitempty"`
}

// ClockTolerance is how far a lease's iat may be ahead of the local clock, and how far
// the clock may fall back below the newest iat seen, before the verdict is clock_tampered.
const ClockTolerance = 5 * time.Minute

// ClockNoncePrefix starts the nonce the SDKs send with every lease request: the local
// clock at the request, in Unix seconds. The server signs it into the lease, so the lease
// itself says how far this machine's clock was from the server's when it was asked for
// (ClockOffset), and an edited store cannot change that.
const ClockNoncePrefix = "local-time:"

// clockNonce is the nonce of a lease request sent at now.
func clockNonce(now time.Time) string {
	return ClockNoncePrefix + strconv.FormatInt(now.Unix(), 10)
}

// ClockOffset is how far the server's clock was ahead of this machine's when the lease
// was asked for: its iat less the local time the SDK's nonce carries (negative when the
// local clock is ahead; 0 for a lease without that nonce). The lease's times are the
// server's: its renew_after and exp are judged on the local clock plus this offset, so a
// machine whose clock is wrong is neither renewing all the time nor unlicensed online.
func (c *LeaseClaims) ClockOffset() time.Duration {
	asked, ok := strings.CutPrefix(c.Nonce, ClockNoncePrefix)
	if !ok {
		return 0
	}
	t, err := strconv.ParseInt(asked, 10, 64)
	if err != nil {
		return 0
	}
	return time.Duration(c.IssuedAt-t) * time.Second
}

// LeaseCheck is what a lease is checked against.
type LeaseCheck struct {
	ProductID  string
	LicenseKey string
	Now        time.Time
	// NewestIssuedAt is the newest iat this installation has seen (0: none).
	NewestIssuedAt int64
	// Components are this machine's (hashed) components.
	Components map[string]string
}

// VerifyLease checks a lease and returns its claims, or an *Error whose Code is the
// verdict: invalid_lease (malformed, unknown key, bad signature, not EdDSA),
// wrong_product (aud), wrong_license (sub), clock_tampered, expired, machine_mismatch
// (the lease is bound to components of which this machine has none).
//
// exp is judged on the lease's clock: c.Now plus the lease's ClockOffset. The offset
// only corrects a clock that was already wrong when the lease was asked for: it cannot
// lengthen a lease, because a clock moved back after the request moves the lease's clock
// back as well, and more than ClockTolerance below the request is clock_tampered like a
// clock behind the server's (iat, or the newest iat seen, more than ClockTolerance ahead
// of the local clock).
func VerifyLease(token string, keys JWKS, c LeaseCheck) (*LeaseClaims, error) {
	invalid := func(why string) (*LeaseClaims, error) {
		return nil, &Error{Code: "invalid_lease", Message: "lease " + why}
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return invalid("is not a JWS")
	}
	var header struct {
		Alg string `json:"alg"`
		Kid string `json:"kid"`
		Typ string `json:"typ"`
	}
	hb, err1 := base64.RawURLEncoding.DecodeString(parts[0])
	pb, err2 := base64.RawURLEncoding.DecodeString(parts[1])
	sig, err3 := base64.RawURLEncoding.DecodeString(parts[2])
	if err1 != nil || err2 != nil || err3 != nil || json.Unmarshal(hb, &header) != nil {
		return invalid("is not a JWS")
	}
	if header.Alg != "EdDSA" {
		return invalid("is not signed with EdDSA")
	}
	pub := keys.key(header.Kid)
	if pub == nil {
		return nil, &Error{Code: "invalid_lease", Message: "lease signed by unknown key " + header.Kid, err: errUnknownKid}
	}
	if !ed25519.Verify(pub, []byte(parts[0]+"."+parts[1]), sig) {
		return invalid("signature does not verify")
	}
	var claims LeaseClaims
	if err := json.Unmarshal(pb, &claims); err != nil {
		return invalid("claims are malformed")
	}
	leaseNow := c.Now.Add(claims.ClockOffset()).Unix()
	switch {
	case claims.Audience != c.ProductID:
		return &claims, &Error{Code: "wrong_product", Message: "lease is for another product"}
	case c.LicenseKey != "" && claims.Subject != c.LicenseKey:
		return &claims, &Error{Code: "wrong_license", Message: "lease is for another license"}
	case clockBehind(c.Now, claims.IssuedAt, c.NewestIssuedAt):
		return &claims, &Error{Code: "clock_tampered", Message: "the local clock is behind the lease's issue time"}
	case clockBehind(time.Unix(leaseNow, 0), claims.IssuedAt, c.NewestIssuedAt):
		return &claims, &Error{Code: "clock_tampered", Message: "the local clock moved back since the lease was asked for"}
	case leaseNow >= claims.ExpiresAt:
		return &claims, &Error{Code: "expired", Message: "lease expired"}
	case !componentsMatch(claims.Components, c.Components):
		return &claims, &Error{Code: "machine_mismatch", Message: "lease is bound to another machine"}
	}
	return &claims, nil
}

// clockBehind: the clock is more than ClockTolerance behind the lease's iat or the newest
// iat seen (the server's clock).
func clockBehind(now time.Time, iat, newestIAT int64) bool {
	limit := now.Add(ClockTolerance).Unix()
	return iat > limit || newestIAT > limit
}

// componentsMatch: a lease bound to components needs at least one of them equal here
// (the server applies the policy's stricter rule at every renewal).
func componentsMatch(bound, local map[string]string) bool {
	if len(bound) == 0 {
		return true
	}
	for name, v := range bound {
		if local[name] == v {
			return true
		}
	}
	return false
}

type sentinel string

func (s sentinel) Error() string { return string(s) }

const errUnknownKid = sentinel("unknown kid")
