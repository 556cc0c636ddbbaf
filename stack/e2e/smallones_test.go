package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/devinfra/testkit"
	"github.com/keyhouse/keyhouse/stack"
)

// Every answer that carries a credential says Cache-Control: no-store; others do not.
func TestAnswersThatCarryASecretSayNoStore(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	tenant := newTenant(t, s)
	c := anon(t, s)
	key := issueLicense(t, tenant, lic(product("no-store"), "max_activations", 3))
	for name, r := range map[string]*Response{
		"activate-license": c.Post("/v1/activate-license", map[string]string{"key": key, "instance_id": "host-a"}).Expect(t, 200),
		"reissue-token":    tenant.Post("/v1/admin/reissue-token", map[string]string{"key": key, "instance_id": "host-a"}).Expect(t, 200),
		"operator tenants": admin(t, s).Post("/v1/operator/tenants", map[string]string{"name": "N", "email": "n@example.com"}).Expect(t, 200),
		"rotate-api-key":   newTenant(t, s).Post("/v1/rotate-api-key", nil).Expect(t, 200),
	} {
		if got := r.Header.Get("Cache-Control"); got != "no-store" {
			t.Errorf("%s: Cache-Control %q, want no-store", name, got)
		}
	}
	for name, r := range map[string]*Response{
		"verify-license": c.Post("/v1/verify-license", map[string]string{"key": key}).Expect(t, 200),
		"public-key":     c.Get("/v1/public-key").Expect(t, 200),
	} {
		if got := r.Header.Get("Cache-Control"); got == "no-store" {
			t.Errorf("%s carries no secret but says no-store", name)
		}
	}
}

// The portal counts against the client IP's Public tier, like the API's other public routes.
func TestPortalIsOnThePublicRateTier(t *testing.T) {
	s := hosted(t)
	tenant := newTenant(t, s)
	c := newWebClient(t, s)
	c.signIn(tenant.Token)
	key := issueLicense(t, tenant, lic(product("portal-tier")))
	link := portalPath(t, c, key)
	buyer := newWebClient(t, s)
	first := buyer.get(link).expect(t, 200)
	second := buyer.get("/portal/not-a-link").expect(t, 404)
	if first.Header.Get("X-RateLimit-Limit") != "500" {
		t.Fatalf("portal page rate-limit headers: %v", first.Header)
	}
	if f, s := first.Header.Get("X-RateLimit-Remaining"), second.Header.Get("X-RateLimit-Remaining"); f != "499" || s != "498" {
		t.Fatalf("remaining %s then %s, want 499 then 498 (one budget for the portal's pages)", f, s)
	}
}

// The sign-in form's CSRF token is bound to the pre-login session: a pair the client
// made up, or the token of another browser's pre-login session, is refused.
func TestConsoleSignInCSRFIsBoundToThePreLoginSession(t *testing.T) {
	s := selfHosted(t)
	alice, mallory := newWebClient(t, s), newWebClient(t, s)
	aliceToken := alice.get("/console/login").expect(t, 200).csrf(t)
	malloryToken := mallory.get("/console/login").expect(t, 200).csrf(t)
	refused := "Invalid or missing CSRF token"
	// Another pre-login session's token.
	alice.post("/console/login", url.Values{"csrf": {malloryToken}, "api_key": {s.AdminKey}}).expect(t, 403, refused)
	// A made-up cookie and the same value as the token (the old double submit).
	forger := newWebClient(t, s)
	made := strings.Repeat("A", 43)
	u, _ := url.Parse(s.URL + "/console/login")
	forger.http.Jar.SetCookies(u, []*http.Cookie{{Name: "kh_csrf", Value: made, Path: "/console"}})
	forger.post("/console/login", url.Values{"csrf": {made}, "api_key": {s.AdminKey}}).expect(t, 403, refused)
	// The page's own token signs in.
	alice.post("/console/login", url.Values{"csrf": {aliceToken}, "api_key": {s.AdminKey}}).redirectsTo(t, "/console/")
}

// POST /v1/storefront/mappings honours Idempotency-Key: a replay answers the first
// mapping byte for byte and creates nothing; the key with another body is a 409.
func TestStorefrontMappingIdempotencyKeyReplaysTheFirstAnswer(t *testing.T) {
	t.Parallel()
	a := admin(t, selfHosted(t))
	link := uniq("plink_idem_")
	body := map[string]any{"payment_link": link, "product_id": product("idem-mapping"), "tier": "pro"}
	idem := uniq("idem-")
	first := a.Do(http.MethodPost, "/v1/storefront/mappings", body, "Idempotency-Key", idem).Expect(t, 200)
	again := a.Do(http.MethodPost, "/v1/storefront/mappings", body, "Idempotency-Key", idem).Expect(t, 200)
	if string(first.Body) != string(again.Body) {
		t.Fatalf("replay %s, first %s", again.Body, first.Body)
	}
	other := map[string]any{"payment_link": link, "product_id": body["product_id"], "tier": "free"}
	a.Do(http.MethodPost, "/v1/storefront/mappings", other, "Idempotency-Key", idem).ExpectError(t, 409, "Idempotency-Key reused with a different request")
	// Without the key the same body is the duplicate it is.
	a.Post("/v1/storefront/mappings", body).ExpectError(t, 409, "A mapping for this payment_link already exists")
	var list struct {
		Mappings []map[string]any `json:"mappings"`
	}
	if err := json.Unmarshal(a.Get("/v1/storefront/mappings").Expect(t, 200).Body, &list); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range list.Mappings {
		if m["payment_link"] == link {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d mappings for %s, want 1", n, link)
	}
}

// stallableOutput is the stack's output with a reader that can stop reading: while
// stalled, Write blocks (as a suspended terminal or a blocked log driver does), the
// processes' pipes fill, and their writes to stderr would block.
type stallableOutput struct {
	mu      sync.Mutex
	resumed chan struct{}
	lines   []string
	partial string
}

func (o *stallableOutput) Write(p []byte) (int, error) {
	o.mu.Lock()
	ch := o.resumed
	o.mu.Unlock()
	if ch != nil {
		<-ch
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	text := o.partial + string(p)
	parts := strings.Split(text, "\n")
	o.partial = parts[len(parts)-1]
	o.lines = append(o.lines, parts[:len(parts)-1]...)
	return len(p), nil
}

func (o *stallableOutput) stall() {
	o.mu.Lock()
	o.resumed = make(chan struct{})
	o.mu.Unlock()
}

func (o *stallableOutput) resume() {
	o.mu.Lock()
	close(o.resumed)
	o.resumed = nil
	o.mu.Unlock()
}

func (o *stallableOutput) resumeIfStalled() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.resumed != nil {
		close(o.resumed)
		o.resumed = nil
	}
}

func (o *stallableOutput) find(substr string) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []string
	for _, l := range o.lines {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return out
}

// While whatever reads the processes' output has stopped reading, verify-license,
// public-key and /readyz keep answering (every request logs an access line at INFO; they
// used to block once the pipe filled); once the reader reads again, each process that
// dropped lines says how many.
func TestAStalledLogReaderNeverStopsTheAPI(t *testing.T) {
	out := &stallableOutput{}
	name := fmt.Sprintf("stack%d", dbCounter.Add(1))
	s, err := stack.Start(t.Context(), stack.Options{
		Dir: filepath.Join(testkit.Dir(t), name), BinDir: binaries(t), Output: out,
		Env: map[string]string{
			"ADMIN_API_KEY":   "test-admin-key-" + name + "-0123456789abcdef",
			"DATABASE_URL":    testkit.DatabaseURL(t, testkit.Empty),
			"REDIS_URL":       testkit.RedisURL(t),
			"TRUSTED_PROXIES": "127.0.0.1/32",
			"LOG_LEVEL":       "info",
			"LOG_FORMAT":      "json",
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	key := issueLicense(t, admin(t, s), lic(product("stalled-log")))

	// run sends n verify-license requests from 4 workers and returns their latencies, or
	// ok false when they have not all answered within 2 minutes: without the log buffer
	// they hang once the pipe is full, for as long as the reader is stopped.
	run := func(n int) (took []time.Duration, ok bool) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var c *Client
				for i := 0; i < n/4; i++ {
					if i%400 == 0 {
						c = anon(t, s) // a fresh client IP: the Validation tier allows 1,000 per IP
					}
					start := time.Now()
					if r := c.Post("/v1/verify-license", map[string]string{"key": key}); r.Status != 200 {
						t.Errorf("verify-license answered %d: %s", r.Status, r.Body)
						return
					}
					d := time.Since(start)
					mu.Lock()
					took = append(took, d)
					mu.Unlock()
				}
			}()
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
			return took, true
		case <-time.After(2 * time.Minute):
			return nil, false
		}
	}
	p99 := func(d []time.Duration) time.Duration {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		return d[len(d)*99/100]
	}
	reading, ok := run(400)
	if !ok {
		t.Fatal("verify-license did not answer with the reader reading")
	}
	before := p99(reading)

	out.stall()
	// Whatever happens, the reader reads again before the stack stops (cleanups run last
	// in, first out), or stopping would wait for it forever.
	t.Cleanup(out.resumeIfStalled)
	// Far more access lines than a pipe (64 KiB) and the log buffer (1,024 lines) hold.
	stalled, ok := run(3000)
	if !ok {
		out.resume()
		t.Fatal("verify-license stopped answering while the log reader was stalled")
	}
	anon(t, s).Get("/v1/public-key").Expect(t, 200)
	anon(t, s).Get("/readyz").Expect(t, 200)
	t.Logf("verify-license p99: %v with the reader reading, %v while it was stalled (%d requests)", before, p99(stalled), len(stalled))
	out.resume()

	// The first line after the stall says how many were dropped.
	deadline := time.Now().Add(time.Minute)
	for {
		anon(t, s).Get("/v1/public-key").Expect(t, 200) // a line to write after the drops
		reports := out.find(`"msg":"log lines dropped: the log reader stalled"`)
		if len(reports) > 0 {
			var line struct {
				Dropped int    `json:"dropped"`
				Service string `json:"service"`
			}
			_, js, _ := strings.Cut(reports[0], "{")
			if err := json.Unmarshal([]byte("{"+js), &line); err != nil || line.Dropped <= 0 || line.Service == "" {
				t.Fatalf("drop report %q", reports[0])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no process reported its dropped lines after the reader came back")
		}
		time.Sleep(100 * time.Millisecond)
	}
}
