package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The Admin-Info tier is the one whose limit is configurable, so these tests run private
// stacks with ADMIN_RATE_LIMIT_MAX=5 and use GET /v1/admin/build-info.

const buildInfo = "/v1/admin/build-info"

func expectRateHeaders(t *testing.T, r *Response, limit, remaining int) {
	t.Helper()
	if got := r.Header.Get("X-RateLimit-Limit"); got != strconv.Itoa(limit) {
		t.Fatalf("X-RateLimit-Limit %q, want %d", got, limit)
	}
	if got := r.Header.Get("X-RateLimit-Remaining"); got != strconv.Itoa(remaining) {
		t.Fatalf("X-RateLimit-Remaining %q, want %d", got, remaining)
	}
	reset, err := strconv.ParseInt(r.Header.Get("X-RateLimit-Reset"), 10, 64)
	now := time.Now().Unix()
	if err != nil || reset <= now || reset > now+15*60 {
		t.Fatalf("X-RateLimit-Reset %q is not a Unix time within the 15-minute window", r.Header.Get("X-RateLimit-Reset"))
	}
}

// clearOfWindowEdge waits, when the next 15-minute rate-limit window starts within need,
// until it has started: windows are aligned to the Unix epoch, so a test that counts a
// tier down across a boundary would see its budget refilled half-way.
func clearOfWindowEdge(t *testing.T, need time.Duration) {
	t.Helper()
	const window = 15 * time.Minute
	now := time.Now()
	next := now.Truncate(time.Second).Add(window - time.Duration(now.Unix()%int64(window/time.Second))*time.Second)
	if left := next.Sub(now); left < need {
		t.Logf("waiting %s for the next rate-limit window", left.Round(time.Second))
		time.Sleep(left + time.Second)
	}
}

func expect429(t *testing.T, r *Response) {
	t.Helper()
	r.Expect(t, http.StatusTooManyRequests)
	if got := r.Keys(t); len(got) != 4 || got[0] != "error" || got[1] != "statusCode" || got[2] != "message" || got[3] != "retryAfter" {
		t.Fatalf("429 fields %v: %s", got, r.Body)
	}
	var body struct {
		Error      string `json:"error"`
		StatusCode int    `json:"statusCode"`
		Message    string `json:"message"`
		RetryAfter int    `json:"retryAfter"`
	}
	if err := json.Unmarshal(r.Body, &body); err != nil {
		t.Fatal(err)
	}
	if body.Error != "Too Many Requests" || body.StatusCode != 429 || body.Message == "" || body.RetryAfter < 1 || body.RetryAfter > 900 {
		t.Fatalf("429 body %s", r.Body)
	}
	if r.Header.Get("Retry-After") != strconv.Itoa(body.RetryAfter) {
		t.Fatalf("Retry-After %q, body retryAfter %d", r.Header.Get("Retry-After"), body.RetryAfter)
	}
	if r.Header.Get("X-RateLimit-Remaining") != "0" {
		t.Fatalf("a 429 reports Remaining 0, got %q", r.Header.Get("X-RateLimit-Remaining"))
	}
}

func TestRateLimitHeadersOnEveryResponseOfALimitedRoute(t *testing.T) {
	t.Parallel()
	clearOfWindowEdge(t, time.Minute)
	s := selfHosted(t)
	c := admin(t, s)
	expectRateHeaders(t, c.Get(buildInfo).Expect(t, 200), 300, 299)
	// Errors carry them too: a bad credential is still a request of the tier.
	bad := newClient(t, s.URL, "wrong")
	expectRateHeaders(t, bad.Get(buildInfo).Expect(t, 403), 300, 299)
	// One budget per tier and IP, shared by the tier's routes.
	expectRateHeaders(t, c.Get("/v1/admin/license/nope"), 300, 298)
	// Each tier counts separately.
	expectRateHeaders(t, c.Get("/v1/public-key"), 500, 499)
}

func TestAdminRateLimitMaxSetsTheAdminInfoTier(t *testing.T) {
	t.Parallel()
	clearOfWindowEdge(t, time.Minute)
	s := startStack(t, map[string]string{"ADMIN_RATE_LIMIT_MAX": "5"})
	t.Cleanup(s.Stop)
	c := admin(t, s)
	for i := 1; i <= 5; i++ {
		expectRateHeaders(t, c.Get(buildInfo).Expect(t, 200), 5, 5-i)
	}
	expect429(t, c.Get(buildInfo))
	// Another client IP has its own budget.
	admin(t, s).Get(buildInfo).Expect(t, 200)
}

func TestForwardedForIsIgnoredUnlessThePeerIsATrustedProxy(t *testing.T) {
	t.Parallel()
	clearOfWindowEdge(t, time.Minute)
	// A redis-server of this stack's own: every request here counts against the peer
	// address 127.0.0.1, which is also what any other test's request without
	// X-Forwarded-For counts against in the shared Redis, so a shared budget could be
	// spent before this test's first request.
	s := startStack(t, map[string]string{"ADMIN_RATE_LIMIT_MAX": "5", "TRUSTED_PROXIES": "", "REDIS_URL": ""})
	t.Cleanup(s.Stop)
	// Every request claims a new client IP; none is believed, so they share one budget.
	for i := 1; i <= 5; i++ {
		admin(t, s).Get(buildInfo).Expect(t, 200)
	}
	expect429(t, admin(t, s).Get(buildInfo))
}

func TestTrustedProxyForwardedForSelectsTheRightmostUntrustedAddress(t *testing.T) {
	t.Parallel()
	clearOfWindowEdge(t, time.Minute)
	s := startStack(t, map[string]string{"ADMIN_RATE_LIMIT_MAX": "5", "TRUSTED_PROXIES": "127.0.0.1/32,192.0.2.0/24"})
	t.Cleanup(s.Stop)
	c := admin(t, s)
	// The left-most entry is whatever the client wrote; the right-most untrusted one is
	// what our trusted proxy saw. Spoofing the left part must not buy a new budget.
	for i := 1; i <= 5; i++ {
		spoofed := "198.51.100." + strconv.Itoa(i) + ", 203.0.113.7, 192.0.2.10"
		c.Do(http.MethodGet, buildInfo, nil, "X-Forwarded-For", spoofed).Expect(t, 200)
	}
	expect429(t, c.Do(http.MethodGet, buildInfo, nil, "X-Forwarded-For", "198.51.100.99, 203.0.113.7, 192.0.2.10"))
	c.Do(http.MethodGet, buildInfo, nil, "X-Forwarded-For", "203.0.113.8, 192.0.2.10").Expect(t, 200)
}

func TestTwoGatewaysShareOneBudget(t *testing.T) {
	t.Parallel()
	clearOfWindowEdge(t, time.Minute)
	s := startStack(t, map[string]string{"ADMIN_RATE_LIMIT_MAX": "6"})
	t.Cleanup(s.Stop)
	second, err := s.StartGateway(context.Background(), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := admin(t, s)
	b := &Client{t: t, Base: second, IP: a.IP, Token: a.Token}
	for i := 0; i < 3; i++ {
		a.Get(buildInfo).Expect(t, 200)
		b.Get(buildInfo).Expect(t, 200)
	}
	expect429(t, a.Get(buildInfo))
	expect429(t, b.Get(buildInfo))
}

func TestRedisDownKeepsServingWithPerGatewayLimits(t *testing.T) {
	t.Parallel()
	clearOfWindowEdge(t, time.Minute)
	// A redis-server of this stack's own, since the test stops it.
	s := startStack(t, map[string]string{"ADMIN_RATE_LIMIT_MAX": "4", "REDIS_URL": ""})
	t.Cleanup(s.Stop)
	c := admin(t, s)
	c.Get(buildInfo).Expect(t, 200)
	if err := s.Redis.Stop(); err != nil {
		t.Fatal(err)
	}
	// Still answering, still limiting (in memory, per gateway), still reporting headers.
	start := time.Now()
	for i := 0; i < 4; i++ {
		r := c.Get(buildInfo).Expect(t, 200)
		if r.Header.Get("X-RateLimit-Limit") != "4" {
			t.Fatalf("headers missing while Redis is down: %v", r.Header)
		}
	}
	expect429(t, c.Get(buildInfo))
	if elapsed := time.Since(start); elapsed > 10*time.Second {
		t.Fatalf("a dead Redis stalled requests: %v for 5 requests", elapsed)
	}
	// Redis back: shared counting resumes (a fresh client IP starts a fresh window).
	if err := s.Redis.Start(context.Background(), ""); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		// A fresh client IP each time: one that spent its in-process budget is refused
		// without asking Redis, so it would never probe it.
		r := admin(t, s).Get(buildInfo)
		if r.Status == 200 && s.Redis != nil && redisHasKeys(t, s.Redis.URL()) {
			break
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(s.LogPath("gateway"))
			t.Fatalf("the gateway did not go back to Redis after it restarted; gateway log:\n%s", b)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// redisHasKeys reports whether the gateway has written counters to the Redis at url.
func redisHasKeys(t *testing.T, url string) bool {
	t.Helper()
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	n, err := rdb.DBSize(context.Background()).Result()
	return err == nil && n > 0
}

// The per-license-key Activation tier (20 / 15 min) counts activate-license and
// deactivate-license together by the body's key, whatever client IP sends them; other keys
// keep their own budget.
func TestActivationPerLicenseKeyTier(t *testing.T) {
	t.Parallel()
	clearOfWindowEdge(t, time.Minute)
	s := selfHosted(t)
	issue := func() string {
		r := admin(t, s).Post("/v1/issue-license", map[string]any{
			"tier": "pro", "product_id": "ratelimit-per-key", "issued_to": "rl@example.com", "max_activations": 100,
		}).Expect(t, http.StatusOK)
		return r.JSON(t)["key"].(string)
	}
	key, other := issue(), issue()
	for i := 0; i < 15; i++ {
		r := anon(t, s).Post("/v1/activate-license", map[string]any{"key": key, "instance_id": "host-" + strconv.Itoa(i)})
		r.Expect(t, http.StatusOK)
		expectRateHeaders(t, r, 300, 299)
	}
	for i := 0; i < 5; i++ {
		anon(t, s).Post("/v1/deactivate-license", map[string]any{"key": key, "token": "not-a-token"}).Expect(t, http.StatusOK)
	}
	// A fresh client IP with its whole Activation budget is still refused for this key, in
	// any spelling licensing accepts, and the headers describe the per-key limiter.
	r := anon(t, s).Post("/v1/activate-license", map[string]any{"key": strings.ToLower(strings.ReplaceAll(key, "-", "")), "instance_id": "one-too-many"})
	expect429(t, r)
	expectRateHeaders(t, r, 20, 0)
	anon(t, s).Post("/v1/deactivate-license", map[string]any{"key": key, "token": "not-a-token"}).Expect(t, http.StatusTooManyRequests)
	anon(t, s).Post("/v1/activate-license", map[string]any{"key": other, "instance_id": "host-0"}).Expect(t, http.StatusOK)
}
