package edge

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"time"

	"github.com/keyhouse/keyhouse/pkg/telemetry"
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

type limitedBody struct {
	io.ReadCloser
	exceeded bool
}

func (b *limitedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		b.exceeded = true
	}
	return n, err
}

// withBodyLimit caps bodies at 1 MiB. A declared length over the cap is refused at once;
// a chunked body is cut at the cap and the error handler answers 413 for it.
func withBodyLimit(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > MaxBodyBytes {
			writeError(w, http.StatusRequestEntityTooLarge, "Request body too large", nil)
			return
		}
		body := &limitedBody{ReadCloser: http.MaxBytesReader(w, r.Body, MaxBodyBytes)}
		r.Body = body
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), bodyLimitKey{}, body)))
	})
}

func bodyTooLarge(r *http.Request) bool {
	b, ok := r.Context().Value(bodyLimitKey{}).(*limitedBody)
	return ok && b.exceeded
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

// withAccessLog logs one line per request. It logs the path, never the query or body:
// license keys in paths are identifiers, not secrets, but bodies may carry tokens.
func withAccessLog(log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(rec, r)
		log.InfoContext(r.Context(), "http", "method", r.Method, "path", r.URL.Path, "status", rec.status, "duration_ms", time.Since(start).Milliseconds())
	})
}
