package keyhouse

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Error is every failure the client returns: an answer of the server (Status is its HTTP
// status, Message its "error" text) or a condition found on this side (Status 0). Code is
// the machine-readable name to switch on; compare with errors.Is against the Err values.
type Error struct {
	Status  int
	Code    string
	Message string
	// RetryAfter is how long the server asked to wait (429, 503), or how long the client
	// holds back its next request (Code "backing_off").
	RetryAfter time.Duration
	err        error
}

func (e *Error) Error() string {
	if e.Status != 0 {
		return fmt.Sprintf("keyhouse: %s (HTTP %d)", e.Message, e.Status)
	}
	return "keyhouse: " + e.Message
}

// Unwrap returns the transport error of an "unreachable" error.
func (e *Error) Unwrap() error { return e.err }

// Is matches errors by Code, so errors.Is(err, keyhouse.ErrLicenseNotFound) holds for any
// "License key not found" answer.
func (e *Error) Is(target error) bool {
	var t *Error
	return errors.As(target, &t) && t.Status == 0 && t.Message == "" && t.Code == e.Code
}

func code(c string) *Error { return &Error{Code: c} }

// The errors of the API, by code (errors.Is(err, ErrX)).
var (
	ErrLicenseNotFound         = code("license_not_found")
	ErrLicenseExpired          = code("license_expired")
	ErrLicenseNotActive        = code("license_not_active")
	ErrActivationLimitExceeded = code("activation_limit_exceeded")
	ErrInvalidActivationToken  = code("invalid_activation_token")
	ErrMetricNotAllowed        = code("metric_not_allowed")
	ErrUsageLimitExceeded      = code("usage_limit_exceeded")
	ErrSeatLeaseExpired        = code("seat_lease_expired")
	ErrFingerprintMismatch     = code("fingerprint_mismatch")
	ErrComponentsRequired      = code("components_required")
	ErrReleaseNotFound         = code("release_not_found")
	ErrTenantSuspended         = code("tenant_suspended") // a hosted server whose operator suspended the vendor's account
	ErrNotFound                = code("not_found")
	ErrInvalidRequest          = code("invalid_request")
	ErrRateLimited             = code("rate_limited")
	ErrUnavailable             = code("unavailable")
	ErrServer                  = code("server_error")
	// ErrUnreachable: no answer (connection refused, reset, DNS, deadline).
	ErrUnreachable = code("unreachable")
	// ErrBackingOff: the server failed recently and the client sends nothing before
	// RetryAfter has passed (at most one request per minute while it fails).
	ErrBackingOff = code("backing_off")
	// ErrNotActivated: the call needs an activation token and the store holds none.
	ErrNotActivated = code("not_activated")
	// ErrWrongProduct: Activate found the license is for another product than
	// Config.ProductID, and took no seat.
	ErrWrongProduct = code("wrong_product")
	// Offline verification failures.
	ErrInvalidSignature = code("invalid_signature")
	ErrExpired          = code("expired")
	ErrManifestMismatch = code("manifest_mismatch")
	ErrManifestTooOld   = code("manifest_too_old")
)

// ErrorEntry is one row of the mapping from the server's error text to a code.
type ErrorEntry struct {
	Status int
	// Message is the exact text, or a prefix when it ends with ": ".
	Message string
	Code    string
	// Example is a full message as the server sends it.
	Example string
}

var errorTable = []ErrorEntry{
	{404, "License key not found", "license_not_found", ""},
	{403, "License has expired", "license_expired", ""},
	{403, "License is expired", "license_expired", ""},
	{403, "License is not active", "license_not_active", ""},
	{403, "Activation limit exceeded for this license key", "activation_limit_exceeded", ""},
	{403, "Invalid activation token", "invalid_activation_token", ""},
	{403, "Metric not allowed: ", "metric_not_allowed", "Metric not allowed: storage"},
	{403, "Usage limit exceeded for metric: ", "usage_limit_exceeded", "Usage limit exceeded for metric: seats"},
	{403, "Seat lease has expired", "seat_lease_expired", ""},
	{403, "Machine fingerprint does not match", "fingerprint_mismatch", ""},
	{400, "components are required by this product's policy", "components_required", ""},
	{404, "Release not found", "release_not_found", ""},
	{403, "Tenant is suspended", "tenant_suspended", ""},
}

// ErrorTable lists the server messages the client gives a code of their own (the shared
// test vectors are generated from it). Other answers get a code by status: 400/413
// invalid_request, 404 not_found, 429 rate_limited, 503 unavailable, 5xx server_error.
func ErrorTable() []ErrorEntry {
	out := make([]ErrorEntry, len(errorTable))
	for i, e := range errorTable {
		if e.Example == "" {
			e.Example = e.Message
		}
		out[i] = e
	}
	out = append(out,
		ErrorEntry{400, "", "invalid_request", "key is required"},
		ErrorEntry{429, "", "rate_limited", "Too Many Requests"},
		ErrorEntry{503, "", "unavailable", "Licensing service unavailable, retry"},
		ErrorEntry{500, "", "server_error", "Internal server error"})
	return out
}

// codeFor names an answer of the server.
func codeFor(status int, message string) string {
	for _, e := range errorTable {
		if e.Status != status {
			continue
		}
		if message == e.Message || (strings.HasSuffix(e.Message, ": ") && strings.HasPrefix(message, e.Message)) {
			return e.Code
		}
	}
	switch {
	case status == 400 || status == 413:
		return "invalid_request"
	case status == 404:
		return "not_found"
	case status == 429:
		return "rate_limited"
	case status == 503:
		return "unavailable"
	case status >= 500:
		return "server_error"
	}
	return "http_" + fmt.Sprint(status)
}
