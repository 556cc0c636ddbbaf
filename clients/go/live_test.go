package keyhouse

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The live scenario list, run against the real stack by stack/e2e (TestSDKScenarios),
// which sets KEYHOUSE_E2E; skipped without it.

type liveFixture struct {
	URL          string            `json:"url"`
	Control      string            `json:"control"`
	ProductID    string            `json:"product_id"`
	PublicKeyPEM string            `json:"public_key_pem"`
	Keys         map[string]string `json:"keys"`
	Release      map[string]string `json:"release"`
	ExportJSON   string            `json:"export_json"`
	ExportFracs  string            `json:"export_fractions_json"`
	LeaseKeys    json.RawMessage   `json:"lease_keys"`
	FloatingTTL  int               `json:"floating_ttl"`
	// FloatingHourRenewAfter is the renew_after (seconds after iat) of the floating-hour
	// tier, whose seat the skewfloat key takes.
	FloatingHourRenewAfter int `json:"floating_hour_renew_after"`
	// Hosted is a tenant of a hosted stack, behind a proxy of its own.
	Hosted *hostedFixture `json:"hosted"`
}

// hostedFixture is a tenant of a hosted stack: its proxy's control also suspends and
// resumes the tenant through the operator API (suspend?tenant=, resume?tenant=).
type hostedFixture struct {
	URL        string            `json:"url"`
	Control    string            `json:"control"`
	ProductID  string            `json:"product_id"`
	TenantID   string            `json:"tenant_id"`
	Keys       map[string]string `json:"keys"`
	LeaseTTL   int               `json:"lease_ttl"`
	RenewAfter int               `json:"renew_after"`
}

func live(t *testing.T) *liveFixture {
	raw := os.Getenv("KEYHOUSE_E2E")
	if raw == "" {
		t.Skip("KEYHOUSE_E2E not set: stack/e2e TestSDKScenarios runs this suite against the stack")
	}
	var f liveFixture
	if err := json.Unmarshal([]byte(raw), &f); err != nil {
		t.Fatal(err)
	}
	return &f
}

// control switches the proxy in front of the gateway and returns its request count.
func (f *liveFixture) control(t *testing.T, what string) int {
	t.Helper()
	return control(t, f.Control, what)
}

// control switches the proxy whose control is at base and returns its request count.
func control(t *testing.T, base, what string) int {
	t.Helper()
	resp, err := http.Post(base+"/"+what, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct{ Count int }
	if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&out) != nil {
		t.Fatalf("control %s: %d", what, resp.StatusCode)
	}
	return out.Count
}

// idempotencyKeys are the Idempotency-Key headers the proxy saw since its last reset.
func (f *liveFixture) idempotencyKeys(t *testing.T) []string {
	t.Helper()
	resp, err := http.Post(f.Control+"/count", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Keys []string `json:"idempotency_keys"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out.Keys
}

// leaseRequests is how many POST /v1/leases the proxy saw since its last reset.
func (f *liveFixture) leaseRequests(t *testing.T) int {
	t.Helper()
	return leaseRequests(t, f.Control)
}

// leaseRequests is how many POST /v1/leases the proxy whose control is at base saw since
// its last reset.
func leaseRequests(t *testing.T, base string) int {
	t.Helper()
	resp, err := http.Post(base+"/count", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct{ Routes []string }
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range out.Routes {
		if r == "POST /v1/leases" {
			n++
		}
	}
	return n
}

// fakeClock is a clock the scenarios move.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// logSink collects every log line of the clients, to show no secret reaches one.
type logSink struct {
	mu    sync.Mutex
	lines strings.Builder
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lines.Write(p)
}

func TestLiveScenarios(t *testing.T) {
	f := live(t)
	ctx := context.Background()
	logs := &logSink{}
	dir := t.TempDir()
	clock := &fakeClock{now: time.Now()}
	newClient := func(key, store string) *Client {
		c, err := New(Config{URL: f.URL, ProductID: f.ProductID, Key: key, PublicKeyPEM: f.PublicKeyPEM,
			StorePath: filepath.Join(dir, store), Logger: slog.New(slog.NewTextHandler(logs, nil)), Now: clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := newClient(f.Keys["main"], "main.json")

	t.Run("scenario: activate", func(t *testing.T) {
		if a, err := c.Activate(ctx, "laptop-1"); err != nil || a.AlreadyActivated {
			t.Fatalf("%+v %v", a, err)
		}
		if a, err := newClient(f.Keys["main"], "main.json").Activate(ctx, "laptop-1"); err != nil || !a.AlreadyActivated {
			t.Fatalf("repeat: %+v %v", a, err)
		}
		// An app configured with another product takes no seat of the license.
		misconfigured, err := New(Config{URL: f.URL, ProductID: "another-" + f.ProductID, Key: f.Keys["capped"], StorePath: filepath.Join(dir, "wrong.json"), Now: clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := misconfigured.Activate(ctx, "one"); !errors.Is(err, ErrWrongProduct) {
			t.Fatalf("another product: %v", err)
		}
		capped := newClient(f.Keys["capped"], "capped-1.json")
		if _, err := capped.Activate(ctx, "one"); err != nil {
			t.Fatal(err)
		}
		_, err = newClient(f.Keys["capped"], "capped-2.json").Activate(ctx, "two")
		var e *Error
		if !errors.Is(err, ErrActivationLimitExceeded) || !errors.As(err, &e) || e.Message != "Activation limit exceeded for this license key" || e.Status != 403 {
			t.Fatalf("over the cap: %v", err)
		}
	})
	t.Run("scenario: verify and validate online", func(t *testing.T) {
		lic, err := c.Verify(ctx)
		if err != nil || !lic.Valid || lic.Tier != "pro" || lic.ProductID != f.ProductID || lic.ExpiresAt == nil {
			t.Fatalf("%+v %v", lic, err)
		}
		if ok, err := c.Validate(ctx); !ok || err != nil {
			t.Fatalf("validate %v %v", ok, err)
		}
		if _, err := newClient("KH-NO-SUCH-KEY", "none.json").Verify(ctx); !errors.Is(err, ErrLicenseNotFound) {
			t.Fatalf("unknown key: %v", err)
		}
	})
	t.Run("scenario: usage", func(t *testing.T) {
		if n, err := c.TrackUsage(ctx, "users", 3); n != 3 || err != nil {
			t.Fatalf("%d %v", n, err)
		}
		if _, err := c.TrackUsage(ctx, "users", 8); !errors.Is(err, ErrUsageLimitExceeded) {
			t.Fatalf("over the limit: %v", err)
		}
		if _, err := c.TrackUsage(ctx, "seats", 1); !errors.Is(err, ErrMetricNotAllowed) {
			t.Fatalf("metric not in limits: %v", err)
		}
		r, err := c.UsageReport(ctx)
		if err != nil || len(r.Metrics) != 1 || r.Metrics[0].Metric != "users" || r.Metrics[0].Used != 3 || r.Metrics[0].Remaining != 7 {
			t.Fatalf("%+v %v", r, err)
		}
	})
	t.Run("scenario: an increment whose answer was lost counts once", func(t *testing.T) {
		f.control(t, "reset")
		f.control(t, "mode?m=lose-answer")
		if n, err := c.TrackUsage(ctx, "users", 2); n != 5 || err != nil {
			t.Fatalf("%d %v", n, err)
		}
		// The app's own key: the same increment sent twice counts once. (Keys are per
		// tenant: each suite's product makes it its own.)
		own := "usage-" + f.ProductID
		for range 2 {
			if n, err := c.TrackUsage(ctx, "users", 1, WithIdempotencyKey(own)); n != 6 || err != nil {
				t.Fatalf("own key: %d %v", n, err)
			}
		}
		keys := f.idempotencyKeys(t)
		if len(keys) != 4 || keys[0] == "" || keys[0] != keys[1] || keys[2] != own || keys[3] != keys[2] {
			t.Fatalf("Idempotency-Key headers %q", keys)
		}
		if r, err := c.UsageReport(ctx); err != nil || r.Metrics[0].Used != 6 {
			t.Fatalf("%+v %v", r, err)
		}
	})
	t.Run("scenario: signed update check", func(t *testing.T) {
		rel, err := c.CheckUpdate(ctx, "1.0.0", f.Release["channel"], f.Release["platform"])
		if err != nil || rel == nil || rel.Version != f.Release["version"] {
			t.Fatalf("%+v %v", rel, err)
		}
		if rel, err := c.CheckUpdate(ctx, f.Release["version"], f.Release["channel"], f.Release["platform"]); rel != nil || err != nil {
			t.Fatalf("current: %+v %v", rel, err)
		}
		// "" is the stable channel (the fixture's release is on stable), in every SDK.
		if rel, err := c.CheckUpdate(ctx, "1.0.0", "", f.Release["platform"]); err != nil || rel == nil || rel.Channel != "stable" || rel.Version != f.Release["version"] {
			t.Fatalf(`channel "": %+v %v`, rel, err)
		}
	})
	t.Run("scenario: offline export", func(t *testing.T) {
		lic, err := c.VerifyOfflineExport([]byte(f.ExportJSON))
		if err != nil || lic.Key != f.Keys["main"] {
			t.Fatalf("%+v %v", lic, err)
		}
		tampered := strings.Replace(f.ExportJSON, `"tier":"pro"`, `"tier":"enterprise"`, 1)
		if _, err := c.VerifyOfflineExport([]byte(tampered)); !errors.Is(err, ErrInvalidSignature) {
			t.Fatalf("tampered: %v", err)
		}
		if lic, err := c.VerifyOfflineExport([]byte(f.ExportFracs)); err != nil || lic.Limits["admins"] != 1e-7 {
			t.Fatalf("limits of small fractions: %+v %v", lic, err)
		}
	})
	t.Run("scenario: gateway out of reach", func(t *testing.T) {
		f.control(t, "mode?m=down")
		defer f.control(t, "mode?m=pass")
		before := f.control(t, "count")
		if _, err := c.Verify(ctx); !errors.Is(err, ErrUnreachable) {
			t.Fatalf("%v", err)
		}
		if _, err := c.Verify(ctx); !errors.Is(err, ErrBackingOff) {
			t.Fatalf("second call: %v", err)
		}
		if n := f.control(t, "count") - before; n != 1 {
			t.Fatalf("%d requests, want 1", n)
		}
		f.control(t, "mode?m=pass")
		clock.Advance(MaxBackoff)
		if _, err := c.Verify(ctx); err != nil {
			t.Fatalf("after the backoff: %v", err)
		}
	})
	t.Run("scenario: retry storm", func(t *testing.T) {
		storm := newClient(f.Keys["storm"], "storm.json")
		f.control(t, "mode?m=503")
		defer f.control(t, "mode?m=pass")
		f.control(t, "reset")
		if _, err := storm.Verify(ctx); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("first: %v", err)
		}
		const minutes = 10
		for i := 0; i < minutes*60; i++ {
			clock.Advance(time.Second)
			_, _ = storm.Verify(ctx)
		}
		if n := f.control(t, "count"); n > 1+minutes || n < 2 {
			t.Fatalf("%d requests in %d minutes after the first failure", n, minutes)
		}
		// Retry-After longer than the backoff is honoured.
		clock.Advance(MaxBackoff)
		f.control(t, "mode?m=503&retry_after=300")
		f.control(t, "reset")
		_, _ = storm.Verify(ctx)
		for i := 0; i < 299; i++ {
			clock.Advance(time.Second)
			_, _ = storm.Verify(ctx)
		}
		if n := f.control(t, "count"); n != 1 {
			t.Fatalf("%d requests within Retry-After", n)
		}
	})
	token := c.state.Token
	t.Run("scenario: deactivate", func(t *testing.T) {
		clock.Advance(MaxBackoff)
		if ok, err := c.Deactivate(ctx); !ok || err != nil {
			t.Fatalf("%v %v", ok, err)
		}
		if _, err := c.Validate(ctx); !errors.Is(err, ErrNotActivated) {
			t.Fatalf("after: %v", err)
		}
	})
	t.Run("scenario: no secret in a log line", func(t *testing.T) {
		text := logs.lines.String()
		if !strings.Contains(text, "keyhouse:") {
			t.Fatal("nothing was logged; the check would be vacuous")
		}
		if token == "" || strings.Contains(text, token) {
			t.Fatal("the activation token is in the logs (or was never stored)")
		}
		for name, key := range f.Keys {
			if strings.Contains(text, key) {
				t.Fatalf("license key %s in the logs", name)
			}
		}
	})
}

// TestMain runs the heartbeat child of the killed-process scenario when asked to.
func TestMain(m *testing.M) {
	if spec := os.Getenv("KEYHOUSE_CHILD"); spec != "" {
		heartbeatChild(spec)
		return
	}
	os.Exit(m.Run())
}

// heartbeatChild activates a floating seat, says "leased", and keeps it leased until killed.
func heartbeatChild(spec string) {
	var cfg struct{ URL, ProductID, Key, Store string }
	_ = json.Unmarshal([]byte(spec), &cfg)
	c, err := New(Config{URL: cfg.URL, ProductID: cfg.ProductID, Key: cfg.Key, StorePath: cfg.Store, Components: map[string]string{}})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	if _, err := c.Activate(ctx, "child"); err != nil {
		panic(err)
	}
	if v := c.Check(ctx); !v.Licensed {
		panic(v.Reason)
	}
	os.Stdout.WriteString("leased\n")
	c.Heartbeat(ctx)
}

func TestLiveLeaseScenarios(t *testing.T) {
	f := live(t)
	ctx := context.Background()
	dir := t.TempDir()
	here := map[string]string{"machine_id": HashComponent(f.ProductID, "sdk-e2e-machine-1")}
	elsewhere := map[string]string{"machine_id": HashComponent(f.ProductID, "sdk-e2e-machine-2")}
	// Each client has a clock of its own, starting at the real time (the server's).
	newClient := func(key, store string, components map[string]string) (*Client, *fakeClock) {
		clock := &fakeClock{now: time.Now()}
		c, err := New(Config{URL: f.URL, ProductID: f.ProductID, Key: key, LeaseKeys: f.LeaseKeys, StorePath: filepath.Join(dir, store),
			Components: components, Now: clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		return c, clock
	}
	copyStore := func(from, to string) {
		b, err := os.ReadFile(filepath.Join(dir, from))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, to), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c, _ := newClient(f.Keys["lease"], "lease.json", here)

	t.Run("scenario: activate and check online", func(t *testing.T) {
		if _, err := c.Activate(ctx, "desk-1"); err != nil {
			t.Fatal(err)
		}
		v := c.Check(ctx)
		if !v.Licensed || v.Offline || v.Tier != "pro" || len(v.Entitlements) != 1 || v.Entitlements[0] != "sync" {
			t.Fatalf("%+v", v)
		}
		// A second check answers from the stored lease, sending nothing.
		before := f.control(t, "count")
		if v := c.Check(ctx); !v.Licensed || !v.Offline || f.control(t, "count") != before {
			t.Fatalf("%+v", v)
		}
	})
	t.Run("scenario: gateway stopped, licensed from the lease", func(t *testing.T) {
		f.control(t, "mode?m=down")
		defer f.control(t, "mode?m=pass")
		// A fresh process of the app, past renew_after: the background renewal fails.
		copyStore("lease.json", "offline.json")
		app, appClock := newClient(f.Keys["lease"], "offline.json", here)
		appClock.Advance(601 * time.Second)
		if v := app.Check(ctx); !v.Licensed || !v.Offline {
			t.Fatalf("%+v", v)
		}
		app.WaitRenewal()
		if v := app.Check(ctx); !v.Licensed {
			t.Fatalf("after a failed renewal: %+v", v)
		}
		t.Run("scenario: clock past exp, not licensed", func(t *testing.T) {
			appClock.Advance(3600 * time.Second)
			if v := app.Check(ctx); v.Licensed || v.Reason != "expired" {
				t.Fatalf("%+v", v)
			}
		})
	})
	t.Run("scenario: revoked while offline, refused at the first renewal", func(t *testing.T) {
		r, rclock := newClient(f.Keys["revoke"], "revoke.json", here)
		if _, err := r.Activate(ctx, "desk-2"); err != nil {
			t.Fatal(err)
		}
		if v := r.Check(ctx); !v.Licensed {
			t.Fatalf("%+v", v)
		}
		f.control(t, "mode?m=down")
		f.control(t, "revoke?key="+f.Keys["revoke"])
		if v := r.Check(ctx); !v.Licensed || !v.Offline {
			t.Fatalf("offline, before a renewal: %+v", v)
		}
		// The server's caches may answer for up to 1 s after a change (its bound); an app
		// offline for longer than that reconnects.
		time.Sleep(1500 * time.Millisecond)
		f.control(t, "mode?m=pass")
		rclock.Advance(601 * time.Second)
		if v := r.Check(ctx); !v.Licensed {
			t.Fatalf("the check that starts the renewal answers from the lease: %+v", v)
		}
		r.WaitRenewal()
		asked := f.leaseRequests(t)
		refused := func(t *testing.T, what string, requests int) {
			t.Helper()
			if v := r.Check(ctx); v.Licensed || v.Reason != "license_not_active" {
				t.Fatalf("%s: %+v", what, v)
			}
			if got := f.leaseRequests(t) - asked; got != requests {
				t.Fatalf("%s: %d lease requests since the refusal, want %d", what, got, requests)
			}
		}
		refused(t, "after the renewal reached the server", 0)
		t.Run("scenario: refused, the server asked again at most once a minute", func(t *testing.T) {
			refused(t, "a check right after the refusal", 0)
			rclock.Advance(59 * time.Second)
			refused(t, "59 s after the refusal", 0)
			rclock.Advance(time.Second)
			refused(t, "a minute after the refusal, asked again", 1)
			refused(t, "right after that ask", 1)
			rclock.Advance(-5 * time.Minute)
			refused(t, "the clock moved back below the last ask, asked at once", 2)
		})
		t.Run("scenario: reinstated, licensed again at the first check online a minute after the last ask", func(t *testing.T) {
			f.control(t, "mode?m=down")
			f.control(t, "reinstate?key="+f.Keys["revoke"])
			rclock.Advance(time.Minute)
			refused(t, "offline, asked and the refusal stands", 3)
			// The server's caches may answer for up to 1 s after a change (its bound).
			time.Sleep(1500 * time.Millisecond)
			f.control(t, "mode?m=pass")
			rclock.Advance(59 * time.Second)
			refused(t, "online, 59 s after the last ask", 3)
			rclock.Advance(time.Second)
			if v := r.Check(ctx); !v.Licensed || v.Offline {
				t.Fatalf("online a minute after the last ask: %+v", v)
			}
			if got := f.leaseRequests(t) - asked; got != 4 {
				t.Fatalf("%d lease requests since the refusal, want 4", got)
			}
		})
	})
	t.Run("scenario: lease copied to another machine", func(t *testing.T) {
		copyStore("lease.json", "copied.json")
		other, _ := newClient(f.Keys["lease"], "copied.json", elsewhere)
		if v := other.Check(ctx); v.Licensed || v.Reason != "machine_mismatch" {
			t.Fatalf("%+v", v)
		}
		if v := other.Renew(ctx); v.Licensed || v.Reason != "machine_mismatch" {
			t.Fatalf("the server: %+v", v)
		}
	})
	t.Run("scenario: two machines, and a reinstall recovers its seat", func(t *testing.T) {
		a, _ := newClient(f.Keys["twoseats"], "machine-a.json", here)
		b, _ := newClient(f.Keys["twoseats"], "machine-b.json", elsewhere)
		if a.InstanceID() == b.InstanceID() || a.InstanceID() != InstanceID(here) {
			t.Fatalf("instance ids %q and %q", a.InstanceID(), b.InstanceID())
		}
		for _, m := range []*Client{a, b} {
			if _, err := m.Activate(ctx, m.InstanceID()); err != nil {
				t.Fatal(err)
			}
			if v := m.Check(ctx); !v.Licensed {
				t.Fatalf("%s: %+v", m.InstanceID(), v)
			}
		}
		// Machine a reinstalled: its store is gone, the seat bound to it is still there.
		again, _ := newClient(f.Keys["twoseats"], "machine-a-reinstalled.json", here)
		if act, err := again.Activate(ctx, again.InstanceID()); err != nil || !act.AlreadyActivated {
			t.Fatalf("%+v %v", act, err)
		}
		if v := again.Check(ctx); !v.Licensed {
			t.Fatalf("after the reinstall: %+v", v)
		}
		// A seat not bound to a machine cannot be proven by one: a clear refusal, not a
		// client that says nothing and is never licensed.
		u, _ := newClient(f.Keys["unbound"], "unbound.json", here)
		if _, err := u.Activate(ctx, u.InstanceID()); err != nil {
			t.Fatal(err)
		}
		lost, _ := newClient(f.Keys["unbound"], "unbound-reinstalled.json", here)
		if _, err := lost.Activate(ctx, lost.InstanceID()); !errors.Is(err, ErrInvalidActivationToken) {
			t.Fatalf("reinstall of an unbound seat: %v", err)
		}
	})
	t.Run("scenario: floating seat freed by close()", func(t *testing.T) {
		a, _ := newClient(f.Keys["floating"], "float-a.json", nil)
		b, _ := newClient(f.Keys["floating"], "float-b.json", nil)
		if _, err := a.Activate(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		if v := a.Check(ctx); !v.Licensed || !v.Floating {
			t.Fatalf("%+v", v)
		}
		if _, err := b.Activate(ctx, "b"); !errors.Is(err, ErrActivationLimitExceeded) {
			t.Fatalf("second seat: %v", err)
		}
		if err := a.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Activate(ctx, "b"); err != nil {
			t.Fatalf("after close: %v", err)
		}
		if v := b.Check(ctx); !v.Licensed {
			t.Fatalf("%+v", v)
		}
	})
	t.Run("scenario: floating seat freed after a killed process", func(t *testing.T) {
		spec, _ := json.Marshal(map[string]string{"URL": f.URL, "ProductID": f.ProductID, "Key": f.Keys["killed"], "Store": filepath.Join(dir, "child.json")})
		child := exec.Command(os.Args[0])
		child.Env = append(os.Environ(), "KEYHOUSE_CHILD="+string(spec))
		out, _ := child.StdoutPipe()
		child.Stderr = os.Stderr
		if err := child.Start(); err != nil {
			t.Fatal(err)
		}
		if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "leased\n" {
			_ = child.Process.Kill()
			t.Fatalf("child: %q %v", line, err)
		}
		other, _ := newClient(f.Keys["killed"], "after-kill.json", nil)
		if _, err := other.Activate(ctx, "other"); !errors.Is(err, ErrActivationLimitExceeded) {
			t.Fatalf("while the child holds the seat: %v", err)
		}
		_ = child.Process.Kill()
		_ = child.Wait()
		killed := time.Now()
		deadline := killed.Add(time.Duration(f.FloatingTTL)*time.Second + 15*time.Second)
		for {
			_, err := other.Activate(ctx, "other")
			if err == nil {
				t.Logf("seat free %s after the kill", time.Since(killed).Round(100*time.Millisecond))
				break
			}
			if !errors.Is(err, ErrActivationLimitExceeded) || time.Now().After(deadline) {
				t.Fatalf("seat not free within lease_ttl + 15 s: %v", err)
			}
			time.Sleep(time.Second)
		}
	})
	t.Run("scenario: floating lease ran out offline, reported once as check() says it", func(t *testing.T) {
		var lapsed []Verdict
		var mu sync.Mutex
		clock := &fakeClock{now: time.Now()}
		c, err := New(Config{URL: f.URL, ProductID: f.ProductID, Key: f.Keys["offlapse"], LeaseKeys: f.LeaseKeys,
			StorePath: filepath.Join(dir, "offlapse.json"), Components: map[string]string{}, Now: clock.Now,
			OnLapsed: func(v Verdict) { mu.Lock(); lapsed = append(lapsed, v); mu.Unlock() }})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Activate(ctx, "roamer"); err != nil {
			t.Fatal(err)
		}
		if v := c.Check(ctx); !v.Licensed || !v.Floating {
			t.Fatalf("%+v", v)
		}
		f.control(t, "mode?m=down")
		defer f.control(t, "mode?m=pass")
		clock.Advance(time.Duration(f.FloatingTTL+1) * time.Second)
		for i := range 3 {
			if v := c.Check(ctx); v.Licensed || v.Reason != "seat_lapsed" {
				t.Fatalf("check %d: %+v", i, v)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if len(lapsed) != 1 || lapsed[0].Reason != "seat_lapsed" {
			t.Fatalf("OnLapsed calls: %+v", lapsed)
		}
	})
	t.Run("scenario: lapsed floating seat reported", func(t *testing.T) {
		var lapsed []Verdict
		var mu sync.Mutex
		clock := &fakeClock{now: time.Now()}
		c, err := New(Config{URL: f.URL, ProductID: f.ProductID, Key: f.Keys["lapsed"], LeaseKeys: f.LeaseKeys,
			StorePath: filepath.Join(dir, "lapsed.json"), Components: map[string]string{}, Now: clock.Now,
			OnLapsed: func(v Verdict) { mu.Lock(); lapsed = append(lapsed, v); mu.Unlock() }})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Activate(ctx, "sleeper"); err != nil {
			t.Fatal(err)
		}
		if v := c.Check(ctx); !v.Licensed {
			t.Fatalf("%+v", v)
		}
		// The app slept through its lease (no heartbeat): the server has let the seat go.
		time.Sleep(time.Duration(f.FloatingTTL+1) * time.Second)
		clock.Advance(time.Duration(f.FloatingTTL+1) * time.Second)
		if v := c.Check(ctx); v.Licensed || v.Reason != "seat_lapsed" {
			t.Fatalf("%+v", v)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(lapsed) != 1 || lapsed[0].Reason != "seat_lapsed" {
			t.Fatalf("OnLapsed calls: %+v", lapsed)
		}
	})
	t.Run("scenario: clock 15 minutes ahead, floating: renewals at renew_after, not every tick", func(t *testing.T) {
		clock := &fakeClock{now: time.Now().Add(15 * time.Minute)}
		c, err := New(Config{URL: f.URL, ProductID: f.ProductID, Key: f.Keys["skewfloat"], LeaseKeys: f.LeaseKeys,
			StorePath: filepath.Join(dir, "skewfloat.json"), Components: map[string]string{}, Now: clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Activate(ctx, "skewed"); err != nil {
			t.Fatal(err)
		}
		f.control(t, "reset")
		// The heartbeat's waits pass on the client's clock, not the test's: a fixed number
		// of ticks, whatever they wait, then the lease requests are counted.
		const ticks = 6
		beat, stop := context.WithCancel(ctx)
		n, start := 0, clock.Now()
		c.after = func(d time.Duration) <-chan time.Time {
			clock.Advance(d)
			if n++; n == ticks {
				stop()
			}
			tick := make(chan time.Time, 1)
			tick <- clock.Now()
			return tick
		}
		c.Heartbeat(beat)
		c.WaitRenewal()
		// The manners: a renewal at each lease's renew_after, so over the ticks' time the
		// first lease, one renewal per renew_after elapsed, and one due as the window ends.
		elapsed := clock.Now().Sub(start)
		limit := 2 + int(elapsed/(time.Duration(f.FloatingHourRenewAfter)*time.Second))
		if got := f.leaseRequests(t); got > limit || got < 2 {
			t.Fatalf("%d lease requests in %d heartbeat ticks (%s on the client's clock), want 2 to %d", got, ticks, elapsed, limit)
		}
		if v := c.Check(ctx); !v.Licensed || !v.Offline {
			t.Fatalf("after the heartbeat: %+v", v)
		}
		if err := c.Close(ctx); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("scenario: clock 2 hours ahead, licensed online", func(t *testing.T) {
		c, clock := newClient(f.Keys["ahead"], "ahead.json", here)
		clock.Advance(2 * time.Hour)
		if _, err := c.Activate(ctx, "ahead"); err != nil {
			t.Fatal(err)
		}
		f.control(t, "reset")
		if v := c.Check(ctx); !v.Licensed || v.Offline || v.LeaseExpiresAt.Sub(clock.Now()) < 50*time.Minute {
			t.Fatalf("%+v (the lease's end on this clock: in %s)", v, v.LeaseExpiresAt.Sub(clock.Now()))
		}
		if v := c.Check(ctx); !v.Licensed || !v.Offline {
			t.Fatalf("from the stored lease: %+v", v)
		}
		c.WaitRenewal()
		if n := f.leaseRequests(t); n != 1 {
			t.Fatalf("%d lease requests, want 1", n)
		}
		// Offline, the clock put back to the server's time: the lease's clock moves back
		// with it, so the offset does not lengthen the lease.
		f.control(t, "mode?m=down")
		defer f.control(t, "mode?m=pass")
		clock.Advance(-2 * time.Hour)
		if v := c.Check(ctx); v.Licensed || v.Reason != "clock_tampered" {
			t.Fatalf("clock moved back offline: %+v", v)
		}
	})
	t.Run("scenario: clock 10 minutes behind, clock_tampered, asked once", func(t *testing.T) {
		c, clock := newClient(f.Keys["behind"], "behind.json", here)
		clock.Advance(-10 * time.Minute)
		if _, err := c.Activate(ctx, "behind"); err != nil {
			t.Fatal(err)
		}
		f.control(t, "reset")
		for i := range 3 {
			if v := c.Check(ctx); v.Licensed || v.Reason != "clock_tampered" {
				t.Fatalf("check %d: %+v", i, v)
			}
		}
		if n := f.leaseRequests(t); n != 1 {
			t.Fatalf("%d lease requests, want 1", n)
		}
		clock.Advance(10 * time.Minute)
		if v := c.Check(ctx); !v.Licensed {
			t.Fatalf("the clock set right: %+v", v)
		}
		c.WaitRenewal()
	})
	t.Run("scenario: two copies share a store and a floating seat; closing one is a lapse for the other", func(t *testing.T) {
		var lapsed []Verdict
		var mu sync.Mutex
		copyOf := func(onLapsed func(Verdict)) *Client {
			c, err := New(Config{URL: f.URL, ProductID: f.ProductID, Key: f.Keys["shared"], LeaseKeys: f.LeaseKeys,
				StorePath: filepath.Join(dir, "shared.json"), Components: map[string]string{}, OnLapsed: onLapsed})
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
		a := copyOf(nil)
		if _, err := a.Activate(ctx, "one-machine"); err != nil {
			t.Fatal(err)
		}
		if v := a.Check(ctx); !v.Licensed {
			t.Fatalf("a: %+v", v)
		}
		// The second copy starts once the first has activated: it reads the token from the store.
		b := copyOf(func(v Verdict) { mu.Lock(); lapsed = append(lapsed, v); mu.Unlock() })
		if act, err := b.Activate(ctx, "one-machine"); err != nil || !act.AlreadyActivated {
			t.Fatalf("b: %+v %v", act, err)
		}
		if v := b.Check(ctx); !v.Licensed {
			t.Fatalf("b: %+v", v)
		}
		// Any renewal Check still in the background ends before the first copy closes:
		// otherwise it, not the Renew below, meets the released seat, and the Renew finds no
		// seat to ask about.
		b.WaitRenewal()
		if err := a.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if v := b.Renew(ctx); v.Licensed || v.Reason != "seat_lapsed" {
			t.Fatalf("b after a closed: %+v", v)
		}
		mu.Lock()
		if len(lapsed) != 1 || lapsed[0].Reason != "seat_lapsed" {
			t.Fatalf("OnLapsed calls: %+v", lapsed)
		}
		mu.Unlock()
		// As after any lapse, activate takes the seat again.
		if _, err := b.Activate(ctx, "one-machine"); err != nil {
			t.Fatal(err)
		}
		if v := b.Check(ctx); !v.Licensed {
			t.Fatalf("b activated again: %+v", v)
		}
		_ = b.Close(ctx)
	})
}

// TestLiveHostedScenarios runs against a tenant of a hosted stack.
func TestLiveHostedScenarios(t *testing.T) {
	f := live(t)
	h := f.Hosted
	if h == nil {
		t.Fatal("the fixture has no hosted tenant")
	}
	ctx := context.Background()
	clock := &fakeClock{now: time.Now()}
	c, err := New(Config{URL: h.URL, ProductID: h.ProductID, Key: h.Keys["suspended"], StorePath: filepath.Join(t.TempDir(), "suspended.json"),
		Components: map[string]string{}, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	renewAfter := time.Duration(h.RenewAfter) * time.Second

	t.Run("scenario: hosted, the tenant suspended: licensed from the lease, paced; licensed again once resumed", func(t *testing.T) {
		if _, err := c.Activate(ctx, "hosted-desk"); err != nil {
			t.Fatal(err)
		}
		if v := c.Check(ctx); !v.Licensed || v.Offline {
			t.Fatalf("%+v", v)
		}
		// The operator suspends the tenant (an unpaid bill). This server keeps the apps'
		// public checks working (docs/operations.md, "Suspend"): the renewal past
		// renew_after brings a lease, and the checks after it send nothing.
		control(t, h.Control, "suspend?tenant="+h.TenantID)
		defer control(t, h.Control, "resume?tenant="+h.TenantID)
		control(t, h.Control, "reset")
		clock.Advance(renewAfter + time.Second)
		for i := range 120 {
			if v := c.Check(ctx); !v.Licensed {
				t.Fatalf("check %d, suspended: %+v", i, v)
			}
			c.WaitRenewal()
			clock.Advance(time.Second)
		}
		if v := c.Check(ctx); !v.Licensed || !v.RenewAfter.After(clock.Now()) {
			t.Fatalf("the renewal while suspended brought no lease: %+v", v)
		}
		if n := leaseRequests(t, h.Control); n != 1 {
			t.Fatalf("%d lease requests in 120 checks, want 1", n)
		}

		// A server that refuses a suspended vendor's apps answers the renewal 403 Tenant is
		// suspended (the proxy answers so): the lease and token are kept, the app licensed
		// from the lease until its exp, and the server asked at most once a minute.
		control(t, h.Control, "mode?m=suspended")
		defer control(t, h.Control, "mode?m=pass")
		control(t, h.Control, "reset")
		clock.Advance(renewAfter + time.Second)
		const minutes = 10
		for i := range minutes * 60 {
			if v := c.Check(ctx); !v.Licensed || !v.Offline {
				t.Fatalf("check %d, renewals refused: %+v", i, v)
			}
			c.WaitRenewal()
			clock.Advance(time.Second)
		}
		if n := leaseRequests(t, h.Control); n < 2 || n > minutes {
			t.Fatalf("%d lease requests in %d minutes of checks every second, want one a minute", n, minutes)
		}
		clock.Advance(time.Minute)
		if _, err := c.Verify(ctx); !errors.Is(err, ErrTenantSuspended) {
			t.Fatalf("verify: %v", err)
		}
		// Past the lease's exp: tenant_suspended, not expired.
		clock.Advance(time.Duration(h.LeaseTTL) * time.Second)
		for i := range 3 {
			if v := c.Check(ctx); v.Licensed || v.Reason != "tenant_suspended" {
				t.Fatalf("check %d past exp: %+v", i, v)
			}
		}

		// The operator lifts the suspension: the renewal a minute after the last ask is
		// licensed, with the token kept all along.
		control(t, h.Control, "resume?tenant="+h.TenantID)
		control(t, h.Control, "mode?m=pass")
		clock.Advance(time.Minute)
		if v := c.Renew(ctx); !v.Licensed || v.Offline {
			t.Fatalf("resumed: %+v", v)
		}
	})
}
