// Package seal keeps secrets at rest: the storefront's webhook signing secrets and the
// buyer's address in transit, the outbound webhook endpoints' signing secrets, the stored
// first answers of creates that show a secret once (pkg/idempotency), each sealed with
// AES-256-GCM under the installation keyring under its own purpose.
package seal

import (
	"bytes"
	"errors"

	"github.com/keyhouse/keyhouse/pkg/signing"
)

// Purposes of sealed values. The purpose is sealed with the value and checked on open, so
// a value sealed for one use (or a .lic file, sealed under the same key) never opens as
// another.
const (
	PurposeWebhookSecret = "keyhouse-storefront-webhook-secret"
	PurposeBuyerEmail    = "keyhouse-storefront-buyer-email"
	// PurposeEndpointSecret seals an outbound webhook endpoint's whsec_ secret.
	PurposeEndpointSecret = "keyhouse-events-endpoint-secret"
	// PurposeIdempotentAnswer seals the first answer an Idempotency-Key replays when it
	// shows a secret once (an API key, a webhook endpoint's whsec_ secret).
	PurposeIdempotentAnswer = "keyhouse-idempotent-answer"
)

// ErrSealed is a sealed value that does not open for the purpose.
var ErrSealed = errors.New("sealed value does not open")

// Seal encrypts value for purpose under the keyring's AES-256-GCM key.
func Seal(k *signing.Keyring, purpose string, value []byte) ([]byte, error) {
	pt := make([]byte, 0, len(purpose)+1+len(value))
	pt = append(append(append(pt, purpose...), 0), value...)
	return k.Seal(pt)
}

// Open reverses Seal for the same purpose.
func Open(k *signing.Keyring, purpose string, blob []byte) ([]byte, error) {
	pt, err := k.Open(blob)
	if err != nil {
		return nil, ErrSealed
	}
	prefix := append([]byte(purpose), 0)
	if !bytes.HasPrefix(pt, prefix) {
		return nil, ErrSealed
	}
	return pt[len(prefix):], nil
}
