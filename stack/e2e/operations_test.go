package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/keyhouse/keyhouse/devinfra/testkit"
	"github.com/keyhouse/keyhouse/stack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// The operations contract of addendum §10: health and readiness, deadlines when a
// dependency hangs, the SIGTERM drain, and one log line per outage.

func TestHealthzAndReadyzAnswerWithoutRateLimits(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	c := anon(t, s)
	for i := 0; i < 3; i++ {
		r := c.Get("/healthz")
		r.Expect(t, 200).ExpectBody(t, `{"status":"ok"}`)
		if r.Header.Get("X-RateLimit-Limit") != "" {
			t.Fatalf("/healthz carries rate-limit headers: %v", r.Header)
		}
		r = c.Get("/readyz")
		r.Expect(t, 200).ExpectBody(t, `{"status":"ready"}`)
		if r.Header.Get("X-RateLimit-Limit") != "" {
			t.Fatalf("/readyz carries rate-limit headers: %v", r.Header)
		}
	}
}

// startOwnStack starts a stack with its own Postgres cluster (and Redis), for tests that
// pause them.
func startOwnStack(t *testing.T, env map[string]string) *stack.Stack {
	t.Helper()
	name := fmt.Sprintf("own%d", dbCounter.Add(1))
	full := map[string]string{
		"ADMIN_API_KEY":   "test-admin-key-" + name + "-0123456789abcdef",
		"TRUSTED_PROXIES": "127.0.0.1/32",
		"LOG_LEVEL":       "debug",
		// As in startStack: admission control on the path, never refusing.
		"ADMISSION_MIN_LIMIT": "1000",
	}
	for k, v := range env {
		full[k] = v
	}
	dir := filepath.Join(testkit.Dir(t), name)
	s, err := stack.Start(context.Background(), stack.Options{Dir: dir, BinDir: binaries(t), Env: full})
	if err != nil {
		t.Fatalf("start stack: %v (logs in %s)", err, filepath.Join(dir, "logs"))
	}
	t.Cleanup(s.Stop)
	return s
}

// pause stops every process in pids with SIGSTOP and returns the function that resumes
// them; it also runs at cleanup, so a failing test never leaves them stopped.
func pause(t *testing.T, what string, pids []int) (resume func()) {
	t.Helper()
	if len(pids) == 0 {
		t.Fatalf("no %s processes found", what)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatalf("SIGSTOP %s pid %d: %v", what, pid, err)
		}
	}
	var once sync.Once
	resume = func() {
		once.Do(func() {
			for _, pid := range pids {
				_ = syscall.Kill(pid, syscall.SIGCONT)
			}
		})
	}
	t.Cleanup(resume)
	return resume
}

// pausePostgres stops the cluster in dir and returns what resumes it: every process, since
// pausing only the postmaster would leave open connections answering. The postmaster stops
// first, so that no backend is forked after its children are listed: one forked between
// the listing and the signals went on answering its connection, and releases stayed
// SERVING through a whole pause.
func pausePostgres(t *testing.T, dir string) (resume func()) {
	t.Helper()
	master := stack.PIDFile(filepath.Join(dir, "data", "postmaster.pid"))
	if master == 0 {
		t.Fatalf("no postmaster.pid in %s", dir)
	}
	resumeMaster := pause(t, "postmaster", []int{master})
	resumeChildren := pause(t, "postgres backend", stack.ChildrenOf(master))
	return func() {
		resumeChildren()
		resumeMaster()
	}
}

func redisPid(t *testing.T, dir string) int {
	t.Helper()
	pid := stack.PIDFile(filepath.Join(dir, "redis.pid"))
	if pid == 0 {
		t.Fatalf("no redis.pid in %s", dir)
	}
	return pid
}

// grpcHealth asks a service process for its overall grpc.health.v1 status.
func grpcHealth(t *testing.T, addr string) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return healthpb.HealthCheckResponse_UNKNOWN
	}
	return resp.GetStatus()
}

// countLog counts the lines of a process's log whose msg is msg (and, when dependency is
// set, whose dependency matches), failing on any line that is not JSON.
func countLog(t *testing.T, s *stack.Stack, name, msg, dependency string) int {
	t.Helper()
	raw, err := os.ReadFile(s.LogPath(name))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range bytes.Split(bytes.TrimSpace(raw), []byte("\n")) {
		if !json.Valid(line) {
			t.Fatalf("%s logged a line that is not JSON: %q", name, line)
		}
	}
	n := 0
	for _, line := range logLines(t, s.LogPath(name)) {
		if line["msg"] == msg && (dependency == "" || line["dependency"] == dependency) {
			n++
		}
	}
	return n
}

// timedPost sends one request and reports its status, body and duration.
func timedPost(t *testing.T, c *Client, path string, body any) (*Response, time.Duration) {
	t.Helper()
	start := time.Now()
	r := c.Post(path, body)
	return r, time.Since(start)
}

func TestPostgresPausedAnswers503WithinTheBudgetThenRecovers(t *testing.T) {
	t.Parallel()
	const budget = 2 * time.Second
	// No license cache: every verify reads Postgres (a cached row would answer for its TTL).
	s := startOwnStack(t, map[string]string{"REQUEST_TIMEOUT": budget.String(), "LICENSE_CACHE_TTL": "0"})
	c := admin(t, s)
	key := issueLicense(t, c, map[string]any{"tier": "pro", "product_id": product("pause"), "issued_to": "pg@example.com"})
	c.Post("/v1/verify-license", map[string]string{"key": key}).Expect(t, 200)

	resume := pausePostgres(t, s.Postgres.Dir)
	// A database-backed request while Postgres hangs: a 503 that says to retry, answered
	// within the budget (plus slack for a loaded machine), not after the pause.
	for _, req := range []struct {
		path string
		body any
	}{
		{"/v1/verify-license", map[string]string{"key": key}},
		{"/v1/issue-license", map[string]any{"tier": "pro", "product_id": product("pause"), "issued_to": "x@example.com"}},
	} {
		r, took := timedPost(t, c, req.path, req.body)
		if r.Status != 503 || !strings.HasSuffix(r.JSON(t)["error"].(string), "unavailable, retry") {
			t.Fatalf("%s with Postgres paused: %d %s, want 503 … unavailable, retry", req.path, r.Status, r.Body)
		}
		if took > budget+3*time.Second {
			t.Fatalf("%s with Postgres paused took %v, budget %v", req.path, took, budget)
		}
		t.Logf("%s with Postgres paused: %d %s in %v (budget %v)", req.path, r.Status, r.Body, took.Round(time.Millisecond), budget)
	}
	// Readiness follows: every service reports NOT_SERVING, the gateway lists them.
	for _, name := range stack.Services {
		eventually(t, name+" NOT_SERVING", func() bool {
			return grpcHealth(t, s.Service(name).Addr) == healthpb.HealthCheckResponse_NOT_SERVING
		})
	}
	eventually(t, "/readyz 503", func() bool {
		r := anon(t, s).Get("/readyz")
		return r.Status == 503 && strings.Contains(string(r.Body), `"licensing"`)
	})
	r := anon(t, s).Get("/readyz")
	if !strings.HasPrefix(string(r.Body), `{"error":"Not ready","not_ready":[`) {
		t.Fatalf("/readyz body %s", r.Body)
	}
	anon(t, s).Get("/healthz").Expect(t, 200)

	resume()
	eventually(t, "/readyz 200 after Postgres resumed", func() bool {
		return anon(t, s).Get("/readyz").Status == 200
	})
	c.Post("/v1/verify-license", map[string]string{"key": key}).Expect(t, 200)
	issueLicense(t, c, map[string]any{"tier": "pro", "product_id": product("pause"), "issued_to": "after@example.com"})
	if got := grpcHealth(t, s.Service("licensing").Addr); got != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("licensing health after recovery: %v", got)
	}
	// One line when the outage began and one when it ended, per service.
	for _, name := range stack.Services {
		if n := countLog(t, s, name, "dependency unavailable", "postgres"); n != 1 {
			t.Errorf("%s logged the Postgres outage %d times, want once", name, n)
		}
		if n := countLog(t, s, name, "dependency available again", "postgres"); n != 1 {
			t.Errorf("%s logged the Postgres recovery %d times, want once", name, n)
		}
	}
}

func TestRedisPausedKeepsServingAndTurnsNotReadyThenRecovers(t *testing.T) {
	t.Parallel()
	const budget = 2 * time.Second
	s := startStack(t, map[string]string{"REQUEST_TIMEOUT": budget.String(), "REDIS_URL": "", "RATE_LIMIT_REDIS_TIMEOUT": "100ms"})
	t.Cleanup(s.Stop)
	c := admin(t, s)
	key := issueLicense(t, c, map[string]any{"tier": "pro", "product_id": product("redis"), "issued_to": "r@example.com"})

	resume := pause(t, "redis", []int{redisPid(t, s.Redis.Dir)})
	// Rate-limited routes keep answering (limits count in process, docs/operations.md),
	// within the budget.
	for i := 0; i < 3; i++ {
		r, took := timedPost(t, c, "/v1/verify-license", map[string]string{"key": key})
		r.Expect(t, 200)
		if took > budget+3*time.Second {
			t.Fatalf("verify-license with Redis paused took %v", took)
		}
	}
	eventually(t, "/readyz 503 naming redis", func() bool {
		r := anon(t, s).Get("/readyz")
		return r.Status == 503 && string(r.Body) == `{"error":"Not ready","not_ready":["redis"]}`
	})
	time.Sleep(2 * time.Second) // several probe rounds during the outage
	resume()
	eventually(t, "/readyz 200 after Redis resumed", func() bool {
		return anon(t, s).Get("/readyz").Status == 200
	})
	c.Post("/v1/verify-license", map[string]string{"key": key}).Expect(t, 200)
	if n := countLog(t, s, "gateway", "dependency unavailable", "redis"); n != 1 {
		t.Errorf("gateway logged the Redis outage %d times, want once", n)
	}
	if n := countLog(t, s, "gateway", "dependency available again", "redis"); n != 1 {
		t.Errorf("gateway logged the Redis recovery %d times, want once", n)
	}
}

func TestSIGTERMDrainsAGatewayAndAServiceReplicaWithoutAFailedRequest(t *testing.T) {
	t.Parallel()
	// The caches off: every verify-license reaches a licensing replica, so the replica's
	// drain happens under load (cached, one key is asked about once per second and
	// gateway, and a replica could see no call at all).
	s := startStack(t, map[string]string{"SHUTDOWN_DELAY": "2s", "SHUTDOWN_TIMEOUT": "10s", "LICENSE_CACHE_TTL": "0"})
	t.Cleanup(s.Stop)
	ctx := context.Background()
	key := issueLicense(t, admin(t, s), map[string]any{"tier": "pro", "product_id": product("drain"), "issued_to": "d@example.com"})

	// Two licensing replicas, two gateways that both know both replicas.
	first := s.Service("licensing")
	second, err := s.StartServiceReplica(ctx, "licensing", nil)
	if err != nil {
		t.Fatal(err)
	}
	replicas := first.Addr + "," + second
	var urls []string
	for i := 0; i < 2; i++ {
		u, err := s.StartGateway(ctx, 0, map[string]string{"LICENSING_ADDR": replicas})
		if err != nil {
			t.Fatal(err)
		}
		urls = append(urls, u)
	}
	var gateways []*stack.Proc
	for _, p := range s.Procs() {
		if p.Name == "gateway" {
			gateways = append(gateways, p)
		}
	}
	victim := gateways[len(gateways)-2] // the first of the two new gateways
	if "http://"+victim.Addr != urls[0] {
		t.Fatalf("gateway %s is not %s", victim.Addr, urls[0])
	}

	// The load balancer of this test: like a Kubernetes Service, it sends only to
	// gateways whose /readyz answers 200, polled every 100 ms.
	lb := newReadyBalancer(urls)
	stop := make(chan struct{})
	go lb.watch(stop)
	defer close(stop)

	var ok, failed atomic.Int64
	var failures sync.Map
	var wg sync.WaitGroup
	load := make(chan struct{})
	for w := 0; w < 4; w++ {
		wg.Go(func() {
			client := &http.Client{Timeout: 15 * time.Second}
			for i := 0; ; i++ {
				select {
				case <-load:
					return
				default:
				}
				base := lb.pick()
				if base == "" {
					failed.Add(1)
					failures.Store("no ready gateway", true)
					time.Sleep(10 * time.Millisecond)
					continue
				}
				req, _ := http.NewRequest(http.MethodPost, base+"/v1/verify-license", strings.NewReader(`{"key":"`+key+`"}`))
				req.Header.Set("Content-Type", "application/json")
				// Spread over client IPs so the Validation tier never refuses.
				req.Header.Set("X-Forwarded-For", fmt.Sprintf("10.250.%d.%d", w, i%250))
				resp, err := client.Do(req)
				if err != nil {
					failed.Add(1)
					failures.Store(err.Error(), true)
					continue
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || !bytes.HasPrefix(body, []byte(`{"valid":true`)) {
					failed.Add(1)
					failures.Store(fmt.Sprintf("%d %s", resp.StatusCode, body), true)
					continue
				}
				ok.Add(1)
			}
		})
	}
	time.Sleep(time.Second)
	before := ok.Load()
	// Both replicas take calls: the gateways balance over them.
	for _, p := range s.Procs() {
		if p.Name == "licensing" && (p == first || p.Addr == second) {
			const verify = `keyhouse_grpc_server_requests_total{code="OK",method="/keyhouse.licensing.v1.LicensingService/VerifyLicense"} `
			if n := sample(scrape(t, p), verify); n < 1 {
				t.Fatalf("licensing replica %s served %v verify calls before the SIGTERM, want some", p.Addr, n)
			}
		}
	}
	var stopping sync.WaitGroup
	for _, p := range []*stack.Proc{victim, first} {
		stopping.Go(p.Stop) // SIGTERM, then wait for the exit
	}
	stopping.Wait()
	time.Sleep(time.Second)
	close(load)
	wg.Wait()

	if victim.Err() != nil || first.Err() != nil {
		t.Errorf("exit after SIGTERM: gateway %v, licensing %v; want status 0 for both", victim.Err(), first.Err())
	}
	if n := failed.Load(); n != 0 {
		var msgs []string
		failures.Range(func(k, _ any) bool { msgs = append(msgs, k.(string)); return true })
		t.Fatalf("%d failed requests during the drain (%d ok): %v", n, ok.Load(), msgs)
	}
	if ok.Load() <= before {
		t.Fatalf("no request succeeded during the drain (%d before, %d after)", before, ok.Load())
	}
	t.Logf("%d requests, none failed; %d during and after the SIGTERMs", ok.Load(), ok.Load()-before)
}

// readyBalancer spreads requests over the backends whose /readyz last answered 200.
type readyBalancer struct {
	urls  []string
	mu    sync.Mutex
	ready []string
	next  atomic.Uint64
}

func newReadyBalancer(urls []string) *readyBalancer {
	return &readyBalancer{urls: urls, ready: append([]string(nil), urls...)}
}

func (b *readyBalancer) watch(stop <-chan struct{}) {
	client := &http.Client{Timeout: time.Second}
	for {
		var ready []string
		for _, u := range b.urls {
			resp, err := client.Get(u + "/readyz")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					ready = append(ready, u)
				}
			}
		}
		b.mu.Lock()
		b.ready = ready
		b.mu.Unlock()
		select {
		case <-stop:
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (b *readyBalancer) pick() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.ready) == 0 {
		return ""
	}
	return b.ready[b.next.Add(1)%uint64(len(b.ready))]
}

// scrape reads a process's Prometheus metrics.
func scrape(t *testing.T, p *stack.Proc) string {
	t.Helper()
	metrics, err := p.Metrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return metrics
}

// sample returns the value of the first series starting with prefix (name and labels
// as written in the exposition), or -1.
func sample(metrics, prefix string) float64 {
	for _, line := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(line, prefix) {
			v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			if err == nil {
				return v
			}
		}
	}
	return -1
}

// grpcCalls sums the calls of the given methods (full gRPC names) that every process of
// service counted in keyhouse_grpc_server_requests_total, whatever their code.
func grpcCalls(t *testing.T, s *stack.Stack, service string, methods ...string) float64 {
	t.Helper()
	total := 0.0
	for _, p := range s.Procs() {
		if p.Name != service {
			continue
		}
		for _, series := range stack.ParseMetrics(scrape(t, p), "keyhouse_grpc_server_requests_total") {
			if slices.Contains(methods, series.Labels["method"]) {
				total += series.Value
			}
		}
	}
	return total
}

// The counters an alert watches for an increase are on /metrics at 0 from the start, with
// every label value they can take, not only after their first event: a parked outbox
// row's kind in every service with a relay, each consumer's termination reasons, the
// webhook attempts' outcomes. Without a series, increase() and rate() have nothing to
// compare the first event with, and a dashboard shows "no data" instead of 0.
func TestCountersAreExposedAtZeroBeforeTheirFirstEvent(t *testing.T) {
	t.Parallel()
	s := startStack(t, nil)
	t.Cleanup(s.Stop)
	terminated := func(stream, consumer string) []string {
		var out []string
		for _, reason := range []string{"max_deliveries", "not_jetstream", "panic", "permanent"} {
			out = append(out, fmt.Sprintf(`keyhouse_consumer_terminated_total{consumer=%q,reason=%q,stream=%q} 0`, consumer, reason, stream))
		}
		return out
	}
	parked := []string{`keyhouse_outbox_parked_total{kind="failed"} 0`, `keyhouse_outbox_parked_total{kind="too_large"} 0`}
	want := map[string][]string{
		"licensing":   append(slices.Clone(parked), terminated("KEYHOUSE_EVENTS", "licensing-tenant-deleted")...),
		"releases":    append(slices.Clone(parked), terminated("KEYHOUSE_EVENTS", "releases-tenant-deleted")...),
		"billing":     append(slices.Clone(parked), terminated("KEYHOUSE_EVENTS", "billing-tenant-deleted")...),
		"activations": slices.Concat(parked, terminated("KEYHOUSE_EVENTS", "activations-tenant-deleted"), terminated("KEYHOUSE_EVENTS", "activations-license-deleted")),
		"storefront":  slices.Concat(parked, terminated("KEYHOUSE_EVENTS", "storefront-tenant-deleted"), terminated("STOREFRONT", "storefront-fulfillment")),
		"events": slices.Concat(parked, terminated("KEYHOUSE_EVENTS", "events-log"), []string{
			`keyhouse_webhook_attempts_total{outcome="http_error"} 0`,
			`keyhouse_webhook_attempts_total{outcome="no_answer"} 0`,
			`keyhouse_webhook_attempts_total{outcome="succeeded"} 0`,
		}),
	}
	for _, p := range s.Procs() {
		if p.Name == "gateway" {
			continue
		}
		if want[p.Name] == nil {
			t.Fatalf("no expectation for %s", p.Name)
		}
		// A service starts its consumers beside serving: the first scrape may precede them.
		var missing []string
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			got := scrape(t, p)
			missing = nil
			for _, w := range want[p.Name] {
				if !strings.Contains(got, "\n"+w+"\n") {
					missing = append(missing, w)
				}
			}
			if len(missing) == 0 || time.Now().After(deadline) {
				break
			}
		}
		if len(missing) > 0 {
			t.Errorf("%s's /metrics lacks %q", p.Name, missing)
		}
	}
}

func TestEveryProcessServesItsMetricsOnItsOwnPort(t *testing.T) {
	t.Parallel()
	s := startStack(t, nil)
	t.Cleanup(s.Stop)
	c := admin(t, s)
	key := issueLicense(t, c, map[string]any{"tier": "pro", "product_id": product("metrics"), "issued_to": "m@example.com"})
	// The second verify is normally answered from the gateway's cache. On a loaded machine
	// the entry can lapse between the two calls, so the counts are checked by their sum
	// below: every verify is a hit or a miss, and each miss is one call to licensing.
	anon(t, s).Post("/v1/verify-license", map[string]string{"key": key}).Expect(t, 200)
	anon(t, s).Post("/v1/verify-license", map[string]string{"key": key}).Expect(t, 200)
	anon(t, s).Post("/v1/activate-license", map[string]string{"key": key, "instance_id": "m1"}).Expect(t, 200)
	anon(t, s).Get("/v1/no-such-route").Expect(t, 404)
	// Deleting a license goes through the outbox to activations' consumer.
	c.Delete("/v1/delete-license", map[string]string{"key": key}).Expect(t, 200)

	// The public port does not serve them.
	anon(t, s).Get("/metrics").Expect(t, 404)

	common := []string{"go_goroutines ", "process_cpu_seconds_total ", "keyhouse_dependency_up{"}
	want := map[string][]string{
		"gateway": {
			`keyhouse_http_requests_total{code="200",method="POST",route="/v1/verify-license"} 2`,
			`keyhouse_http_requests_total{code="404",method="GET",route="none"} 2`, // the unknown route and /metrics
			`keyhouse_http_request_duration_seconds_bucket{code="200",method="POST",route="/v1/verify-license",le="+Inf"} 2`,
			`keyhouse_gateway_answer_cache_total{result="miss",route="/v1/verify-license"} `,
			`keyhouse_ratelimit_decisions_total{decision="allowed",tier="validation"} 2`,
			`keyhouse_ratelimit_decisions_total{decision="allowed",tier="activation"} 1`,
			`keyhouse_dependency_up{dependency="redis"} 1`,
			`keyhouse_dependency_up{dependency="licensing"} 1`,
		},
		"licensing": {
			`keyhouse_grpc_server_requests_total{code="OK",method="/keyhouse.licensing.v1.LicensingService/VerifyLicense`,
			`keyhouse_grpc_server_request_duration_seconds_bucket{code="OK",method="/keyhouse.licensing.v1.LicensingService/VerifyLicense`,
			`keyhouse_pgxpool_total_conns{pool="licensing"}`,
			`keyhouse_pgxpool_acquires_total{pool="licensing"}`,
			`keyhouse_outbox_backlog 0`, // the deletion event was relayed
			`keyhouse_outbox_oldest_age_seconds 0`,
			`keyhouse_dependency_up{dependency="postgres"} 1`,
		},
		"activations": {
			`keyhouse_grpc_server_requests_total{code="OK",method="/keyhouse.activations.v1.ActivationsService/ActivateLicense"} 1`,
			`keyhouse_jetstream_consumer_pending{consumer=`,
			`keyhouse_jetstream_consumer_ack_pending{consumer=`,
			`keyhouse_dependency_up{dependency="nats"} 1`,
		},
		"billing":  {`keyhouse_pgxpool_total_conns{pool="billing"}`, `keyhouse_grpc_server_requests_total{code="OK",method="/grpc.health.v1.Health/Check"}`},
		"releases": {`keyhouse_pgxpool_total_conns{pool="releases"}`},
		"storefront": {
			`keyhouse_pgxpool_total_conns{pool="storefront"}`,
			`keyhouse_mail_sends_total{result="failed"} 0`,
			`keyhouse_mail_sends_total{result="logged"} 0`,
			`keyhouse_outbox_backlog `,
			`keyhouse_jetstream_consumer_pending{consumer=`,
			`keyhouse_dependency_up{dependency="nats"} 1`,
		},
	}
	for _, p := range s.Procs() {
		if p.MetricsAddr == "" || p.MetricsAddr == p.Addr {
			t.Fatalf("%s has no metrics port of its own (%q)", p.Name, p.MetricsAddr)
		}
		// Outbox and consumer series come from a query made at scrape time; the delete
		// above may still be on its way.
		var got string
		var missing []string
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			got, missing = scrape(t, p), nil
			for _, w := range append(common, want[p.Name]...) {
				if !strings.Contains(got, "\n"+w) {
					missing = append(missing, w)
				}
			}
			if len(missing) == 0 || time.Now().After(deadline) {
				break
			}
		}
		if len(missing) > 0 {
			t.Errorf("%s metrics lack %q", p.Name, missing)
			continue
		}
	}

	// Two verifies: each a cache hit or a miss, at least the first a miss, and licensing
	// asked once per miss (licensing observes each item of a VerifyLicenseBatch as one
	// VerifyLicense call).
	var gateway string
	for _, p := range s.Procs() {
		if p.Name == "gateway" {
			gateway = scrape(t, p)
		}
	}
	misses := sample(gateway, `keyhouse_gateway_answer_cache_total{result="miss",route="/v1/verify-license"}`)
	hits := max(sample(gateway, `keyhouse_gateway_answer_cache_total{result="hit",route="/v1/verify-license"}`), 0)
	if misses < 1 || misses+hits != 2 {
		t.Errorf("gateway answer cache for /v1/verify-license: %v misses and %v hits, want 2 verifies with at least 1 miss", misses, hits)
	}
	asked := grpcCalls(t, s, "licensing", "/keyhouse.licensing.v1.LicensingService/VerifyLicense")
	if asked != misses {
		t.Errorf("licensing answered %v verify calls, want one per gateway cache miss (%v)", asked, misses)
	}
}

// A Postgres that ends a connection under a query (a fast shutdown, a restart, a failover:
// FATAL 57P01, "terminating connection due to administrator command") answers the request
// the 503 of a database that did not answer, never a 500: the first lease after a
// Postgres stop or restart answered 500 "Internal server error". Each request is held on
// a table lock, and its backend, waiting there, is then ended with pg_terminate_backend,
// which is what a shutdown does to it. (Stopping Postgres
// itself raced: the shutdown could end the lock's holder first and let the request's
// query finish with a 200 before its own backend was ended.)
func TestAPostgresThatEndsTheConnectionUnderAQueryIsA503NotA500(t *testing.T) {
	t.Parallel()
	// Every verify reads Postgres; a budget that outlasts the lock wait on a slow machine.
	s := startOwnStack(t, map[string]string{"LICENSE_CACHE_TTL": "0", "REQUEST_TIMEOUT": "30s"})
	a, c := admin(t, s), anon(t, s)
	p := product("pg-stop")
	putPolicy(t, a, p, "pro", map[string]any{"lease_ttl_seconds": 3600, "fingerprint_match": "any"})
	key := issueLicense(t, a, lic(p, "max_activations", 5))
	token := c.Post("/v1/activate-license", map[string]any{"key": key, "instance_id": "m1"}).Expect(t, 200).JSON(t)["token"].(string)
	lease := map[string]any{"key": key, "token": token, "components": map[string]string{"machine_id": "m1"}}
	c.Post("/v1/leases", lease).Expect(t, 200)

	for _, route := range []struct {
		path, service, table string
		body                 any
	}{
		{"/v1/leases", "activations", "activations.seats", lease},
		{"/v1/verify-license", "licensing", "licensing.licenses", map[string]string{"key": key}},
	} {
		conn, err := pgx.Connect(t.Context(), s.Env("DATABASE_URL"))
		if err != nil {
			t.Fatal(err)
		}
		tx, err := conn.Begin(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(t.Context(), "LOCK TABLE "+route.table+" IN ACCESS EXCLUSIVE MODE"); err != nil {
			t.Fatal(err)
		}
		answer := make(chan *Response, 1)
		go func() {
			r, err := c.Try("POST", route.path, route.body)
			if err != nil {
				r = &Response{Body: []byte(err.Error())}
			}
			answer <- r
		}()
		// The request's backend waits on the lock (behind whichever of its statements
		// meets it first); every backend of the service waiting on a lock is ended until
		// the request has its answer, so a background job waiting too cannot hide it.
		var r *Response
		eventually(t, route.path+" answered once its backend was ended", func() bool {
			select {
			case r = <-answer:
				return true
			default:
			}
			if _, err := tx.Exec(t.Context(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
				WHERE application_name = $1 AND wait_event_type = 'Lock'`, "keyhouse-"+route.service); err != nil {
				t.Fatal(err)
			}
			return false
		})
		if r.Status != 503 || string(r.Body) != `{"error":"Database unavailable, retry"}` {
			t.Errorf("%s whose query's connection Postgres ended: %d %s, want 503 {\"error\":\"Database unavailable, retry\"}", route.path, r.Status, r.Body)
		}
		_ = conn.Close(t.Context())
		c.Post(route.path, route.body).Expect(t, 200)
	}
	for _, name := range []string{"activations", "licensing"} {
		if n := countLog(t, s, name, "internal error", ""); n != 0 {
			t.Errorf("%s logged %d internal errors around the ended connections, want none", name, n)
		}
	}
}
