package webhook

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/keyhouse/keyhouse/pkg/signing"
)

// SignatureHeader carries the signature of a delivery; EventIDHeader the event's id.
const (
	SignatureHeader = "Keyhouse-Signature"
	EventIDHeader   = "Keyhouse-Event-Id"
)

// DefaultTolerance is how far a signature's timestamp may be from the receiver's clock
// before Verify refuses it (replay protection), as in Stripe's libraries.
const DefaultTolerance = 5 * time.Minute

// Sign returns the Keyhouse-Signature value for body sent at t: `t=<unix seconds>` and one
// `v1=<hex HMAC-SHA256(secret, "<t>.<body>")>` per secret, so a receiver holding either
// the old or the new secret during a roll verifies the delivery.
func Sign(t time.Time, body []byte, secrets ...[]byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	payload := signedPayload(ts, body)
	var b strings.Builder
	b.WriteString("t=")
	b.WriteString(ts)
	for _, s := range secrets {
		b.WriteString(",v1=")
		b.WriteString(signing.SignHMAC(s, payload))
	}
	return b.String()
}

func signedPayload(ts string, body []byte) []byte {
	p := make([]byte, 0, len(ts)+1+len(body))
	return append(append(append(p, ts...), '.'), body...)
}

// Why Verify refuses a delivery.
var (
	ErrNoSignature = errors.New("no valid signature for this secret")
	ErrBadHeader   = errors.New("malformed Keyhouse-Signature header")
	ErrTooOld      = errors.New("signature timestamp outside the tolerance")
)

// Verify checks a Keyhouse-Signature header against body and one secret, the way a
// receiver does: some v1 must match and the timestamp must be within tolerance of now.
func Verify(header string, body, secret []byte, tolerance time.Duration, now time.Time) error {
	var ts string
	var sigs []string
	for _, part := range strings.Split(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return ErrBadHeader
		}
		switch k {
		case "t":
			ts = v
		case "v1":
			sigs = append(sigs, v)
		}
	}
	unix, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sigs) == 0 {
		return ErrBadHeader
	}
	if d := now.Sub(time.Unix(unix, 0)); d > tolerance || d < -tolerance {
		return ErrTooOld
	}
	payload := signedPayload(ts, body)
	for _, s := range sigs {
		if signing.VerifyHMAC(secret, payload, s) {
			return nil
		}
	}
	return ErrNoSignature
}
