package admission

import (
	"bytes"
	"io"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/gateway/internal/edge"
)

// discardWriter is a ResponseWriter that keeps only the status, so the benchmark measures
// the handler's own work.
type discardWriter struct {
	header http.Header
	status int
}

func (w *discardWriter) Header() http.Header         { return w.header }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *discardWriter) WriteHeader(code int)        { w.status = code }

// BenchmarkRefusal is the gateway's own work for one refused verify-license, past the
// HTTP server's read and parse (which it cannot avoid): classify, decide, count, answer.
func BenchmarkRefusal(b *testing.B) {
	lim := strictLimiter(1)
	book := NewTenants()
	const key = "ABCD-EFGH-JKMN-PQRS-TVWX-YZ01-2345"
	book.Learn(key, "tenant-a")
	hold, _ := lim.Acquire("tenant:tenant-a")
	defer hold(time.Millisecond)
	h := Middleware(Options{Limiter: lim, Tenants: book, Refuse: edge.WriteOverloaded}, http.NotFoundHandler())
	body := []byte(`{"key":"` + key + `"}`)
	u, _ := url.Parse("/v1/verify-license")
	rd := bytes.NewReader(body)
	b.ReportAllocs()
	for b.Loop() {
		rd.Reset(body)
		r := &http.Request{Method: http.MethodPost, URL: u, Header: http.Header{"Content-Type": {"application/json"}},
			Body: io.NopCloser(rd), ContentLength: int64(len(body))}
		w := &discardWriter{header: http.Header{}}
		h.ServeHTTP(w, r)
		if w.status != http.StatusServiceUnavailable {
			b.Fatalf("status %d", w.status)
		}
	}
}
