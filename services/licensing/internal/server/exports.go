package server

import (
	"context"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math/big"
	"strings"
	"time"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/license"
	"github.com/keyhouse/keyhouse/pkg/signing"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	"github.com/keyhouse/keyhouse/services/licensing/internal/store"
	"google.golang.org/protobuf/types/known/structpb"
)

// signedFields is the object every export signs (addendum §5): {key, tier, product_id,
// expires_at, limits}, in that order, limits' keys sorted by the canonical encoder.
func signedFields(key, tier, product string, expiresAt, limits any) *signing.Object {
	return signing.NewObject(
		signing.Field{Name: "key", Value: key},
		signing.Field{Name: "tier", Value: tier},
		signing.Field{Name: "product_id", Value: product},
		signing.Field{Name: "expires_at", Value: expiresAt},
		signing.Field{Name: "limits", Value: limits},
	)
}

func licenseFields(l *store.License) *signing.Object {
	return signedFields(l.Key, l.Tier, l.ProductID, expiresValue(l), l.Limits)
}

// expiresValue is expires_at as the canonical encoder writes it: a time or null.
func expiresValue(l *store.License) any {
	if l.ExpiresAt == nil {
		return nil
	}
	return *l.ExpiresAt
}

// exportable finds a license for a public export: revoked and expired licenses are not
// handed out.
func (s *Server) exportable(ctx context.Context, key string) (*store.License, error) {
	l, err := s.lookup(ctx, "", key)
	if err != nil {
		return nil, err
	}
	return l, s.usable(l)
}

// ExportLicense is the HMAC-signed JSON export.
func (s *Server) ExportLicense(ctx context.Context, req *licensingv1.ExportLicenseRequest) (*licensingv1.ExportLicenseResponse, error) {
	l, err := s.exportable(ctx, req.GetKey())
	if err != nil {
		return nil, err
	}
	_, sig, err := s.cfg.Keyring.HMACJSON(licenseFields(l))
	if err != nil {
		return nil, err
	}
	return &licensingv1.ExportLicenseResponse{
		Key: l.Key, Tier: l.Tier, ProductId: l.ProductID, ExpiresAt: timestampOrNil(l.ExpiresAt),
		Limits: limitsStruct(l.Limits), Sig: sig,
	}, nil
}

// ExportLicenseOffline is the RSA-signed export, verifiable with the public key alone.
func (s *Server) ExportLicenseOffline(ctx context.Context, req *licensingv1.ExportLicenseOfflineRequest) (*licensingv1.ExportLicenseOfflineResponse, error) {
	l, err := s.exportable(ctx, req.GetKey())
	if err != nil {
		return nil, err
	}
	_, sig, err := s.cfg.Keyring.SignJSON(licenseFields(l))
	if err != nil {
		return nil, err
	}
	return &licensingv1.ExportLicenseOfflineResponse{
		License: &licensingv1.OfflineLicense{
			Key: l.Key, Tier: l.Tier, ProductId: l.ProductID, ExpiresAt: timestampOrNil(l.ExpiresAt), Limits: limitsStruct(l.Limits),
		},
		Signature: sig,
	}, nil
}

// ExportLicenseFile seals {key, tier, product_id, issued_to, expires_at, limits, sig} with
// AES-256-GCM; sig is the HMAC of the plain export, so the file carries its own proof
// beyond the encryption.
func (s *Server) ExportLicenseFile(ctx context.Context, req *licensingv1.ExportLicenseFileRequest) (*licensingv1.ExportLicenseFileResponse, error) {
	l, err := s.exportable(ctx, req.GetKey())
	if err != nil {
		return nil, err
	}
	_, sig, err := s.cfg.Keyring.HMACJSON(licenseFields(l))
	if err != nil {
		return nil, err
	}
	plain, err := signing.Marshal(signing.NewObject(
		signing.Field{Name: "key", Value: l.Key},
		signing.Field{Name: "tier", Value: l.Tier},
		signing.Field{Name: "product_id", Value: l.ProductID},
		signing.Field{Name: "issued_to", Value: l.IssuedTo},
		signing.Field{Name: "expires_at", Value: expiresValue(l)},
		signing.Field{Name: "limits", Value: l.Limits},
		signing.Field{Name: "sig", Value: sig},
	))
	if err != nil {
		return nil, err
	}
	sealed, err := s.cfg.Keyring.Seal(plain)
	if err != nil {
		return nil, err
	}
	return &licensingv1.ExportLicenseFileResponse{Key: l.Key, Content: sealed}, nil
}

// GetPublicKey serves the SPKI PEM the offline exports and release manifests verify with.
func (s *Server) GetPublicKey(context.Context, *licensingv1.GetPublicKeyRequest) (*licensingv1.GetPublicKeyResponse, error) {
	return &licensingv1.GetPublicKeyResponse{PublicKey: s.cfg.Keyring.PublicKeyPEM()}, nil
}

// ListPublicKeys serves the RSA public keys as a JWKS: the current key, and the staged
// next one during a planned rotation, so vendors ship apps that accept both before the
// next key signs anything (docs/licensing.md, Rotating).
func (s *Server) ListPublicKeys(context.Context, *licensingv1.ListPublicKeysRequest) (*licensingv1.ListPublicKeysResponse, error) {
	k := s.cfg.Keyring
	keys := []*licensingv1.SigningPublicKey{signingJWK(k.PublicKey(), k.KeyID(), k.PublicKeyPEM(), "current")}
	if next := k.NextPublicKey(); next != nil {
		keys = append(keys, signingJWK(next, k.NextKeyID(), k.NextPublicKeyPEM(), "next"))
	}
	return &licensingv1.ListPublicKeysResponse{Keys: keys}, nil
}

// signingJWK is an RSA public key as a JSON Web Key (RFC 7518 §6.3.1: n and e are the
// big-endian bytes, base64url without padding) with its rotation status and PEM.
func signingJWK(pub *rsa.PublicKey, kid, pemText, status string) *licensingv1.SigningPublicKey {
	return &licensingv1.SigningPublicKey{
		Kty: "RSA", Use: "sig", Alg: "RS256", Kid: kid, Status: status, Pem: pemText,
		N: base64.RawURLEncoding.EncodeToString(pub.N.Bytes()),
		E: base64.RawURLEncoding.EncodeToString(big.NewInt(int64(pub.E)).Bytes()),
	}
}

// fileFailure is a verify-license-file(-base64) refusal: "valid": false and "reason"
// beside "error", both with the same text (addendum §6).
func fileFailure(e *apierr.Error) *apierr.Error {
	return e.WithBefore("valid", false).WithBefore("reason", e.Message)
}

var (
	errMissingFields   = fileFailure(apierr.Invalid("Missing required fields"))
	errIncomplete      = fileFailure(apierr.Invalid("Incomplete license object"))
	errMalformedFile   = fileFailure(apierr.Invalid("Malformed or corrupt license_file"))
	errInvalidSig      = fileFailure(apierr.Forbidden("Invalid signature"))
	errFileExpired     = fileFailure(apierr.Forbidden("Expired"))
	errRevokedNotFound = fileFailure(apierr.Forbidden("Revoked or not found"))
)

// claimedLicense is what a client presents: the signed fields as it sent them, so the
// signed bytes are rebuilt from exactly those values.
type claimedLicense struct {
	key, tier, product, sig string
	expiresAt               any
	limits                  any
}

// checkClaim verifies the HMAC over the presented fields, then the license live in the
// database: it must exist, be active, and not be expired now.
func (s *Server) checkClaim(ctx context.Context, c claimedLicense) (*store.License, error) {
	payload, err := signing.Marshal(signedFields(c.key, c.tier, c.product, c.expiresAt, c.limits))
	if err != nil || !s.cfg.Keyring.VerifyHMAC(payload, c.sig) {
		return nil, errInvalidSig
	}
	l, err := s.store.GetLive(ctx, "", c.key)
	if errors.Is(err, store.ErrNotFound) {
		return nil, errRevokedNotFound
	}
	if err != nil {
		return nil, err
	}
	if l.Status != license.StatusActive {
		return nil, errRevokedNotFound
	}
	if license.Expired(l.ExpiresAt, s.now()) {
		return nil, errFileExpired
	}
	return l, nil
}

// VerifyLicenseFile checks the fields of a plain export.
func (s *Server) VerifyLicenseFile(ctx context.Context, req *licensingv1.VerifyLicenseFileRequest) (*licensingv1.VerifyLicenseFileResponse, error) {
	var c claimedLicense
	var ok [4]bool
	c.key, ok[0] = nonEmptyString(req.GetKey())
	c.tier, ok[1] = nonEmptyString(req.GetTier())
	c.product, ok[2] = nonEmptyString(req.GetProductId())
	c.sig, ok[3] = nonEmptyString(req.GetSig())
	if ok != [4]bool{true, true, true, true} {
		return nil, errMissingFields
	}
	var valid bool
	if c.expiresAt, valid = optionalJSON(req.GetExpiresAt(), isStringValue); !valid {
		return nil, fileFailure(apierr.Invalid("expires_at must be a string or null"))
	}
	if c.limits, valid = optionalJSON(req.GetLimits(), isStructValue); !valid {
		return nil, fileFailure(apierr.Invalid("limits must be an object"))
	}
	if c.limits == nil {
		c.limits = map[string]any{}
	}
	if _, err := s.checkClaim(ctx, c); err != nil {
		return nil, err
	}
	return &licensingv1.VerifyLicenseFileResponse{Valid: true}, nil
}

// VerifyLicenseFileBase64 opens a .lic file and checks what it carries.
func (s *Server) VerifyLicenseFileBase64(ctx context.Context, req *licensingv1.VerifyLicenseFileBase64Request) (*licensingv1.VerifyLicenseFileBase64Response, error) {
	encoded, ok := nonEmptyString(req.GetLicenseFile())
	if !ok {
		return nil, errMissingFields
	}
	blob, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(encoded), ""))
	if err != nil {
		return nil, errMalformedFile
	}
	plain, err := s.cfg.Keyring.Open(blob)
	switch {
	case errors.Is(err, signing.ErrTampered):
		// Well formed but not sealed by this installation's key, or modified.
		return nil, errInvalidSig
	case err != nil:
		return nil, errMalformedFile
	}
	var f struct {
		Key       *string        `json:"key"`
		Tier      *string        `json:"tier"`
		ProductID *string        `json:"product_id"`
		IssuedTo  *string        `json:"issued_to"`
		ExpiresAt *string        `json:"expires_at"`
		Limits    map[string]any `json:"limits"`
		Sig       *string        `json:"sig"`
	}
	dec := json.NewDecoder(strings.NewReader(string(plain)))
	dec.UseNumber()
	if err := dec.Decode(&f); err != nil {
		return nil, errMalformedFile
	}
	if f.Key == nil || f.Tier == nil || f.ProductID == nil || f.Sig == nil || f.Limits == nil {
		return nil, errIncomplete
	}
	c := claimedLicense{key: *f.Key, tier: *f.Tier, product: *f.ProductID, sig: *f.Sig, limits: f.Limits}
	if f.ExpiresAt != nil {
		c.expiresAt = *f.ExpiresAt
	}
	l, err := s.checkClaim(ctx, c)
	if err != nil {
		return nil, err
	}
	issuedTo := l.IssuedTo
	if f.IssuedTo != nil {
		issuedTo = *f.IssuedTo
	}
	limits, err := structpb.NewStruct(numbersAsFloats(f.Limits))
	if err != nil {
		return nil, errIncomplete
	}
	var expires *time.Time
	if f.ExpiresAt != nil {
		t, err := time.Parse(time.RFC3339Nano, *f.ExpiresAt)
		if err != nil {
			return nil, errIncomplete
		}
		expires = &t
	}
	return &licensingv1.VerifyLicenseFileBase64Response{
		Valid: true,
		License: &licensingv1.FileLicense{
			Key: *f.Key, Tier: *f.Tier, ProductId: *f.ProductID, IssuedTo: issuedTo,
			ExpiresAt: timestampOrNil(expires), Limits: limits,
		},
	}, nil
}

func nonEmptyString(v *structpb.Value) (string, bool) {
	s, ok := v.GetKind().(*structpb.Value_StringValue)
	if !ok || s.StringValue == "" {
		return "", false
	}
	return s.StringValue, true
}

func isStringValue(v *structpb.Value) bool {
	_, ok := v.GetKind().(*structpb.Value_StringValue)
	return ok
}
func isStructValue(v *structpb.Value) bool {
	_, ok := v.GetKind().(*structpb.Value_StructValue)
	return ok
}

// optionalJSON returns v as a Go value when it is absent (nil), null (nil) or of the
// wanted kind; valid is false otherwise.
func optionalJSON(v *structpb.Value, wanted func(*structpb.Value) bool) (any, bool) {
	switch v.GetKind().(type) {
	case nil, *structpb.Value_NullValue:
		return nil, true
	}
	if !wanted(v) {
		return nil, false
	}
	return v.AsInterface(), true
}

// numbersAsFloats turns json.Number leaves into float64 for structpb.
func numbersAsFloats(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		if n, ok := v.(json.Number); ok {
			f, _ := n.Float64()
			out[k] = f
			continue
		}
		out[k] = v
	}
	return out
}
