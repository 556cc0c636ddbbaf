package signing

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
)

// SignHMAC returns the lower-case hex HMAC-SHA256 of payload under secret: the "sig" of
// GET /v1/export-license/:key.
func SignHMAC(secret, payload []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(payload)
	return hex.EncodeToString(m.Sum(nil))
}

// VerifyHMAC reports whether sigHex is the HMAC-SHA256 of payload under secret. The hex
// must be exactly 64 digits; upper- and mixed-case digits are accepted (case carries no
// information, and some platforms, e.g. .NET's Convert.ToHexString, emit upper case).
// The comparison is constant-time over the decoded bytes.
func VerifyHMAC(secret, payload []byte, sigHex string) bool {
	if len(sigHex) != 2*sha256.Size {
		return false
	}
	got, err := hex.DecodeString(sigHex)
	if err != nil {
		return false
	}
	m := hmac.New(sha256.New, secret)
	m.Write(payload)
	return hmac.Equal(m.Sum(nil), got)
}
