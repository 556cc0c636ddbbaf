package edge

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/keyhouse/keyhouse/gateway/internal/openapi"
	"github.com/keyhouse/keyhouse/gateway/internal/ratelimit"
	"github.com/keyhouse/keyhouse/pkg/telemetry"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// MaxBodyBytes is the request body cap of addendum §6.
const MaxBodyBytes = 1 << 20

var validRequestID = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// withRequestID accepts a sane incoming X-Request-Id or makes one, echoes it, and tags
// the context so it reaches every service and log line.
func withRequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-Id")
		if !validRequestID.MatchString(id) {
			var b [12]byte
			_, _ = rand.Read(b[:])
			id = hex.EncodeToString(b[:])
		}
		w.Header().Set("X-Request-Id", id)
		next.ServeHTTP(w, r.WithContext(telemetry.WithRequestID(r.Context(), id)))
	})
}

type bodyLimitKey struct{}

// limitedBody notes why reading the body failed, for the error handler: over the cap
// (413) or the client stopped sending before the server's read timeout (408). Under a
// gzip body, under is the compressed one.
type limitedBody struct {
	io.ReadCloser
	under              *limitedBody
	exceeded, timedOut bool
}

func (b *limitedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == nil || err == io.EOF {
		// Every body ends in io.EOF: errors.As's reflection is for the failures alone.
		return n, err
	}
	var tooLarge *http.MaxBytesError
	var netErr net.Error
	switch {
	case errors.As(err, &tooLarge):
		b.exceeded = true
	case errors.Is(err, os.ErrDeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		b.timedOut = true
	}
	return n, err
}

// withBodyLimit caps bodies at 1 MiB, before and after a gzip Content-Encoding is
// decoded (any other encoding is a 415). A declared length over the cap is refused at
// once; a chunked body is cut at the cap and the error handler answers 413 for it.
func withBodyLimit(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > MaxBodyBytes {
			writeError(w, http.StatusRequestEntityTooLarge, "Request body too large", nil)
			return
		}
		body := &limitedBody{ReadCloser: http.MaxBytesReader(w, r.Body, MaxBodyBytes)}
		switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
		case "", "identity":
		case "gzip", "x-gzip":
			body = &limitedBody{ReadCloser: http.MaxBytesReader(w, &gunzip{src: body}, MaxBodyBytes), under: body}
			r.Header.Del("Content-Encoding")
		default:
			writeError(w, http.StatusUnsupportedMediaType, "Unsupported Content-Encoding: use gzip or none", nil)
			return
		}
		r.Body = body
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), bodyLimitKey{}, body)))
	})
}

// bodyFailure reports whether reading r's body hit the cap or the read timeout.
func bodyFailure(r *http.Request) (tooLarge, timedOut bool) {
	for b, _ := r.Context().Value(bodyLimitKey{}).(*limitedBody); b != nil; b = b.under {
		tooLarge, timedOut = tooLarge || b.exceeded, timedOut || b.timedOut
	}
	return tooLarge, timedOut
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// withAccessLog logs one line per request: the path (with its portal token hidden and its
// license key masked by the logger; a path that names no route with every segment that is
// not a route word masked), never the query or body, which may carry tokens; and the
// client address the rate limiter counts the request under.
func withAccessLog(log *slog.Logger, trusted []netip.Prefix, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(rec, r)
		level := slog.LevelInfo
		if (r.URL.Path == HealthzPath || r.URL.Path == ReadyzPath) && rec.status == http.StatusOK {
			// Probes call these every few seconds; a failing one stays visible.
			level = slog.LevelDebug
		}
		span := trace.SpanFromContext(r.Context())
		logged := log.Enabled(r.Context(), level)
		if !logged && !span.IsRecording() {
			return
		}
		// The path as sent; the redaction reads it as the routes do, each segment
		// unescaped (telemetry.CanonicalPath), so an escaped letter of a route's word
		// hides nothing, and a key's escaped "/" stays in its segment, masked whole
		// (decoded, the key's tail would be a segment of its own).
		path := r.URL.EscapedPath()
		if unknownRoute(r, rec.status) {
			path = telemetry.MaskUnknownPath(path, routeWord)
		}
		if span.IsRecording() {
			// otelhttp recorded the path as sent; a span leaves the process as a log
			// line does, so it gets the line's path, its keys masked whatever
			// LOG_LICENSE_KEYS says (the attribute set again replaces the first).
			span.SetAttributes(semconv.URLPath(telemetry.RedactPath(path, false)))
		}
		if !logged {
			return
		}
		// The same line as log.LogAttrs with these attributes; a text logger's is written
		// without slog's pass over each attribute (telemetry.LogHTTP).
		telemetry.LogHTTP(r.Context(), log, level, r.Method, path, ratelimit.ClientIP(r, trusted).String(),
			rec.status, time.Since(start).Milliseconds())
	})
}

// unknownRoute reports whether r named no route: the mux routed it nowhere (withMetrics'
// holder has no pattern), the API document has no such path, and no page answered it
// (the console's and portal's pages are not in the document; a page they do not have is
// their 404).
func unknownRoute(r *http.Request, status int) bool {
	if h, ok := r.Context().Value(routeKey{}).(*routeHolder); ok && h.pattern != "" {
		return false
	}
	if openapi.KnownPath(r.URL.EscapedPath()) {
		return false
	}
	return !isPagePath(r.URL.Path) || status >= http.StatusBadRequest
}

// routeWord is a segment the access log keeps in a path that names no route: a literal of
// an API route, or the pages' prefixes.
func routeWord(seg string) bool {
	return seg == "console" || seg == "portal" || openapi.RouteWord(seg)
}
