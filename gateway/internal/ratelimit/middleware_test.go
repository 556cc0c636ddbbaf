package ratelimit

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/pkg/license"
)

// lastIP hands every client of every test an address of its own, since the tests share one
// Redis and the tiers of Classify.
var lastIP atomic.Uint32

func newClientAddr() string {
	n := lastIP.Add(1)
	return netip.AddrFrom4([4]byte{198, 18, byte(n >> 8), byte(n)}).String() + ":40000"
}

// app is a gateway: the middleware in front of a handler answering status and recording
// the bodies it reads.
type app struct {
	*gateway
	handler http.Handler
	calls   atomic.Int64

	mu     sync.Mutex
	bodies []string
}

func newApp(t *testing.T, url string, c *clock, status int, trusted ...netip.Prefix) *app {
	t.Helper()
	a := &app{gateway: newGateway(t, url, c)}
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.calls.Add(1)
		b, err := io.ReadAll(r.Body)
		if err != nil {
			t.Error(err)
		}
		a.mu.Lock()
		a.bodies = append(a.bodies, string(b))
		a.mu.Unlock()
		w.WriteHeader(status)
	})
	a.handler = Middleware(a.Limiter, 300, trusted, next)
	return a
}

func (a *app) do(method, path, remote, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	r.RemoteAddr = remote
	w := httptest.NewRecorder()
	a.handler.ServeHTTP(w, r)
	return w
}

func (a *app) activate(remote, key string) *httptest.ResponseRecorder {
	return a.do("POST", "/v1/activate-license", remote, `{"key":"`+key+`","instance_id":"i-1"}`)
}

// checkHeaders fails unless w carries the X-RateLimit headers of limit, remaining and the
// window ending at reset.
func checkHeaders(t *testing.T, w *httptest.ResponseRecorder, limit, remaining int, reset time.Time) {
	t.Helper()
	h := w.Result().Header
	got := [3]string{h.Get("X-RateLimit-Limit"), h.Get("X-RateLimit-Remaining"), h.Get("X-RateLimit-Reset")}
	want := [3]string{strconv.Itoa(limit), strconv.Itoa(remaining), strconv.FormatInt(reset.Unix(), 10)}
	if got != want {
		t.Errorf("X-RateLimit Limit/Remaining/Reset = %q, want %q", got, want)
	}
}

func TestMiddleware_LimitReachedAnswers429WithTheExactBodyHeadersAndRetryAfter(t *testing.T) {
	t.Parallel()
	a := newApp(t, sharedRedisURL(t), newClock(t0.Add(500*time.Millisecond)), http.StatusOK)
	ip := newClientAddr()
	for i := 1; i <= 100; i++ {
		w := a.do("POST", "/v1/issue-license", ip, `{}`)
		if w.Code != http.StatusOK {
			t.Fatalf("request %d: %d, want 200", i, w.Code)
		}
		if i == 1 {
			checkHeaders(t, w, 100, 99, windowEnd)
		}
	}
	w := a.do("POST", "/v1/issue-license", ip, `{}`)
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("request 101: %d, want 429", w.Code)
	}
	// 9m59.5s are left in the window: rounded up.
	const want = `{"error":"Too Many Requests","statusCode":429,"message":"Rate limit exceeded, retry in 600 seconds","retryAfter":600}`
	if got := w.Body.String(); got != want {
		t.Errorf("body\n%s\nwant\n%s", got, want)
	}
	checkHeaders(t, w, 100, 0, windowEnd)
	if got := w.Header().Get("Retry-After"); got != "600" {
		t.Errorf("Retry-After %q, want 600", got)
	}
	if got := w.Header().Get("Content-Type"); got != "application/json" {
		t.Errorf("Content-Type %q", got)
	}
	if n := a.calls.Load(); n != 100 {
		t.Errorf("the handler ran %d times, want only for the 100 allowed requests", n)
	}
}

func TestMiddleware_RetryAfterIsAtLeastOneSecond(t *testing.T) {
	t.Parallel()
	a := newApp(t, sharedRedisURL(t), newClock(windowEnd.Add(-100*time.Millisecond)), http.StatusOK)
	key := unique(t)
	ip := newClientAddr()
	for range 20 {
		a.activate(ip, key)
	}
	w := a.activate(ip, key)
	const body = `{"error":"Too Many Requests","statusCode":429,"message":"Rate limit exceeded, retry in 1 seconds","retryAfter":1}`
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "1" || w.Body.String() != body {
		t.Errorf("%d Retry-After %q body %s, want 429 with 1 second", w.Code, w.Header().Get("Retry-After"), w.Body)
	}
}

func TestMiddleware_HeadersAreOnEveryResponseOfALimitedRouteIncludingDownstreamErrors(t *testing.T) {
	t.Parallel()
	for _, status := range []int{http.StatusOK, http.StatusBadRequest, http.StatusForbidden, http.StatusNotFound, http.StatusInternalServerError} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			t.Parallel()
			a := newApp(t, sharedRedisURL(t), newClock(t0), status)
			ip := newClientAddr()
			a.do("POST", "/v1/verify-license", ip, `{"key":"K"}`)
			w := a.do("POST", "/v1/verify-license", ip, `{"key":"K"}`)
			if w.Code != status {
				t.Fatalf("status %d, want the handler's %d", w.Code, status)
			}
			checkHeaders(t, w, 1000, 998, windowEnd)
		})
	}
}

func TestMiddleware_UnlimitedRoutesPassThroughWithoutHeadersOrCounting(t *testing.T) {
	t.Parallel()
	a := newApp(t, sharedRedisURL(t), newClock(t0), http.StatusOK)
	ip := newClientAddr()
	for _, route := range [][2]string{{"GET", "/"}, {"POST", "/v1/webhooks/storefront/wh_1"}, {"POST", "/v1/webhooks/billing"}, {"GET", "/v1/unknown"}} {
		for range 1001 { // more than any tier allows
			w := a.do(route[0], route[1], ip, `{"key":"K"}`)
			if w.Code != http.StatusOK {
				t.Fatalf("%s %s: %d", route[0], route[1], w.Code)
			}
			for k := range w.Header() {
				if strings.HasPrefix(k, "X-Ratelimit") || k == "Retry-After" {
					t.Fatalf("%s %s carries %s", route[0], route[1], k)
				}
			}
		}
	}
	if n := a.roundTrip.Load(); n != 0 {
		t.Errorf("%d Redis round trips for unlimited routes", n)
	}
}

func TestMiddleware_PerKeyTierRefusesWhileTheIPTierHasBudget_HeadersDescribePerKey(t *testing.T) {
	t.Parallel()
	a := newApp(t, sharedRedisURL(t), newClock(t0), http.StatusOK)
	key := unique(t)
	for i := range 20 {
		if w := a.activate(newClientAddr(), key); w.Code != http.StatusOK {
			t.Fatalf("activation %d of the key: %d", i+1, w.Code)
		}
	}
	ip := newClientAddr()
	w := a.do("POST", "/v1/deactivate-license", ip, `{"key":"`+key+`","token":"t"}`)
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("21st request for the key from a fresh IP: %d, want 429", w.Code)
	}
	checkHeaders(t, w, 20, 0, windowEnd)
	if w := a.activate(ip, key+"-other"); w.Code != http.StatusOK {
		t.Errorf("another key from the same IP: %d, want 200", w.Code)
	} else {
		// The IP tier's headers again; the refused request used one of its 300.
		checkHeaders(t, w, 300, 298, windowEnd)
	}
}

// Licensing accepts a key in any case, with or without dashes, so every spelling of one
// key must draw on the one budget.
func TestMiddleware_PerKeyTierCountsEverySpellingOfAKeyAsOne(t *testing.T) {
	t.Parallel()
	a := newApp(t, sharedRedisURL(t), newClock(t0), http.StatusOK)
	key := license.NewKey()
	spellings := []string{key, strings.ToLower(key), strings.ReplaceAll(key, "-", ""), strings.ReplaceAll(key, "-", " ")}
	for i := range 20 {
		if w := a.activate(newClientAddr(), spellings[i%len(spellings)]); w.Code != http.StatusOK {
			t.Fatalf("activation %d of the key: %d", i+1, w.Code)
		}
	}
	for _, k := range spellings {
		if w := a.activate(newClientAddr(), k); w.Code != http.StatusTooManyRequests {
			t.Fatalf("spelling %q after 20 requests: %d, want 429", k, w.Code)
		}
	}
}

func TestMiddleware_ARequestRefusedByItsIPIsNotCountedAgainstTheLicenseKey(t *testing.T) {
	t.Parallel()
	a := newApp(t, sharedRedisURL(t), newClock(t0), http.StatusOK)
	ip := newClientAddr()
	for range 300 { // verify-license-file shares the Activation tier and has no per-key tier
		a.do("POST", "/v1/verify-license-file", ip, `{}`)
	}
	key := unique(t)
	for range 5 {
		w := a.activate(ip, key)
		if w.Code != http.StatusTooManyRequests {
			t.Fatalf("activation from an exhausted IP: %d, want 429", w.Code)
		}
		checkHeaders(t, w, 300, 0, windowEnd)
	}
	for i := range 20 {
		if w := a.activate(newClientAddr(), key); w.Code != http.StatusOK {
			t.Fatalf("activation %d of the key from other IPs: %d, want the full 20 allowed", i+1, w.Code)
		}
	}
}

func TestMiddleware_TheNextHandlerReadsTheBodyTheClientSent(t *testing.T) {
	t.Parallel()
	a := newApp(t, sharedRedisURL(t), newClock(t0), http.StatusOK)
	key := unique(t)
	small := `{"key":"` + key + `","instance_id":"i-1"}`
	// Too large to look into: the handler still gets every byte and answers 413 itself.
	large := `{"key":"` + key + `-large","pad":"` + strings.Repeat("x", maxKeyBodyBytes) + `"}`
	ip := newClientAddr()
	a.do("POST", "/v1/activate-license", ip, small)
	for range 25 {
		if w := a.do("POST", "/v1/activate-license", ip, large); w.Code != http.StatusOK {
			t.Fatalf("oversized body: %d; its key must not be counted", w.Code)
		}
	}
	if len(a.bodies) != 26 || a.bodies[0] != small || a.bodies[25] != large {
		t.Errorf("the handler read other bodies than the client sent")
	}
}

func TestMiddleware_ABodyWithoutAUsableKeyOnlyCountsTheIPTier(t *testing.T) {
	t.Parallel()
	a := newApp(t, sharedRedisURL(t), newClock(t0), http.StatusOK)
	key := unique(t)
	for _, body := range []string{
		``, `not json`, `[]`, `{}`, `{"key":""}`, `{"key":null}`, `{"key":5}`, `{"key":{"k":"v"}}`,
		// The API reads "key" only; a differently cased field must not pick the counter.
		`{"Key":"` + key + `"}`, `{"KEY":"` + key + `"}`,
	} {
		for range 21 { // one more than a per-key budget
			if w := a.do("POST", "/v1/activate-license", newClientAddr(), body); w.Code != http.StatusOK {
				t.Fatalf("body %q: %d, want 200 with no per-key limit", body, w.Code)
			}
		}
	}
	for i := range 20 {
		if w := a.activate(newClientAddr(), key); w.Code != http.StatusOK {
			t.Fatalf("activation %d of %q: %d; bodies without a usable key spent its budget", i+1, key, w.Code)
		}
	}
}

func TestMiddleware_TwoGatewaysShareOneBudgetThroughRedis(t *testing.T) {
	t.Parallel()
	url := sharedRedisURL(t)
	c := newClock(t0)
	gateways := []*app{newApp(t, url, c, http.StatusOK), newApp(t, url, c, http.StatusOK)}
	key := unique(t)
	allowed := 0
	for i := range 30 {
		if gateways[i%2].activate(newClientAddr(), key).Code == http.StatusOK {
			allowed++
		}
	}
	if allowed != 20 {
		t.Errorf("two gateways allowed %d activations of one key, want 20 in all", allowed)
	}
}

func TestMiddleware_ParallelActivationsOfOneKeyAllowExactlyTwenty(t *testing.T) {
	t.Parallel()
	a := newApp(t, sharedRedisURL(t), newClock(t0), http.StatusOK)
	key := unique(t)
	var ok, refused atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 200 {
		ip := newClientAddr()
		wg.Go(func() {
			<-start
			switch a.activate(ip, key).Code {
			case http.StatusOK:
				ok.Add(1)
			case http.StatusTooManyRequests:
				refused.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	if ok.Load() != 20 || refused.Load() != 180 {
		t.Errorf("%d allowed, %d refused; want 20 and 180", ok.Load(), refused.Load())
	}
}

func TestMiddleware_ClientsBehindATrustedProxyHaveBudgetsOfTheirOwn(t *testing.T) {
	t.Parallel()
	a := newApp(t, sharedRedisURL(t), newClock(t0), http.StatusOK, netip.MustParsePrefix("10.0.0.0/8"))
	proxy := "10.1.2.3:5000"
	clients := []string{newClientAddr(), newClientAddr()}
	for i, client := range clients {
		host, _, _ := strings.Cut(client, ":")
		r := httptest.NewRequest("GET", "/v1/public-key", nil)
		r.RemoteAddr = proxy
		r.Header.Set("X-Forwarded-For", "1.1.1.1, "+host) // the left entry is the client's own claim
		w := httptest.NewRecorder()
		a.handler.ServeHTTP(w, r)
		if got := w.Header().Get("X-RateLimit-Remaining"); got != "499" {
			t.Errorf("client %d behind the proxy has %s remaining, want a fresh 499", i+1, got)
		}
	}
}

func TestMiddleware_WithRedisUnreachableRequestsAreAnsweredAndLimited(t *testing.T) {
	t.Parallel()
	a := newApp(t, unreachableRedisURL(t), newClock(t0), http.StatusOK)
	ip := newClientAddr()
	for i := 1; i <= 101; i++ {
		w := a.do("POST", "/v1/revoke-license", ip, `{}`)
		want := http.StatusOK
		if i == 101 {
			want = http.StatusTooManyRequests
		}
		if w.Code != want {
			t.Fatalf("request %d: %d, want %d", i, w.Code, want)
		}
		checkHeaders(t, w, 100, max(0, 100-i), windowEnd)
	}
	if n := a.roundTrip.Load(); n != 1 {
		t.Errorf("%d Redis attempts within the cooldown, want 1", n)
	}
}
