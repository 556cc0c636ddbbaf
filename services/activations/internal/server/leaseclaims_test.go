package server

import (
	"crypto/ed25519"
	"encoding/base64"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/pkg/signing"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	"github.com/keyhouse/keyhouse/services/activations/internal/store"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// referenceClaims are the claims of addendum §12, in its order, as the generic canonical
// encoder writes them: what appendLeaseClaims must reproduce.
func referenceClaims(issuer, tenant string, l *licensingv1.License, policy store.Policy, seat *store.LeaseSeat, iat, exp, renewAfter time.Time, nonce *string, jti string) *signing.Object {
	var licenseExpires any
	if e := l.GetExpiresAt(); e != nil {
		licenseExpires = e.AsTime().Unix()
	}
	var components any
	if seat.Components != nil {
		components = seat.Components
	}
	entitlements := policy.Entitlements
	if entitlements == nil {
		entitlements = []string{}
	}
	limits := map[string]any{}
	if l.GetLimits() != nil {
		limits = l.GetLimits().AsMap()
	}
	claims := signing.NewObject().Add("iss", issuer).Add("sub", l.GetKey()).Add("aud", l.GetProductId()).
		Add("jti", jti).Add("iat", iat.Unix()).Add("exp", exp.Unix()).Add("renew_after", renewAfter.Unix()).
		Add("tier", l.GetTier()).Add("status", l.GetStatus()).Add("license_expires_at", licenseExpires).
		Add("limits", limits).Add("entitlements", entitlements).Add("instance_id", seat.Instance).
		Add("floating", policy.Floating).Add("components", components)
	if nonce != nil {
		claims.Add("nonce", *nonce)
	}
	if tenant != "" {
		claims.Add("tenant_id", tenant)
	}
	return claims
}

// referenceJWS is the compact JWS of claims through the generic encoder.
func referenceJWS(priv ed25519.PrivateKey, kid string, claims *signing.Object) (string, error) {
	header, err := signing.Marshal(signing.NewObject().Add("alg", "EdDSA").Add("kid", kid).Add("typ", leaseTokenType))
	if err != nil {
		return "", err
	}
	payload, err := signing.Marshal(claims)
	if err != nil {
		return "", err
	}
	input := base64.RawURLEncoding.EncodeToString(header) + "." + base64.RawURLEncoding.EncodeToString(payload)
	return input + "." + base64.RawURLEncoding.EncodeToString(ed25519.Sign(priv, []byte(input))), nil
}

var claimStrings = []string{
	"", "pro", "KH-7Q2M-9XKD", `quote " and \ backslash`, "line\nbreak\ttab", "\x00\x01\x1f\x7f",
	"<>&", "héllo", "日本語", "🎉", "\u2028", "bad \xff utf8", "10", "0", "a_b", strings.Repeat("x", 300),
}

func pick[T any](r *rand.Rand, list []T) T { return list[r.IntN(len(list))] }

func randomLeaseInput(r *rand.Rand) (*licensingv1.License, store.Policy, *store.LeaseSeat, *string) {
	l := &licensingv1.License{Key: pick(r, claimStrings), ProductId: pick(r, claimStrings), Tier: pick(r, claimStrings), Status: pick(r, claimStrings)}
	if r.IntN(2) == 0 {
		l.ExpiresAt = timestamppb.New(time.Unix(r.Int64N(1<<40)-1<<39, r.Int64N(1e9)))
	}
	if r.IntN(3) > 0 {
		fields := map[string]*structpb.Value{}
		for range r.IntN(4) {
			var v *structpb.Value
			switch r.IntN(5) {
			case 0:
				v = structpb.NewNumberValue(pick(r, []float64{0, 5, 1.5, -1e21, 1e-7, 9007199254740993, math.NaN()}))
			case 1:
				v = structpb.NewStringValue(pick(r, claimStrings))
			case 2:
				v = structpb.NewBoolValue(true)
			case 3:
				v = structpb.NewNullValue()
			default:
				v = structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{structpb.NewNumberValue(1)}})
			}
			fields[pick(r, claimStrings)] = v
		}
		l.Limits = &structpb.Struct{Fields: fields}
	}
	p := store.Policy{Floating: r.IntN(2) == 0}
	for range r.IntN(3) {
		p.Entitlements = append(p.Entitlements, pick(r, claimStrings))
	}
	if r.IntN(4) == 0 {
		p.Entitlements = []string{}
	}
	seat := &store.LeaseSeat{Instance: pick(r, claimStrings)}
	if r.IntN(2) == 0 {
		seat.Components = map[string]string{}
		for range r.IntN(4) {
			seat.Components[pick(r, claimStrings)] = pick(r, claimStrings)
		}
	}
	var nonce *string
	if r.IntN(2) == 0 {
		n := pick(r, claimStrings)
		nonce = &n
	}
	return l, p, seat, nonce
}

// The hand-assembled lease is the generic encoder's, byte for byte, signature included
// (Ed25519 is deterministic), or refused where the generic encoder refuses the claims:
// a verifier sees no change.
func TestLeaseClaimsMatchTheCanonicalEncoder(t *testing.T) {
	_, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := newLeaseSigner("kid-1", priv)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(22, 12))
	iat := time.Unix(1764000000, 0)
	same, refused := 0, 0
	for range 5000 {
		l, p, seat, nonce := randomLeaseInput(r)
		issuer, tenant, jti := pick(r, claimStrings), pick(r, claimStrings), randomID()
		exp, renew := iat.Add(time.Duration(r.Int64N(1e6))*time.Second), iat.Add(time.Minute)
		want, wantErr := referenceJWS(priv, "kid-1", referenceClaims(issuer, tenant, l, p, seat, iat, exp, renew, nonce, jti))
		claims, err := appendLeaseClaims(nil, issuer, tenant, l, p, seat, iat, exp, renew, nonce, jti)
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("claims of %v: error %v, the generic encoder's %v", l, err, wantErr)
		}
		if err != nil {
			refused++
			continue
		}
		if got := signer.sign(claims); got != want {
			t.Fatalf("lease\n%s\nthe generic encoder's\n%s", got, want)
		}
		same++
	}
	if same < 1000 || refused == 0 {
		t.Fatalf("%d leases compared, %d refused: the comparison proves little", same, refused)
	}
}
