package server

import (
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/keyhouse/keyhouse/pkg/signing"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	"github.com/keyhouse/keyhouse/services/activations/internal/store"
)

// A lease's JWS, assembled without the generic canonical encoder: in a profile of
// CreateLease, building the claims as a signing.Object and marshaling it by reflection
// cost as much CPU as the Ed25519 signature. The bytes are signing.Marshal's of
// leaseClaims (TestLeaseClaimsMatchTheCanonicalEncoder), so verifiers see no change.

// leaseSigner is an opened lease key with its JWS header, encoded once per process and kid.
type leaseSigner struct {
	priv ed25519.PrivateKey
	// header is base64url of the protected header, followed by ".".
	header string
}

func newLeaseSigner(kid string, priv ed25519.PrivateKey) (*leaseSigner, error) {
	header, err := signing.Marshal(signing.NewObject().Add("alg", "EdDSA").Add("kid", kid).Add("typ", leaseTokenType))
	if err != nil {
		return nil, err
	}
	return &leaseSigner{priv: priv, header: base64.RawURLEncoding.EncodeToString(header) + "."}, nil
}

// sign is the JWS compact serialization (RFC 7515) of the claims' bytes, signed with
// EdDSA (RFC 8037): base64url(header) "." base64url(claims) "." base64url(signature).
func (s *leaseSigner) sign(claims []byte) string {
	enc := base64.RawURLEncoding
	input := make([]byte, 0, len(s.header)+enc.EncodedLen(len(claims))+1+enc.EncodedLen(ed25519.SignatureSize))
	input = append(input, s.header...)
	input = enc.AppendEncode(input, claims)
	sig := ed25519.Sign(s.priv, input)
	return string(enc.AppendEncode(append(input, '.'), sig))
}

// appendLeaseClaims writes the claims of addendum §12 in its order, as
// signing.Marshal(leaseClaims(...)) writes them. tenant is the hosted tenant whose keys
// sign the lease ("" self-hosted: no tenant_id claim): an app that meets an unknown kid
// fetches that tenant's key set without being told its tenant id.
func appendLeaseClaims(b []byte, issuer, tenant string, l *licensingv1.License, policy store.Policy, seat *store.LeaseSeat, iat, exp, renewAfter time.Time, nonce *string, jti string) ([]byte, error) {
	var err error
	str := func(name, value string) {
		if err == nil {
			b = append(b, name...)
			b, err = signing.AppendString(b, value)
		}
	}
	num := func(name string, n int64) {
		if err == nil {
			if n > signing.MaxSafeInteger || n < -signing.MaxSafeInteger {
				err = fmt.Errorf("%w: %s %d", signing.ErrUnsupportedValue, name, n)
				return
			}
			b = strconv.AppendInt(append(b, name...), n, 10)
		}
	}
	str(`{"iss":`, issuer)
	str(`,"sub":`, l.GetKey())
	str(`,"aud":`, l.GetProductId())
	str(`,"jti":`, jti)
	num(`,"iat":`, iat.Unix())
	num(`,"exp":`, exp.Unix())
	num(`,"renew_after":`, renewAfter.Unix())
	str(`,"tier":`, l.GetTier())
	str(`,"status":`, l.GetStatus())
	if e := l.GetExpiresAt(); e != nil {
		num(`,"license_expires_at":`, e.AsTime().Unix())
	} else if err == nil {
		b = append(b, `,"license_expires_at":null`...)
	}
	if err != nil {
		return nil, err
	}
	b = append(b, `,"limits":`...)
	if fields := l.GetLimits().GetFields(); len(fields) > 0 {
		if b, err = signing.AppendValue(b, l.GetLimits().AsMap()); err != nil {
			return nil, err
		}
	} else {
		b = append(b, "{}"...)
	}
	b = append(b, `,"entitlements":[`...)
	for i, e := range policy.Entitlements {
		if i > 0 {
			b = append(b, ',')
		}
		if b, err = signing.AppendString(b, e); err != nil {
			return nil, err
		}
	}
	b = append(b, ']')
	str(`,"instance_id":`, seat.Instance)
	if err != nil {
		return nil, err
	}
	b = strconv.AppendBool(append(b, `,"floating":`...), policy.Floating)
	if b, err = appendComponents(append(b, `,"components":`...), seat.Components); err != nil {
		return nil, err
	}
	if nonce != nil {
		str(`,"nonce":`, *nonce)
	}
	// Last, after every claim the lease's contract lists in its order.
	if tenant != "" {
		str(`,"tenant_id":`, tenant)
	}
	if err != nil {
		return nil, err
	}
	return append(b, '}'), nil
}

// appendComponents writes a seat's bound components (null: unbound) with their names in
// Marshal's order.
func appendComponents(b []byte, components map[string]string) ([]byte, error) {
	if components == nil {
		return append(b, "null"...), nil
	}
	names := make([]string, 0, len(components))
	for name := range components {
		names = append(names, name)
	}
	signing.SortKeys(names)
	b = append(b, '{')
	var err error
	for i, name := range slices.Clip(names) {
		if i > 0 {
			b = append(b, ',')
		}
		if b, err = signing.AppendString(b, name); err != nil {
			return nil, err
		}
		if b, err = signing.AppendString(append(b, ':'), components[name]); err != nil {
			return nil, err
		}
	}
	return append(b, '}'), nil
}
