package keyhouse

import (
	"bytes"
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"strings"
	"time"
)

// OfflineLicense is the license object of an offline export.
type OfflineLicense struct {
	Key       string             `json:"key"`
	Tier      string             `json:"tier"`
	ProductID string             `json:"product_id"`
	ExpiresAt *time.Time         `json:"expires_at"`
	Limits    map[string]float64 `json:"limits"`
}

// ParsePublicKey reads the server's RSA public key (the PEM of GET /v1/public-key).
func ParsePublicKey(pemText string) (*rsa.PublicKey, error) {
	block, _ := pem.Decode([]byte(pemText))
	if block == nil {
		return nil, errors.New("keyhouse: public key is not PEM")
	}
	pub, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return nil, err
	}
	rsaPub, ok := pub.(*rsa.PublicKey)
	if !ok {
		return nil, errors.New("keyhouse: public key is not RSA")
	}
	return rsaPub, nil
}

// verifyRSA is true when any of pubs verifies the signature: during a planned key
// rotation an app holds the current and the next key, and either may have signed.
func verifyRSA(pubs []*rsa.PublicKey, signed []byte, sigB64 string) bool {
	sig, err := base64.StdEncoding.DecodeString(sigB64)
	if err != nil {
		return false
	}
	digest := sha256.Sum256(signed)
	for _, pub := range pubs {
		if pub != nil && rsa.VerifyPKCS1v15(pub, crypto.SHA256, digest[:], sig) == nil {
			return true
		}
	}
	return false
}

// VerifyOfflineExport checks an offline export (the body of GET
// /v1/export-license/{key}/offline) with the server's public key and no network: the RSA
// signature over the license object's bytes as the server wrote them, then its expiry
// against now. Errors: ErrInvalidSignature, ErrExpired.
func VerifyOfflineExport(exportJSON []byte, pub *rsa.PublicKey, now time.Time) (*OfflineLicense, error) {
	return VerifyOfflineExportAnyKey(exportJSON, []*rsa.PublicKey{pub}, now)
}

// VerifyOfflineExportAnyKey is VerifyOfflineExport accepting a signature by any of pubs
// (the keys GET /v1/public-keys lists, shipped in the app to survive a key rotation).
func VerifyOfflineExportAnyKey(exportJSON []byte, pubs []*rsa.PublicKey, now time.Time) (*OfflineLicense, error) {
	var doc struct {
		License   json.RawMessage `json:"license"`
		Signature string          `json:"signature"`
	}
	if err := json.Unmarshal(exportJSON, &doc); err != nil || len(doc.License) == 0 {
		return nil, &Error{Code: "invalid_signature", Message: "not an offline export"}
	}
	var signed bytes.Buffer
	if err := json.Compact(&signed, doc.License); err != nil || !verifyRSA(pubs, signed.Bytes(), doc.Signature) {
		return nil, &Error{Code: "invalid_signature", Message: "offline export signature does not verify"}
	}
	var lic OfflineLicense
	if err := json.Unmarshal(doc.License, &lic); err != nil {
		return nil, &Error{Code: "invalid_signature", Message: "offline export license is malformed"}
	}
	if lic.ExpiresAt != nil && !now.Before(*lic.ExpiresAt) {
		return &lic, &Error{Code: "expired", Message: "license expired at " + lic.ExpiresAt.Format(time.RFC3339)}
	}
	return &lic, nil
}

// Release is the signed manifest check-update answers.
type Release struct {
	ProductID    string `json:"product_id"`
	Version      string `json:"version"`
	Channel      string `json:"channel"`
	Platform     string `json:"platform"`
	ArtifactURL  string `json:"artifact_url"`
	Checksum     string `json:"checksum"`
	ReleaseNotes string `json:"release_notes"`
	Signature    string `json:"signature"`
	IssuedAt     string `json:"issued_at"`
}

// UpdateRequest is what an update check asks about.
type UpdateRequest struct {
	ProductID string `json:"product_id"`
	Channel   string `json:"channel"`
	Platform  string `json:"platform"`
}

// ManifestSkew is how far a manifest's issued_at may lie ahead of the local clock.
const ManifestSkew = 5 * time.Minute

// VerifyManifest checks a release manifest before it is believed: the RSA signature over
// its fields in the signed order, that it answers req (product compared trimmed and
// case-insensitively, channel and platform exactly), and that it was issued at most
// maxAge before now. A signed manifest stays valid after its release is unpublished, so
// the age is what stops an old answer from being replayed. Errors: ErrInvalidSignature,
// ErrManifestMismatch, ErrManifestTooOld.
func VerifyManifest(r *Release, req UpdateRequest, pub *rsa.PublicKey, now time.Time, maxAge time.Duration) error {
	return VerifyManifestAnyKey(r, req, []*rsa.PublicKey{pub}, now, maxAge)
}

// VerifyManifestAnyKey is VerifyManifest accepting a signature by any of pubs (the keys
// GET /v1/public-keys lists, shipped in the app to survive a key rotation).
func VerifyManifestAnyKey(r *Release, req UpdateRequest, pubs []*rsa.PublicKey, now time.Time, maxAge time.Duration) error {
	signed := struct {
		ProductID    string `json:"product_id"`
		Version      string `json:"version"`
		Channel      string `json:"channel"`
		Platform     string `json:"platform"`
		ArtifactURL  string `json:"artifact_url"`
		Checksum     string `json:"checksum"`
		ReleaseNotes string `json:"release_notes"`
		IssuedAt     string `json:"issued_at"`
	}{r.ProductID, r.Version, r.Channel, r.Platform, r.ArtifactURL, r.Checksum, r.ReleaseNotes, r.IssuedAt}
	if !verifyRSA(pubs, stringifyJSON(signed), r.Signature) {
		return &Error{Code: "invalid_signature", Message: "release manifest signature does not verify"}
	}
	if !strings.EqualFold(strings.TrimSpace(r.ProductID), strings.TrimSpace(req.ProductID)) || r.Channel != req.Channel || r.Platform != req.Platform {
		return &Error{Code: "manifest_mismatch", Message: "release manifest answers another product, channel or platform"}
	}
	issued, err := time.Parse(time.RFC3339, r.IssuedAt)
	if err != nil {
		return &Error{Code: "manifest_too_old", Message: "release manifest has no valid issued_at"}
	}
	if age := now.Sub(issued); age > maxAge || age < -ManifestSkew {
		return &Error{Code: "manifest_too_old", Message: "release manifest issued at " + r.IssuedAt + " is outside its maximum age"}
	}
	return nil
}

// stringifyJSON writes v as JavaScript's JSON.stringify would (the signed bytes): no
// HTML escaping, and U+2028/U+2029 literal, which encoding/json always escapes.
func stringifyJSON(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	out := bytes.TrimRight(b.Bytes(), "\n")
	if !bytes.Contains(out, []byte(`\u202`)) {
		return out
	}
	var fixed bytes.Buffer
	for i := 0; i < len(out); i++ {
		if out[i] == '\\' && i+1 < len(out) {
			if bytes.HasPrefix(out[i:], []byte(`\u2028`)) || bytes.HasPrefix(out[i:], []byte(`\u2029`)) {
				fixed.WriteString(map[byte]string{'8': "\u2028", '9': "\u2029"}[out[i+5]])
				i += 5
				continue
			}
			fixed.Write(out[i : i+2]) // an escape pair, skipped whole so `\\u2028` stays
			i++
			continue
		}
		fixed.WriteByte(out[i])
	}
	return fixed.Bytes()
}
