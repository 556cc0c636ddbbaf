package e2e

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/devinfra/testkit"
	"github.com/keyhouse/keyhouse/stack"
)

// The integration tests run against real processes: every service binary and the
// gateway, on the test binary's Postgres (a database per stack) and Redis (testkit), and
// an embedded NATS per stack (JetStream stream and consumer names are fixed, so stacks
// cannot share one). One self-hosted and one hosted stack are started on first use and
// shared; tests isolate themselves by client IP (the stacks trust X-Forwarded-For from
// loopback) and, hosted, by tenant. Under -short nothing is built or started.

func TestMain(m *testing.M) { testkit.Main(m, noSecretInAnyLog) }

var build struct {
	once   sync.Once
	binDir string
	err    error
}

// binaries builds every binary of the stack once per test binary.
func binaries(t testing.TB) string {
	t.Helper()
	root := testkit.Dir(t)
	build.once.Do(func() {
		build.binDir = filepath.Join(root, "bin")
		build.err = stack.Build(context.Background(), build.binDir)
	})
	if build.err != nil {
		t.Fatal(build.err)
	}
	return build.binDir
}

var (
	stacksMu  sync.Mutex
	stacks    = map[string]*stack.Stack{}
	dbCounter atomic.Int64
)

// startStack starts a stack of its own on a fresh database with the given extra
// environment; the caller stops it (t.Cleanup(s.Stop)). Tests that stop parts of a stack
// use their own. REDIS_URL "" in env gives the stack a redis-server of its own (for a
// test that stops it); otherwise it uses the binary's shared one.
func startStack(t testing.TB, env map[string]string) *stack.Stack {
	t.Helper()
	ctx := context.Background()
	bin := binaries(t)
	name := fmt.Sprintf("stack%d", dbCounter.Add(1))
	full := map[string]string{
		"ADMIN_API_KEY":   "test-admin-key-" + name + "-0123456789abcdef",
		"DATABASE_URL":    testkit.DatabaseURL(t, testkit.Empty),
		"REDIS_URL":       testkit.RedisURL(t),
		"TRUSTED_PROXIES": "127.0.0.1/32",
		"LOG_LEVEL":       "debug",
		// Production's 5 s request budget is for a healthy machine; on a loaded CI machine
		// one request may take longer, and a test that fails for that is a defect. Tests of
		// the deadline itself set their own budget.
		"REQUEST_TIMEOUT": "30s",
		// Admission control stays on the path but never refuses: its limit adapts to a
		// loaded machine's latency, and a test that gets a 503 because the machine is slow
		// is a defect. overload_test.go pins the refusals on stacks of its own.
		"ADMISSION_MIN_LIMIT": "1000",
		// The rate limiter counts in Redis only while each round trip answers within this
		// (production: 100 ms); past it a gateway counts in process, with a budget of its
		// own. On a machine loaded enough to delay Redis that long, a test of the shared
		// counts would see that fallback. Tests of a hung Redis set their own.
		"RATE_LIMIT_REDIS_TIMEOUT": "5s",
	}
	for k, v := range env {
		full[k] = v
	}
	dir := filepath.Join(testkit.Dir(t), name)
	s, err := stack.Start(ctx, stack.Options{Dir: dir, BinDir: bin, Env: full})
	if err != nil {
		t.Fatalf("start stack: %v (logs in %s)", err, filepath.Join(dir, "logs"))
	}
	return s
}

// sharedStack returns the stack for a mode ("self" or "hosted"), starting it once; it
// stops when the test binary ends.
func sharedStack(t testing.TB, mode string) *stack.Stack {
	t.Helper()
	stacksMu.Lock()
	defer stacksMu.Unlock()
	if s, ok := stacks[mode]; ok {
		return s
	}
	env := map[string]string{"MULTI_TENANT": "false"}
	if mode == "hosted" {
		env = hostedEnv(t, nil)
	}
	s := startStack(t, env)
	stacks[mode] = s
	testkit.AtExit(s.Stop)
	return s
}

// Stripe configuration of the hosted stacks: the API is stripe-mock, the webhook secret is
// the one the tests sign with (stripe-go's webhook.GenerateTestSignedPayload).
const (
	testWebhookSecret = "whsec_keyhouse_e2e_0123456789abcdef"
	testPriceMonthly  = "price_keyhouse_pro_monthly"
	testPriceAnnual   = "price_keyhouse_pro_annual"
)

// hostedEnv is the environment of a hosted stack (MULTI_TENANT, Stripe on stripe-mock)
// with extra on top.
func hostedEnv(t testing.TB, extra map[string]string) map[string]string {
	env := stripeEnv(t)
	env["MULTI_TENANT"] = "true"
	maps.Copy(env, extra)
	return env
}

func stripeEnv(t testing.TB) map[string]string {
	return map[string]string{
		"STRIPE_SECRET_KEY":        "sk_test_keyhouse",
		"STRIPE_WEBHOOK_SECRET":    testWebhookSecret,
		"STRIPE_PRICE_PRO_MONTHLY": testPriceMonthly,
		"STRIPE_PRICE_PRO_ANNUAL":  testPriceAnnual,
		"STRIPE_API_BASE":          stripeAPI(t),
	}
}

// selfHosted is the shared self-hosted stack.
func selfHosted(t testing.TB) *stack.Stack { return sharedStack(t, "self") }

// hosted is the shared hosted (MULTI_TENANT=true) stack.
func hosted(t testing.TB) *stack.Stack { return sharedStack(t, "hosted") }

var ipCounter atomic.Uint32

// Client talks to a gateway as one client IP with one credential.
type Client struct {
	t     testing.TB
	Base  string
	IP    string
	Token string
	// HTTP sends the requests: httpClient, which follows redirects, when nil.
	HTTP *http.Client
}

// newClient returns a client with a client IP no other test uses, so rate-limit budgets
// do not leak between tests.
func newClient(t testing.TB, base, token string) *Client {
	n := ipCounter.Add(1)
	return &Client{t: t, Base: base, Token: token, IP: fmt.Sprintf("10.%d.%d.%d", (n>>16)&0xff, (n>>8)&0xff, n&0xff)}
}

// tenantClient returns a client acting for a tenant of the mode's shared stack: the admin
// key self-hosted (it acts for the one tenant), a new tenant's key hosted.
func tenantClient(t testing.TB, mode string) *Client {
	t.Helper()
	s := sharedStack(t, mode)
	if mode == "hosted" {
		return newTenant(t, s)
	}
	return admin(t, s)
}

// admin returns a client carrying the stack's admin key.
func admin(t testing.TB, s *stack.Stack) *Client { return newClient(t, s.URL, s.AdminKey) }

// anon returns a client with no credential.
func anon(t testing.TB, s *stack.Stack) *Client { return newClient(t, s.URL, "") }

// Response is what came back.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// Do sends a request; body may be nil, a string (sent as is) or a value to encode.
// headers are name, value pairs. A request that gets no answer fails the test.
func (c *Client) Do(method, path string, body any, headers ...string) *Response {
	c.t.Helper()
	r, err := c.Try(method, path, body, headers...)
	if err != nil {
		c.t.Fatal(err)
	}
	return r
}

// Try is Do for a goroutine other than the test's: a request that gets no answer is its
// error, which the caller reports.
func (c *Client) Try(method, path string, body any, headers ...string) (*Response, error) {
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	case []byte:
		r = bytes.NewReader(b)
	case io.Reader:
		r = b
	default:
		enc, err := json.Marshal(b)
		if err != nil {
			return nil, err
		}
		r = bytes.NewReader(enc)
	}
	req, err := http.NewRequest(method, c.Base+path, r)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	req.Header.Set("X-Forwarded-For", c.IP)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := cmp.Or(c.HTTP, httpClient).Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
	}
	census.noteCredential(c.Token)
	census.noteResponse(data)
	return &Response{Status: resp.StatusCode, Header: resp.Header, Body: data}, nil
}

var httpClient = &http.Client{Timeout: 30 * time.Second}

// Get, Post and Delete are shorthands.
func (c *Client) Get(path string) *Response { c.t.Helper(); return c.Do(http.MethodGet, path, nil) }
func (c *Client) Post(path string, body any) *Response {
	c.t.Helper()
	return c.Do(http.MethodPost, path, body)
}
func (c *Client) Delete(path string, body any) *Response {
	c.t.Helper()
	return c.Do(http.MethodDelete, path, body)
}

// JSON decodes the body as an object.
func (r *Response) JSON(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("body is not a JSON object: %v: %s", err, r.Body)
	}
	return m
}

// Expect fails the test unless the status matches.
func (r *Response) Expect(t testing.TB, status int) *Response {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status %d, want %d; body: %s", r.Status, status, r.Body)
	}
	return r
}

// ExpectError checks the status and that the body is exactly {"error": msg}.
func (r *Response) ExpectError(t testing.TB, status int, msg string) {
	t.Helper()
	r.Expect(t, status)
	if !r.IsError(status, msg) {
		t.Fatalf("body %s, want %s", r.Body, errorBody(msg))
	}
}

// IsError reports whether the answer is status with the body exactly {"error": msg}; for
// goroutines other than the test's, and answers a test tells apart.
func (r *Response) IsError(status int, msg string) bool {
	return r.Status == status && string(r.Body) == errorBody(msg)
}

func errorBody(msg string) string {
	b, _ := json.Marshal(map[string]string{"error": msg})
	return string(b)
}

// ExpectBody checks the exact bytes of the body (field order included).
func (r *Response) ExpectBody(t testing.TB, want string) {
	t.Helper()
	if string(r.Body) != want {
		t.Fatalf("body\n got  %s\n want %s", r.Body, want)
	}
}

// Keys returns the top-level keys of a JSON object body in order.
func (r *Response) Keys(t testing.TB) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(r.Body))
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		t.Fatalf("body is not a JSON object: %s", r.Body)
	}
	var keys []string
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

// newTenant provisions a hosted tenant through the operator route and returns a client
// holding its API key.
func newTenant(t testing.TB, s *stack.Stack) *Client {
	t.Helper()
	n := dbCounter.Add(1)
	resp := admin(t, s).Post("/v1/operator/tenants", map[string]string{"name": fmt.Sprintf("Tenant %d", n), "email": fmt.Sprintf("owner%d@example.com", n)}).Expect(t, 200)
	key, _ := resp.JSON(t)["api_key"].(string)
	if key == "" {
		t.Fatalf("no api_key in %s", resp.Body)
	}
	return newClient(t, s.URL, key)
}

// issueLicense issues a license through the REST edge and returns its key. body needs at
// least tier, product_id and issued_to.
func issueLicense(t testing.TB, c *Client, body map[string]any) string {
	t.Helper()
	key, _ := c.Post("/v1/issue-license", body).Expect(t, 200).JSON(t)["key"].(string)
	if key == "" {
		t.Fatal("issue-license returned no key")
	}
	return key
}

// product returns a product_id no other test uses: on the hosted stack the first tenant
// to use a product owns it for the whole run.
func product(name string) string { return fmt.Sprintf("%s-%d", name, time.Now().UnixNano()) }

// secondGateway starts a second replica of service and a second gateway that reaches it
// through addrVar (LICENSING_ADDR, …), and returns that gateway's URL.
func secondGateway(t *testing.T, s *stack.Stack, service, addrVar string) string {
	t.Helper()
	return gatewayOnReplicas(t, s, map[string]string{service: addrVar})
}

// restartEveryProcess restarts the stack's processes as an operator does after changing
// their environment (docs/operations.md, "Rotating the admin key"): the gateways stop,
// each service stops and starts again on its address with env on top of the stack's, and
// a gateway starts with env. It returns that gateway's URL.
func restartEveryProcess(t *testing.T, s *stack.Stack, env map[string]string) string {
	t.Helper()
	for _, p := range s.Procs() {
		if p.Name == "gateway" {
			p.Stop()
		}
	}
	for _, name := range stack.Services {
		s.Service(name).Stop()
		if err := s.RestartServiceWith(t.Context(), name, env); err != nil {
			t.Fatal(err)
		}
	}
	url, err := s.StartGateway(t.Context(), 0, env)
	if err != nil {
		t.Fatal(err)
	}
	return url
}

// gatewayOnReplicas starts a replica of each service (its name to its address variable)
// and another gateway that sends to those replicas, and returns the gateway's URL. They
// stop when the test ends.
func gatewayOnReplicas(t *testing.T, s *stack.Stack, services map[string]string) string {
	t.Helper()
	addrs := map[string]string{}
	for service, addrVar := range services {
		replica, err := s.StartServiceReplica(t.Context(), service, nil)
		if err != nil {
			t.Fatal(err)
		}
		stopsWithTest(t, s, replica)
		addrs[addrVar] = replica
	}
	url, err := s.StartGateway(t.Context(), 0, addrs)
	if err != nil {
		t.Fatal(err)
	}
	stopsWithTest(t, s, url)
	return url
}

// stopsWithTest stops the stack's process at addr (a gateway's URL or a replica's
// address) when the test ends. A stack's processes otherwise run until the stack stops:
// the gateways and replicas tests added to the shared stacks ran, idle but polling, until
// the package ended (eight gateways on the hosted stack alone, minutes into a full run).
func stopsWithTest(t testing.TB, s *stack.Stack, addr string) {
	t.Helper()
	addr = strings.TrimPrefix(addr, "http://")
	for _, p := range s.Procs() {
		if p.Addr == addr {
			t.Cleanup(p.Stop)
			return
		}
	}
	t.Fatalf("no process of the stack serves %s", addr)
}
