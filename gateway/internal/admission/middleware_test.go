package admission

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/gateway/internal/edge"
)

// blocking is a handler that holds every request until release is closed.
func blocking(release chan struct{}, entered chan struct{}) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
		w.WriteHeader(http.StatusOK)
	})
}

func TestOverTheLimitTheAPIAnswers503WithRetryAfterAndProbesStillAnswer(t *testing.T) {
	lim := NewLimiter(Config{MinLimit: 2, MaxLimit: 2, InitialLimit: 2})
	release, entered := make(chan struct{}), make(chan struct{}, 10)
	h := Middleware(Options{Limiter: lim, Tenants: NewTenants(), Refuse: edge.WriteOverloaded}, blocking(release, entered))
	done := make(chan struct{})
	for range 2 {
		go func() {
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/v1/verify-license", strings.NewReader(`{"key":"K"}`)))
			done <- struct{}{}
		}()
		<-entered
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/verify-license", strings.NewReader(`{"key":"K"}`)))
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") != "1" ||
		rec.Body.String() != `{"error":"Service unavailable, retry"}` {
		t.Fatalf("refusal: %d Retry-After %q body %s", rec.Code, rec.Header().Get("Retry-After"), rec.Body)
	}
	for _, path := range []string{"/", "/healthz", "/readyz", "/console/"} {
		go func() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		}()
		select {
		case <-entered: // reached the handler despite the full limit
		case <-time.After(10 * time.Second):
			t.Fatalf("%s was held back by admission control", path)
		}
	}
	close(release)
	<-done
	<-done
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/verify-license", strings.NewReader(`{"key":"K"}`)))
	if rec.Code != http.StatusOK {
		t.Fatalf("after the load went: %d", rec.Code)
	}
}

func TestRequestsCountByCredentialOrByTheirKeysTenant(t *testing.T) {
	book := NewTenants()
	book.Learn("abcd-efgh-jkmn-pqrs-tvwx-yz01-2345", "tenant-a")
	post := func(body string) *http.Request {
		return httptest.NewRequest(http.MethodPost, "/v1/verify-license", strings.NewReader(body))
	}
	if got := book.Of(post(`{"key":"ABCDEFGHJKMNPQRSTVWXYZ012345"}`)); got != "tenant:tenant-a" {
		t.Fatalf("known key (another spelling): %q", got)
	}
	r := post(`{"key":"never-answered"}`)
	if got := book.Of(r); got != UnknownKeys {
		t.Fatalf("unknown key: %q", got)
	}
	if b, _ := readAll(r); b != `{"key":"never-answered"}` {
		t.Fatalf("the body the next handler reads: %q", b)
	}
	if got := book.Of(post(`{}`)); got != NoKey {
		t.Fatalf("no key: %q", got)
	}
	withKey := post(`{"key":"abcd-efgh-jkmn-pqrs-tvwx-yz01-2345"}`)
	withKey.Header.Set("Authorization", "Bearer secret-one")
	other := post(`{}`)
	other.Header.Set("Authorization", "Bearer secret-two")
	a, b := book.Of(withKey), book.Of(other)
	if !strings.HasPrefix(a, "credential:") || a == b || strings.Contains(a, "secret") {
		t.Fatalf("credentials: %q and %q; want two distinct shares that do not spell the secret", a, b)
	}
}

func readAll(r *http.Request) (string, error) {
	b, err := io.ReadAll(r.Body)
	return string(b), err
}
