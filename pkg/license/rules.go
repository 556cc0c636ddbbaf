package license

import (
	"strings"
	"time"

	"github.com/keyhouse/keyhouse/pkg/apierr"
)

// A license's status (api.md "License status"): the only two values it is stored with.
const (
	StatusActive  = "active"
	StatusRevoked = "revoked"
)

// ValidStatus reports whether s is one of the stored statuses.
func ValidStatus(s string) bool { return s == StatusActive || s == StatusRevoked }

// The messages api.md gives for a license that cannot be used, verbatim. Every service
// that refuses a license answers with these.
var (
	ErrNotFound  = apierr.NotFound("License key not found")
	ErrNotActive = apierr.Forbidden("License is not active")
	ErrExpired   = apierr.Forbidden("License has expired")
	// ErrIsExpired is track-usage's wording of ErrExpired; both are api.md's.
	ErrIsExpired = apierr.Forbidden("License is expired")
	// ErrProductOwned refuses issuing or registering for a product another tenant claimed.
	ErrProductOwned = apierr.Forbidden("product_id is owned by a different tenant")
)

// Expired reports whether a license with this expiry (nil: perpetual) is past it at now.
// The expiry instant itself counts as expired.
func Expired(expiresAt *time.Time, now time.Time) bool {
	return expiresAt != nil && !now.Before(*expiresAt)
}

// Usable is the one rule for "may this license be used now": it must be active and not
// expired. It answers nil, ErrNotActive or ErrExpired; revocation is checked first, so a
// revoked license that has also expired reads "not active".
func Usable(status string, expiresAt *time.Time, now time.Time) error {
	if status != StatusActive {
		return ErrNotActive
	}
	if Expired(expiresAt, now) {
		return ErrExpired
	}
	return nil
}

// ProductKey is how product ids compare wherever a service matches them: trimmed and
// lower-cased. Licensing claims products by it; releases files releases under it and
// matches a check-update's product_id to its license's by it.
func ProductKey(productID string) string { return strings.ToLower(strings.TrimSpace(productID)) }

// UpdateClass is all of a usable license that check-update's answer depends on: its
// tenant and its product key. Two usable licenses of one class asking the same question
// get the same answer. Releases and activations name it with their batch answers
// (update_class, from licensingclient.UpdateClass), and the gateway works it out from a
// verify-license answer it holds; all must spell it alike, or one class's answers would
// be given to another's licenses.
func UpdateClass(tenant, productID string) string { return tenant + "\x00" + ProductKey(productID) }
