package e2e

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/keyhouse/keyhouse/devinfra/testkit"
	"github.com/keyhouse/keyhouse/stack"
)

// The client SDKs (clients/go, clients/js, clients/python) run one scenario list against
// the real stack. Each SDK's live suite is its own test file, skipped unless KEYHOUSE_E2E
// holds the fixture this test writes: the URL of a proxy in front of the gateway that the
// suite can switch to answer 503 or to drop every connection (the gateway out of reach),
// licenses issued for the suite, a registered release and an offline export; and the same
// for a tenant of a hosted stack, whose proxy also suspends and resumes the tenant through
// the operator API (billing's SuspendTenant, ResumeTenant).

// sdkProxy forwards to a gateway as one client IP, and answers as the failing server
// when told to. Its /__control/ routes are the suite's remote control.
type sdkProxy struct {
	mode       atomic.Value // "pass", "down", "503", "lose-answer", "suspended"
	retryAfter atomic.Value // Retry-After of the 503 answers ("" for none)
	count      atomic.Int64 // requests that reached the proxy, controls excluded
	mu         sync.Mutex
	routes     []string
	// idempotencyKeys are the Idempotency-Key headers of the requests that carried one.
	idempotencyKeys []string
}

func startSDKProxy(t *testing.T, s *stack.Stack, ip string) (*httptest.Server, *sdkProxy) {
	t.Helper()
	target, _ := url.Parse(s.URL)
	fwd := httputil.NewSingleHostReverseProxy(target)
	p := &sdkProxy{}
	p.mode.Store("pass")
	p.retryAfter.Store("")
	admin := admin(t, s)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rest, ok := strings.CutPrefix(r.URL.Path, "/__control/"); ok {
			p.control(t, w, r, rest, admin)
			return
		}
		p.count.Add(1)
		p.mu.Lock()
		p.routes = append(p.routes, r.Method+" "+r.URL.Path)
		if k := r.Header.Get("Idempotency-Key"); k != "" {
			p.idempotencyKeys = append(p.idempotencyKeys, k)
		}
		p.mu.Unlock()
		switch p.mode.Load() {
		case "lose-answer":
			// Once: the gateway applies the request, and its answer is lost on the way back
			// (the client sees the connection end, as when a network drops the reply).
			p.mode.Store("pass")
			r.Header.Set("X-Forwarded-For", ip)
			fwd.ServeHTTP(httptest.NewRecorder(), r)
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				_ = conn.(*net.TCPConn).SetLinger(0)
				conn.Close()
			}
		case "down":
			// As a stopped gateway looks from the client: the connection ends unanswered.
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				_ = conn.(*net.TCPConn).SetLinger(0)
				conn.Close()
			}
		case "503":
			if ra := p.retryAfter.Load().(string); ra != "" {
				w.Header().Set("Retry-After", ra)
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":"Licensing service unavailable, retry"}`))
		case "suspended":
			// As a hosted server that refuses a suspended vendor's apps would answer them
			// (pkg/auth ErrTenantSuspended). Keyhouse's own keeps their public checks working
			// (docs/operations.md, "Suspend"), so the SDKs' handling of the answer is shown
			// here, with the tenant suspended for real beside it.
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte(`{"error":"Tenant is suspended"}`))
		default:
			r.Header.Set("X-Forwarded-For", ip)
			fwd.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, p
}

func (p *sdkProxy) control(t *testing.T, w http.ResponseWriter, r *http.Request, what string, admin *Client) {
	q := r.URL.Query()
	switch what {
	case "mode":
		p.mode.Store(q.Get("m"))
		p.retryAfter.Store(q.Get("retry_after"))
	case "reset":
		p.count.Store(0)
		p.mu.Lock()
		p.routes, p.idempotencyKeys = nil, nil
		p.mu.Unlock()
	case "revoke", "reinstate":
		// Through the gateway itself: the proxy may be "down" for the client.
		resp := admin.Post("/v1/revoke-license", map[string]any{"key": q.Get("key"), "revoked": what == "revoke"})
		if resp.Status != 200 {
			http.Error(w, string(resp.Body), 500)
			return
		}
	case "suspend", "resume":
		// The operator suspends the tenant (an unpaid bill), or lifts the suspension.
		resp := admin.Post("/v1/operator/tenants/"+url.PathEscape(q.Get("tenant"))+"/"+what, nil)
		if resp.Status != 200 {
			http.Error(w, string(resp.Body), 500)
			return
		}
	case "count":
	default:
		http.NotFound(w, r)
		return
	}
	p.mu.Lock()
	routes, keys := append([]string(nil), p.routes...), append([]string{}, p.idempotencyKeys...)
	p.mu.Unlock()
	_ = json.NewEncoder(w).Encode(map[string]any{"count": p.count.Load(), "routes": routes, "idempotency_keys": keys})
}

// sdkFixture issues what one SDK suite uses and returns the KEYHOUSE_E2E JSON.
func sdkFixture(t *testing.T, s *stack.Stack, sdk string) string {
	t.Helper()
	a, c := admin(t, s), anon(t, s)
	productID := product("sdk-" + sdk)
	srv, _ := startSDKProxy(t, s, newClient(t, s.URL, "").IP)
	issue := func(extra ...any) string {
		return issueLicense(t, a, lic(productID, append([]any{"expires_at", "2039-01-01T00:00:00Z"}, extra...)...))
	}
	// Tier pro leases for an hour, bound to the machine; tier floating for 4 s (the
	// scenarios of lapses), floating-hour for an hour.
	putPolicy(t, a, productID, "pro", map[string]any{"lease_ttl_seconds": 3600, "renew_after_seconds": 600,
		"fingerprint_match": "any", "entitlements": []string{"sync"}})
	putPolicy(t, a, productID, "floating", map[string]any{"floating": true, "lease_ttl_seconds": 4, "renew_after_seconds": 2})
	// Tier floating-hour: an hour, renewed after ten minutes.
	putPolicy(t, a, productID, "floating-hour", map[string]any{"floating": true, "lease_ttl_seconds": 3600, "renew_after_seconds": 600})
	// One floating seat of tier. Where only a release may free the seat (close(), another
	// copy's close), tier floating-hour: a 4 s lease may lapse first on a slow machine,
	// and the scenario then proves nothing or fails.
	floating := func(tier string) string {
		return issueLicense(t, a, lic(productID, "tier", tier, "max_activations", 1))
	}
	keys := map[string]string{
		"main":     issue("max_activations", 2, "limits", map[string]any{"users": 10}),
		"capped":   issue("max_activations", 1),
		"storm":    issue(),
		"lease":    issue(),
		"revoke":   issue(),
		"floating": floating("floating-hour"),
		"killed":   floating("floating"),
		"lapsed":   floating("floating"),
		"offlapse": floating("floating"),
		// Two copies of the app sharing a store and a floating seat.
		"shared": floating("floating-hour"),
		// A machine whose clock is wrong: 15 minutes ahead (floating), 2 hours ahead, 10
		// minutes behind.
		"skewfloat": floating("floating-hour"),
		"ahead":     issue(),
		"behind":    issue(),
		// Two machines and a reinstall: tier pro binds machines, tier basic does not.
		"twoseats": issue("max_activations", 2),
		"unbound":  issue("tier", "basic"),
		// Limits that are small fractions: the server signs them as JSON.stringify writes
		// them (0.00001, 1e-7), and every SDK must rebuild those bytes.
		"fractions": issue("limits", map[string]any{"seats": 0.00001, "users": 0.000001, "admins": 1e-7}),
	}
	a.Post("/v1/register-release", map[string]any{"product_id": productID, "version": "2.0.0", "channel": "stable", "platform": "linux-x64",
		"artifact_url": "https://downloads.example.com/app-2.0.0.tar.gz", "checksum": "sha256:00ff", "release_notes": "Better & <faster> é"}).Expect(t, 200)
	fixture := map[string]any{
		"url":                   srv.URL,
		"control":               srv.URL + "/__control",
		"product_id":            productID,
		"public_key_pem":        c.Get("/v1/public-key").Expect(t, 200).JSON(t)["publicKey"],
		"keys":                  keys,
		"release":               map[string]string{"version": "2.0.0", "channel": "stable", "platform": "linux-x64"},
		"export_json":           string(c.Get("/v1/export-license/"+keys["main"]+"/offline").Expect(t, 200).Body),
		"export_fractions_json": string(c.Get("/v1/export-license/"+keys["fractions"]+"/offline").Expect(t, 200).Body),
		"lease_keys":            json.RawMessage(c.Get("/v1/lease-keys").Expect(t, 200).Body),
		"floating_ttl":          4,
		// The floating-hour tier's renew_after, in seconds after iat.
		"floating_hour_renew_after": 600,
		"hosted":                    hostedSDKFixture(t, sdk),
	}
	b, _ := json.Marshal(fixture)
	return string(b)
}

// hostedSDKFixture issues what the suite's hosted scenarios use: a tenant of the shared
// hosted stack of their own, a license of a product of that tenant leased for an hour
// (renewed after ten minutes, no machine binding), and a proxy in front of the hosted
// gateway whose control also suspends and resumes the tenant.
func hostedSDKFixture(t *testing.T, sdk string) map[string]any {
	t.Helper()
	s := hosted(t)
	tenant, id := hostedTenant(t, s)
	productID := product("sdk-hosted-" + sdk)
	srv, _ := startSDKProxy(t, s, newClient(t, s.URL, "").IP)
	putPolicy(t, tenant, productID, "pro", map[string]any{"lease_ttl_seconds": 3600, "renew_after_seconds": 600})
	return map[string]any{
		"url":        srv.URL,
		"control":    srv.URL + "/__control",
		"product_id": productID,
		"tenant_id":  id,
		"keys": map[string]string{
			"suspended": issueLicense(t, tenant, lic(productID, "expires_at", "2039-01-01T00:00:00Z")),
		},
		"lease_ttl":   3600,
		"renew_after": 600,
	}
}

// sdkSuites are the commands that run each SDK's live suite, from clients/<dir>.
var sdkSuites = []struct{ name, dir, tool string }{
	{"go", "go", "go"},
	{"js", "js", "node"},
	{"python", "python", "python3"},
}

func sdkCommand(t *testing.T, name, tool string) *exec.Cmd {
	switch name {
	case "go":
		return exec.Command("go", "test", "-count=1", "-run", "TestLive", "-v", ".")
	case "js":
		return exec.Command(testkit.RequireTool(t, "node"), "--test", "test/live.test.js")
	default:
		return exec.Command(pythonWithPytest(t), "-m", "pytest", "-v", "-p", "no:cacheprovider", "tests/test_live.py")
	}
}

// pythonWithPytest is Debian's /usr/bin/python3 (another python3 on PATH may lack the
// Debian packages python3-pytest and python3-cryptography).
func pythonWithPytest(t *testing.T) string {
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		py = testkit.RequireTool(t, "python3")
	}
	if exec.Command(py, "-c", "import pytest, cryptography").Run() != nil {
		if os.Getenv("KEYHOUSE_REQUIRE_TOOLS") == "1" {
			t.Fatalf("%s lacks pytest or cryptography (apt-get install python3-pytest python3-cryptography)", py)
		}
		t.Skipf("%s lacks pytest or cryptography", py)
	}
	return py
}

// skipped finds a skipped test in go test -v, node --test and pytest -v output.
var skipped = regexp.MustCompile(`--- SKIP|# SKIP|SKIPPED`)

// Every SDK passes the scenario list against the real stack.
func TestSDKScenarios(t *testing.T) {
	t.Parallel()
	// Floating leases of 4 s (LEASE_MIN_TTL is a test-only override), lapsed seats swept
	// every second.
	s := startStack(t, map[string]string{"LEASE_MIN_TTL": "1s", "LEASE_SWEEP_INTERVAL": "1s"})
	t.Cleanup(s.Stop)
	root, err := stack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, sdk := range sdkSuites {
		t.Run(sdk.name, func(t *testing.T) {
			cmd := sdkCommand(t, sdk.name, sdk.tool)
			cmd.Dir = filepath.Join(root, "clients", sdk.dir)
			cmd.Env = append(os.Environ(), "KEYHOUSE_E2E="+sdkFixture(t, s, sdk.name))
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%s live suite: %v\n%s", sdk.name, err, out)
			}
			// A suite that skipped its scenarios would pass vacuously.
			if !strings.Contains(string(out), "scenario") || skipped.MatchString(string(out)) {
				t.Fatalf("%s live suite ran no scenario:\n%s", sdk.name, out)
			}
			t.Logf("%s", out)
		})
	}
}
