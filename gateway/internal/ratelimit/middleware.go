package ratelimit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/keyhouse/keyhouse/gateway/internal/flatjson"
	"github.com/keyhouse/keyhouse/pkg/license"
	"github.com/keyhouse/keyhouse/pkg/metrics"
)

// maxKeyBodyBytes is the most of a body read to find the license key, the API's body limit.
const maxKeyBodyBytes = 1 << 20

// Middleware limits the requests Classify knows, sets the X-RateLimit headers on all their
// responses, and answers 429 when a tier refuses; other requests go straight to next.
// adminMax is ADMIN_RATE_LIMIT_MAX, trusted is TRUSTED_PROXIES.
func Middleware(l *Limiter, adminMax int, trusted []netip.Prefix, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		route, ok := Classify(r.Method, r.URL.EscapedPath(), adminMax)
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		res := l.Take(r.Context(), route.Tier, "ip:"+ClientIP(r, trusted).String())
		decidedBy := route.Tier.Name
		if res.Allowed && route.PerLicenseKey {
			if key := LicenseKey(r); key != "" {
				// Counted by the key as licensing reads it: "abcd…" and "ABCD-…" are one
				// license, and must not be two budgets.
				if perKey := l.Take(r.Context(), ActivationPerKey, "lic:"+license.CanonicalKey(key)); !perKey.Allowed {
					res, decidedBy = perKey, ActivationPerKey.Name
				}
			}
		}
		recordDecision(decidedBy, res.Allowed)
		h := w.Header()
		h.Set("X-RateLimit-Limit", strconv.Itoa(res.Limit))
		h.Set("X-RateLimit-Remaining", strconv.Itoa(res.Remaining))
		h.Set("X-RateLimit-Reset", strconv.FormatInt(res.Reset.Unix(), 10))
		if !res.Allowed {
			WriteTooManyRequests(w, res.RetryAfter)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// LicenseKey returns the "key" string of the JSON body, or "" when there is none, and
// leaves the body for the next handler exactly as the client sent it. Admission control
// reads it too, to tell whose license a request is about.
func LicenseKey(r *http.Request) string {
	if r.Body == nil || r.Body == http.NoBody {
		return ""
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxKeyBodyBytes+1))
	if err != nil || len(body) > maxKeyBodyBytes {
		// The next handler gets what was read followed by the unread rest, and answers the
		// read error or the oversized body itself.
		r.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(body), r.Body), r.Body}
		return ""
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return KeyInJSON(body)
}

// KeyInJSON returns the "key" string member of the JSON object body, or "" when there is
// none (or body is not a JSON object). The plain body every client sends (a flat object
// of printable ASCII strings without escapes) is read without encoding/json, with the
// same answer: the last member named "key", as encoding/json's map keeps it.
func KeyInJSON(body []byte) string {
	var key []byte
	plain := flatjson.Object(body, func(name, value []byte) bool {
		if string(name) == "key" {
			key = value
		}
		return true
	})
	if plain {
		return string(key)
	}
	return keyInJSONDecoded(body)
}

// keyInJSONDecoded is KeyInJSON through encoding/json, for any body.
func keyInJSONDecoded(body []byte) string {
	// A map, not a struct: encoding/json matches struct fields case-insensitively, and a
	// "Key" the API ignores must not choose the counter.
	var fields map[string]json.RawMessage
	if json.Unmarshal(body, &fields) != nil {
		return ""
	}
	var key string
	if json.Unmarshal(fields["key"], &key) != nil {
		return ""
	}
	return key
}

// WriteTooManyRequests writes the API's 429: Retry-After and the body api.md fixes. The
// console's data export answers its one-per-minute limit with it too.
func WriteTooManyRequests(w http.ResponseWriter, retryAfter time.Duration) {
	// Whole seconds rounded up, so a client waiting that long finds the window over.
	secs := max(1, int64((retryAfter+time.Second-1)/time.Second))
	w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusTooManyRequests)
	// api.md fixes the fields and their order.
	_, _ = fmt.Fprintf(w, `{"error":"Too Many Requests","statusCode":429,"message":"Rate limit exceeded, retry in %d seconds","retryAfter":%d}`, secs, secs)
}

func recordDecision(tier string, allowed bool) {
	decision := "allowed"
	if !allowed {
		decision = "denied"
	}
	metrics.RateLimitDecisions.WithLabelValues(tier, decision).Inc()
}
