package admission

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/gateway/internal/edge"
	"github.com/keyhouse/keyhouse/pkg/auth"
	"github.com/keyhouse/keyhouse/pkg/license"
	"github.com/keyhouse/keyhouse/pkg/licensecache"
	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	releasesv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/releases/v1"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
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
	lim := strictLimiter(2)
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
	withCredential := func(authorization string) *http.Request {
		r := post(`{"key":"abcd-efgh-jkmn-pqrs-tvwx-yz01-2345"}`)
		r.Header.Set("Authorization", authorization)
		return r
	}
	for _, c := range []string{"Bearer secret-one", "Bearer secret-two", "Bearer made-up"} {
		if got := book.Of(withCredential(c)); got != UnknownCredentials {
			t.Fatalf("a credential no answer has proven: %q, want %q", got, UnknownCredentials)
		}
	}
	book.LearnCredential("Bearer secret-one", auth.CallerTenantPrefix+"tenant-a")
	book.LearnCredential("Bearer secret-two", auth.CallerAdmin)
	book.LearnCredential("Bearer made-up", "tenant ")
	book.LearnCredential("Bearer made-up", "somebody")
	if got := book.Of(withCredential("Bearer secret-one")); got != "tenant:tenant-a" {
		t.Fatalf("a credential proven to be tenant-a's: %q, the share of its license keys", got)
	}
	if got := book.Of(withCredential("Bearer secret-two")); got != "admin" {
		t.Fatalf("the admin key: %q", got)
	}
	if got := book.Of(withCredential("Bearer made-up")); got != UnknownCredentials {
		t.Fatalf("a credential answered with no tenant: %q", got)
	}
	book.LearnCredential("Bearer secret-two", auth.CallerTenantPrefix+"tenant-b")
	if got := book.Of(withCredential("Bearer secret-two")); got != "tenant:tenant-b" || strings.Contains(got, "secret") {
		t.Fatalf("a credential proven again, to be another's: %q", got)
	}
}

// fakeAnswer is an invoker whose answer carries header.
func fakeAnswer(header metadata.MD) grpc.UnaryInvoker {
	return func(_ context.Context, _ string, _, _ any, _ *grpc.ClientConn, opts ...grpc.CallOption) error {
		for _, o := range opts {
			if h, ok := o.(grpc.HeaderCallOption); ok {
				*h.HeaderAddr = header
			}
		}
		return nil
	}
}

func TestTheBookLearnsFromTheServicesAnswers(t *testing.T) {
	book := NewTenants()
	learn := book.Learning()
	// An answer of activations or releases about two keys, to a call made with a
	// client's credential.
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer real-key")
	answer := metadata.Pairs(licensecache.TenantHeader, "AAAA-BBBB t_1", licensecache.TenantHeader, "CCCC-DDDD t_2", auth.CallerHeader, "tenant t_1")
	if err := learn(ctx, "/keyhouse.releases.v1.ReleasesService/CheckUpdate", nil, nil, nil, fakeAnswer(answer)); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{"AAAA-BBBB": "t_1", "CCCC-DDDD": "t_2"} {
		if got, ok := book.Owner(key); !ok || got != want {
			t.Errorf("key %s: owner %q %v, want %q", key, got, ok, want)
		}
	}
	r := httptest.NewRequest(http.MethodGet, "/v1/licenses", nil)
	r.Header.Set("Authorization", "Bearer real-key")
	if got := book.Of(r); got != "tenant:t_1" {
		t.Errorf("the credential the answer proved: %q, want tenant:t_1", got)
	}
	// A call without a client's credential (a public route) learns no credential, though
	// its answer names a caller.
	if err := learn(context.Background(), "/keyhouse.releases.v1.ReleasesService/CheckUpdate", nil, nil, nil, fakeAnswer(answer)); err != nil {
		t.Fatal(err)
	}
	if n := len(book.byCredential); n != 1 {
		t.Errorf("%d credentials known after a call that carried none, want the 1 from before", n)
	}
}

func TestAFloodOfMadeUpCredentialsCountsAsOneTenant(t *testing.T) {
	lim := strictLimiter(2)
	book := NewTenants()
	book.LearnCredential("Bearer tenant-b-key", auth.CallerTenantPrefix+"t_b")
	release, entered := make(chan struct{}), make(chan struct{}, 64)
	h := Middleware(Options{Limiter: lim, Tenants: book, Refuse: edge.WriteOverloaded}, blocking(release, entered))
	request := func(authorization string) *http.Request {
		r := httptest.NewRequest(http.MethodGet, "/v1/licenses", nil)
		r.Header.Set("Authorization", authorization)
		return r
	}
	// Each request of the flood makes its credential up; the admitted ones hold their
	// slots until the end.
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(release)
	admitted := 0
	for i := range 30 {
		rec := httptest.NewRecorder()
		wg.Add(1)
		served := make(chan struct{})
		go func() {
			defer wg.Done()
			h.ServeHTTP(rec, request(fmt.Sprintf("Bearer made-up-%d", i)))
			close(served)
		}()
		select {
		case <-entered:
			admitted++
		case <-served:
			if rec.Code != http.StatusServiceUnavailable {
				t.Fatalf("made-up credential %d: %d", i, rec.Code)
			}
		}
	}
	if admitted > 2 {
		t.Errorf("%d requests with made-up credentials admitted at a limit of 2: each counted as a light tenant of its own", admitted)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		h.ServeHTTP(httptest.NewRecorder(), request("Bearer tenant-b-key"))
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("tenant B's request was not admitted while the made-up credentials held the limit")
	}
}

func readAll(r *http.Request) (string, error) {
	b, err := io.ReadAll(r.Body)
	return string(b), err
}

// A verify-license, validate-license or check-update the gateway's cache answers holds
// nothing behind the gateway and costs it about what its refusal would: it is answered
// whatever the limit. Any other request past the limit is refused: another key, another
// instance, another version or channel, a body not read the plain way, or the same key
// once its answers were dropped.
func TestARequestTheCacheAnswersIsNeverRefused(t *testing.T) {
	caches, key := cachesHolding(t, time.Minute)
	if _, err := caches.ValidSeats.GetUntil(key, "seat-1", func() (*activationsv1.ValidateLicenseResponse, time.Time, error) {
		return &activationsv1.ValidateLicenseResponse{Valid: true}, time.Time{}, nil
	}); err != nil {
		t.Fatal(err)
	}
	// Up to date on linux 1.0.0 of stable, as the check-update caches keep it: the
	// license's class, and the class's answer to the question (edge's
	// checkUpdateQuestion: product, channel, platform, version).
	caches.UpdateClasses.Keep(caches.UpdateClasses.StartLoad(), key, "", "tenant\x00app", time.Time{})
	caches.Updates.Keep(caches.Updates.StartLoad(), "tenant\x00app", "app\x00\x00linux\x001.0.0", &releasesv1.CheckUpdateResponse{UpdateAvailable: false}, time.Time{})
	h, entered := behindLimit(t, 2, caches)
	send := func(path, body string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, strings.NewReader(body)))
		return rec
	}
	for range 2 {
		go send("/v1/verify-license", `{"key":"`+license.NewKey()+`"}`)
		<-entered
	}
	typed := strings.ToLower(strings.ReplaceAll(key, "-", "")) // as a person may type it
	for _, r := range []struct{ path, body string }{
		{"/v1/verify-license", `{"key":"` + key + `"}`},
		{"/v1/verify-license", `{"key":"` + typed + `"}`},
		{"/v1/validate-license", `{"key":"` + key + `","instance_id":"seat-1"}`},
		{"/v1/validate-license", `{ "instance_id" : "seat-1", "key" : "` + typed + `" }`},
		{"/v1/check-update", `{"key":"` + key + `","product_id":"app","platform":"linux","current_version":"1.0.0"}`},
		{"/v1/check-update", `{ "currentVersion":"1.0.0", "platform":"linux", "productId":"app", "key":"` + typed + `" }` + "\n"},
	} {
		go send(r.path, r.body)
		select {
		case <-entered:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s %s, which the cache answers, was held back at the limit", r.path, r.body)
		}
	}
	for _, r := range []struct{ path, body string }{
		{"/v1/verify-license", `{"key":"` + license.NewKey() + `"}`},
		{"/v1/validate-license", `{"key":"` + key + `","instance_id":"seat-2"}`},
		{"/v1/validate-license", `{"key":"` + key + `","note":5,"instance_id":"seat-1"}`},
		{"/v1/check-update", `{"key":"` + key + `","product_id":"app","platform":"linux","current_version":"0.9.0"}`},
		{"/v1/check-update", `{"key":"` + key + `","product_id":"app","channel":"beta","platform":"linux","current_version":"1.0.0"}`},
		{"/v1/check-update", `{"key":"` + key + `","product_id":"app","platform":"linux","current_version":"1.0.0","dry_run":true}`},
		{"/v1/check-update", `{"key":"` + key + `","product_id":"app","productId":"app","platform":"linux","current_version":"1.0.0"}`},
	} {
		if rec := send(r.path, r.body); rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("%s %s past the limit: %d; want 503", r.path, r.body, rec.Code)
		}
	}
	caches.Verified.Invalidate(key)
	caches.ValidSeats.Invalidate(key)
	caches.UpdateClasses.Invalidate(key)
	for _, r := range []struct{ path, body string }{
		{"/v1/verify-license", `{"key":"` + key + `"}`},
		{"/v1/validate-license", `{"key":"` + key + `","instance_id":"seat-1"}`},
		{"/v1/check-update", `{"key":"` + key + `","product_id":"app","platform":"linux","current_version":"1.0.0"}`},
	} {
		if rec := send(r.path, r.body); rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("%s about a key whose answers were dropped, past the limit: %d; want 503", r.path, rec.Code)
		}
	}
}

// An answer with less than a second to live still takes a slot: its request may wait
// that long for its handler on a saturated gateway, and reach the services as a miss.
func TestAnAnswerAboutToExpireStillTakesASlot(t *testing.T) {
	caches, key := cachesHolding(t, 500*time.Millisecond)
	h, entered := behindLimit(t, 1, caches)
	go h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/v1/verify-license", strings.NewReader(`{"key":"`+license.NewKey()+`"}`)))
	<-entered
	answered := make(chan int, 1)
	go func() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/verify-license", strings.NewReader(`{"key":"`+key+`"}`)))
		answered <- rec.Code
	}()
	select {
	case code := <-answered:
		if code != http.StatusServiceUnavailable {
			t.Fatalf("verify-license about an answer kept 500 ms, past the limit: %d; want 503", code)
		}
	case <-entered:
		t.Fatal("verify-license about an answer kept 500 ms was let through past the limit")
	case <-time.After(10 * time.Second):
		t.Fatal("verify-license about an answer kept 500 ms was neither refused nor let through")
	}
}

// cachesHolding returns the gateway's caches, keeping answers ttl, holding a valid
// verify-license answer about a new key, and the key.
func cachesHolding(t *testing.T, ttl time.Duration) (*edge.Caches, string) {
	t.Helper()
	caches, key := edge.NewCaches(ttl, 0), license.NewKey()
	if _, err := caches.Verified.GetUntil(key, "", func() (*licensingv1.VerifyLicenseResponse, time.Time, error) {
		return &licensingv1.VerifyLicenseResponse{Valid: true}, time.Time{}, nil
	}); err != nil {
		t.Fatal(err)
	}
	return caches, key
}

// behindLimit is admission control at a fixed limit, answering from caches, in front of
// a handler that holds every request it gets until the test ends; entered receives one
// value per request the handler gets.
func behindLimit(t *testing.T, limit int, caches *edge.Caches) (h http.Handler, entered chan struct{}) {
	release, entered := make(chan struct{}), make(chan struct{}, 10)
	t.Cleanup(func() { close(release) })
	return Middleware(Options{Limiter: strictLimiter(limit), Tenants: NewTenants(), AnswersFromMemory: caches.AnswersFromMemory, Refuse: edge.WriteOverloaded}, blocking(release, entered)), entered
}

// A request let through without a slot (its answer was in memory) carries the means to
// take one (Options.SlotOnMiss) for when its answer is gone by the time its handler asks:
// a slot of its tenant's, held until released, or, with none left, a refusal counted and
// logged as any other, whose answer carries Retry-After.
func TestARequestLetThroughFromMemoryCanTakeASlotLater(t *testing.T) {
	caches, key := cachesHolding(t, time.Minute)
	lim := strictLimiter(1)
	type takeKey struct{}
	var take func() (func(), bool)
	taken := make(chan struct{}, 1)
	h := Middleware(Options{Limiter: lim, Tenants: NewTenants(), AnswersFromMemory: caches.AnswersFromMemory, Refuse: edge.WriteOverloaded,
		SlotOnMiss: func(ctx context.Context, t func() (func(), bool)) context.Context {
			return context.WithValue(ctx, takeKey{}, t)
		},
	}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		take, _ = r.Context().Value(takeKey{}).(func() (func(), bool))
		taken <- struct{}{}
	}))
	send := func() *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/verify-license", strings.NewReader(`{"key":"`+key+`"}`)))
		<-taken
		return rec
	}
	send()
	if take == nil {
		t.Fatal("a request let through from memory carries no way to take a slot")
	}
	release, ok := take()
	if !ok || lim.InFlight() != 1 {
		t.Fatalf("a slot taken late with the limit free: %v, %d in flight; want it held", ok, lim.InFlight())
	}
	refusedBefore := testutil.ToFloat64(refusedCounter.WithLabelValues(ReasonLimit))
	rec := send()
	if _, ok := take(); ok || lim.InFlight() != 1 {
		t.Fatalf("a slot taken late with the limit full: %v, %d in flight; want a refusal", ok, lim.InFlight())
	}
	if got := rec.Header().Get("Retry-After"); got != "1" {
		t.Fatalf("the late refusal's Retry-After: %q; want 1", got)
	}
	if got := testutil.ToFloat64(refusedCounter.WithLabelValues(ReasonLimit)) - refusedBefore; got != 1 {
		t.Fatalf("keyhouse_admission_refused_total counted %g late refusals; want 1", got)
	}
	release()
	if lim.InFlight() != 0 {
		t.Fatalf("%d in flight after the late slot's release", lim.InFlight())
	}
	// A request that takes a slot on its way in carries none to take.
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/verify-license", strings.NewReader(`{"key":"`+license.NewKey()+`"}`)))
	<-taken
	if take != nil {
		t.Fatal("a request admitted with a slot carries a second one to take")
	}
}
