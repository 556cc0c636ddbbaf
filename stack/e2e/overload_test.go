package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/stack"
)

// The gateway's admission control past its capacity. The stack's limit is fixed at 2
// requests in flight (ADMISSION_MIN_LIMIT = ADMISSION_MAX_LIMIT = 2), so that a burst of
// concurrent requests passes it on any machine; what is checked is what clients see, not
// how fast: every answer is the route's own or the overload 503 with Retry-After, no
// accepted write is lost or applied twice, no refused write is applied, and every process
// answers afterwards. The timing goals (goodput, p99, refusal latency) are `make bench`'s.

// overloadStack is a hosted stack of the test's own whose gateway admits 2 requests at
// a time. Not one shared by the tests that use it: a shared stack stays up, idle but
// polling, until the package ends, which on a 2-core machine cost more than the starts
// it saved.
func overloadStack(t *testing.T) *stack.Stack {
	t.Helper()
	return startOverloadStack(t, nil)
}

// overloadStackUncached is overloadStack with the license caches off, for floods of the
// routes the gateway answers from memory: such an answer is in the gateway for tens of
// microseconds, so a flood of them from 16 clients would rarely hold 2 slots at once,
// and the test would find no refusal to look at. Here each request holds its slot for a
// round trip to a service and Postgres.
func overloadStackUncached(t *testing.T) *stack.Stack {
	t.Helper()
	return startOverloadStack(t, map[string]string{"LICENSE_CACHE_TTL": "0"})
}

func startOverloadStack(t *testing.T, extra map[string]string) *stack.Stack {
	t.Helper()
	env := hostedEnv(t, map[string]string{"ADMISSION_MIN_LIMIT": "2", "ADMISSION_MAX_LIMIT": "2"})
	maps.Copy(env, extra)
	s := startStack(t, env)
	t.Cleanup(s.Stop)
	return s
}

// unavailableBody is the gateway's retryable 503: admission control's refusal, and a
// backend it cannot reach yet (apierr.UnavailableMessage).
const unavailableBody = `{"error":"Service unavailable, retry"}`

// answer is a response read off the wire, without failing from a goroutine.
type answer struct {
	status     int
	retryAfter string
	body       string
	err        error
}

func send(c *Client, method, path string, body any) answer {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return answer{err: err}
		}
		r = strings.NewReader(string(b))
	}
	req, err := http.NewRequest(method, c.Base+path, r)
	if err != nil {
		return answer{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Forwarded-For", c.IP)
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), body: string(data), err: err}
}

// refused reports whether a turned the request away with nothing applied: the overload
// 503 (admission control's, with Retry-After), or the retryable 503 of a dependency that
// did not answer within its deadline (`{"error":"Database unavailable, retry"}`,
// `{"error":"Licensing service unavailable, retry"}`). The second is no overload answer,
// but the suite shares one Postgres among every test's stacks on a machine that may be
// slow, and a query can outlast its deadline there however few requests the limit lets
// through. Any other 5xx fails the test.
func refused(t *testing.T, what string, a answer) bool {
	t.Helper()
	switch {
	case a.err != nil:
		t.Errorf("%s: %v", what, a.err)
	case a.status == http.StatusServiceUnavailable && dependencyTimedOut.MatchString(a.body):
		t.Logf("%s: %s (a dependency slower than its deadline)", what, a.body)
		return true
	case a.status == http.StatusServiceUnavailable:
		if a.body != unavailableBody || a.retryAfter == "" {
			t.Errorf("%s: 503 with Retry-After %q and body %s; want Retry-After and %s", what, a.retryAfter, a.body, unavailableBody)
		}
		return true
	case a.status >= 500:
		t.Errorf("%s: %d %s: no 5xx but the overload 503 is allowed", what, a.status, a.body)
	}
	return false
}

// dependencyTimedOut matches the answer of a dependency that did not answer in time
// (grpcx.Peer.Downstream's and the database's retryable 503s), never unavailableBody.
var dependencyTimedOut = regexp.MustCompile(`^\{"error":"(Database|[A-Z][a-z]+ service) unavailable, retry"\}$`)

// The overload tests excuse a dependency's retryable 503 and nothing else: not admission
// control's refusal (which must carry Retry-After), not an error that says no retry.
func TestOnlyADependencysRetryableAnswerReadsAsTimedOut(t *testing.T) {
	for body, want := range map[string]bool{
		`{"error":"Database unavailable, retry"}`:            true,
		`{"error":"Licensing service unavailable, retry"}`:   true,
		`{"error":"Activations service unavailable, retry"}`: true,
		unavailableBody:                             false,
		`{"error":"Internal server error"}`:         false,
		`{"error":"Licensing service unavailable"}`: false,
	} {
		if got := dependencyTimedOut.MatchString(body); got != want {
			t.Errorf("%s: timed out %t, want %t", body, got, want)
		}
	}
}

func TestOverloadRefusesTheExcessAndLosesNoWrite(t *testing.T) {
	s := overloadStack(t)
	owner := newTenant(t, s)
	prod := product("overload")
	var keys []string
	for i := range 4 {
		keys = append(keys, issueLicense(t, owner, map[string]any{"tier": "pro", "product_id": prod, "issued_to": fmt.Sprintf("o%d@example.com", i), "max_activations": 100}))
	}
	var (
		mu        sync.Mutex
		accepted  = map[string]int{} // instance_id → activations answered 200
		rejected  = map[string]bool{}
		refusals  atomic.Int64
		wg        sync.WaitGroup
		instances atomic.Int64
	)
	// Four bursts, each 100 verifies and 16 activations at once, every request from an
	// address of its own (the per-IP tiers never refuse; the per-key tier allows 20 per
	// license, and each license gets 16 here).
	for round := range 4 {
		for i := range 116 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := anon(t, s)
				key := keys[i%len(keys)]
				if i < 100 {
					a := send(c, http.MethodPost, "/v1/verify-license", map[string]string{"key": key})
					if refused(t, "verify-license", a) {
						refusals.Add(1)
					} else if a.err == nil && a.status != http.StatusOK {
						t.Errorf("verify-license: %d %s", a.status, a.body)
					}
					return
				}
				id := fmt.Sprintf("host-%d-%d", round, instances.Add(1))
				a := send(c, http.MethodPost, "/v1/activate-license", map[string]string{"key": key, "instance_id": id})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case refused(t, "activate-license", a):
					refusals.Add(1)
					rejected[key+"/"+id] = true
				case a.err == nil && a.status == http.StatusOK && strings.Contains(a.body, `"token"`):
					accepted[key+"/"+id]++
				case a.err == nil:
					t.Errorf("activate-license %s: %d %s", id, a.status, a.body)
				}
			}()
		}
		wg.Wait()
	}
	if refusals.Load() == 0 {
		t.Fatal("no request was refused: the bursts never passed the limit of 2, so this test checked nothing")
	}
	t.Logf("%d of %d requests refused; %d activations accepted", refusals.Load(), 4*116, len(accepted))

	// Every accepted activation exists exactly once; no refused one exists.
	a := newClient(t, s.URL, owner.Token)
	seats := map[string]int{}
	for _, key := range keys {
		var list struct {
			Activations []struct {
				InstanceID string `json:"instance_id"`
			} `json:"activations"`
		}
		if err := json.Unmarshal(a.Get("/v1/list-activations/"+key).Expect(t, 200).Body, &list); err != nil {
			t.Fatal(err)
		}
		for _, act := range list.Activations {
			seats[key+"/"+act.InstanceID]++
		}
	}
	for id, n := range accepted {
		if n != 1 || seats[id] != 1 {
			t.Errorf("activation %s: answered 200 %d times, %d seats; want one of each", id, n, seats[id])
		}
	}
	for id, n := range seats {
		if rejected[id] {
			t.Errorf("activation %s was refused with 503 but its seat exists (%d)", id, n)
		} else if accepted[id] == 0 {
			t.Errorf("seat %s exists without an accepted activation", id)
		}
	}

	// Every process is alive and answers.
	select {
	case p := <-s.Crashed():
		t.Fatalf("%s exited under the load: %v", p.Name, p.Err())
	default:
	}
	anon(t, s).Get("/readyz").Expect(t, 200)
	anon(t, s).Post("/v1/verify-license", map[string]string{"key": keys[0]}).Expect(t, 200)
	anon(t, s).Post("/v1/activate-license", map[string]string{"key": keys[1], "instance_id": "after-the-storm"}).Expect(t, 200)
}

func TestAFloodingTenantDoesNotCrowdOutAnother(t *testing.T) {
	s := overloadStackUncached(t)
	prodA, prodB := product("flood-a"), product("flood-b")
	aKeys, bKeys := twoLicenses(t, newTenant(t, s), prodA), twoLicenses(t, newTenant(t, s), prodB)
	// One answer for each key teaches the gateway whose it is.
	for _, k := range append(append([]string(nil), aKeys...), bKeys...) {
		anon(t, s).Post("/v1/verify-license", map[string]string{"key": k}).Expect(t, 200)
	}
	floodWhileAnotherChecks(t, s, "tenant A's verify-license", func(c *Client, w, i int) answer {
		return send(c, http.MethodPost, "/v1/verify-license", map[string]string{"key": aKeys[(w+i)%len(aKeys)]})
	}, "tenant B's verify-license", func(c *Client, i int) answer {
		return send(c, http.MethodPost, "/v1/verify-license", map[string]string{"key": bKeys[i%len(bKeys)]})
	})
}

// A verify-license, validate-license or check-update the gateway answers from its cache
// holds nothing behind the gateway, and refusing it would cost about what answering it
// does: it is answered whatever the limit, even for a tenant whose other requests fill the
// limit and are refused. The stack keeps answers a minute (LICENSE_CACHE_TTL) and without the
// liveness proof (LICENSE_CACHE_LIVE_TTL 0), so the checks' answers stay in the cache for
// the whole flood: a cache that keeps answers past LICENSE_CACHE_TTL is emptied whenever
// it hears a publisher it had not heard before, which a busy stack's first minute may
// bring.
func TestAnAnswerTheGatewayHoldsInMemoryIsNeverRefused(t *testing.T) {
	s := startOverloadStack(t, map[string]string{"LICENSE_CACHE_TTL": "1m", "LICENSE_CACHE_LIVE_TTL": "0"})
	prod := product("from-memory")
	keys := twoLicenses(t, newTenant(t, s), prod)
	cached, flooded := keys[0], keys[1]
	seat(t, anon(t, s), cached, "seat-1")
	// One answer for each key teaches the gateway whose it is (both the same tenant's).
	for _, k := range keys {
		anon(t, s).Post("/v1/verify-license", map[string]string{"key": k}).Expect(t, 200)
	}
	// The first key's answers are in the gateway's cache once a request for each is
	// counted as a hit (an answer read within 100 ms of the key's last change is not kept).
	var gateway *stack.Proc
	for _, p := range s.Procs() {
		if p.Name == "gateway" {
			gateway = p
		}
	}
	verifyCached := map[string]string{"key": cached}
	validateCached := map[string]string{"key": cached, "instance_id": "seat-1"}
	updateCached := check(cached, prod, "1.0.0") // no release: up to date
	for _, r := range []struct {
		path string
		body any
	}{{"/v1/verify-license", verifyCached}, {"/v1/validate-license", validateCached}, {"/v1/check-update", updateCached}} {
		hits := func() float64 {
			return sample(scrape(t, gateway), `keyhouse_gateway_answer_cache_total{result="hit",route="`+r.path+`"}`)
		}
		eventually(t, "the gateway answers "+r.path+" about the first key from its cache", func() bool {
			before := hits()
			anon(t, s).Post(r.path, r.body).Expect(t, 200)
			return hits() > before
		})
	}
	// Validations of instances never activated are not kept: each goes to activations
	// and holds a slot, and the tenant, alone in flight, is refused past the limit.
	floodWhileAnotherChecks(t, s, "the tenant's validate-license of instances never activated", func(c *Client, w, i int) answer {
		return send(c, http.MethodPost, "/v1/validate-license", map[string]string{"key": flooded, "instance_id": fmt.Sprintf("never-%d-%d", w, i)})
	}, "the same tenant's verify-license, validate-license and check-update the gateway's cache answers", func(c *Client, i int) answer {
		switch i % 3 {
		case 0:
			return send(c, http.MethodPost, "/v1/verify-license", verifyCached)
		case 1:
			return send(c, http.MethodPost, "/v1/validate-license", validateCached)
		}
		return send(c, http.MethodPost, "/v1/check-update", updateCached)
	})
	// What an operator watches says so.
	metrics := scrape(t, gateway)
	refusals := max(sample(metrics, `keyhouse_admission_refused_total{reason="limit"}`), 0) + max(sample(metrics, `keyhouse_admission_refused_total{reason="tenant_share"}`), 0)
	if refusals < 100 {
		t.Errorf("keyhouse_admission_refused_total counts %g refusals; the flood was refused at least 100 times", refusals)
	}
}

// Every answer about a license key names its tenant, not only verify-license's: a tenant
// whose apps only check for updates, flooding, does not crowd out one whose apps only
// validate their seats, although the gateway never saw either's keys verified.
func TestTenantsAreToldApartByTheirKeysOnEveryRoute(t *testing.T) {
	s := overloadStackUncached(t)
	prodA, prodB := product("updates-a"), product("seats-b")
	aKeys, bKeys := twoLicenses(t, newTenant(t, s), prodA), twoLicenses(t, newTenant(t, s), prodB)
	for i, k := range bKeys {
		seat(t, anon(t, s), k, fmt.Sprintf("host-%d", i))
	}
	// One answer for each key, on the routes each tenant's apps use, teaches the gateway
	// whose it is.
	for _, k := range aKeys {
		anon(t, s).Post("/v1/check-update", check(k, prodA, "1.0.0")).Expect(t, 200)
	}
	for i, k := range bKeys {
		if !validate(t, anon(t, s), k, fmt.Sprintf("host-%d", i)) {
			t.Fatalf("seat host-%d of %s is not valid", i, k)
		}
	}
	floodWhileAnotherChecks(t, s, "tenant A's check-update", func(c *Client, w, i int) answer {
		return send(c, http.MethodPost, "/v1/check-update", check(aKeys[(w+i)%len(aKeys)], prodA, "1.0.0"))
	}, "tenant B's validate-license", func(c *Client, i int) answer {
		return send(c, http.MethodPost, "/v1/validate-license", map[string]string{"key": bKeys[i%len(bKeys)], "instance_id": fmt.Sprintf("host-%d", i%len(bKeys))})
	})
}

// A credential counts for its tenant only once an answer proved it real: a flood of
// made-up API keys is one tenant however many keys it makes up, and does not crowd out a
// tenant's real one.
func TestMadeUpCredentialsDoNotCrowdOutARealOne(t *testing.T) {
	s := overloadStack(t)
	tenantB := newTenant(t, s)
	// One answer teaches the gateway whose B's key is.
	tenantB.Get("/v1/billing/status").Expect(t, 200)
	var made atomic.Int64
	floodWhileAnotherChecks(t, s, "made-up credentials' list-licenses", func(*Client, int, int) answer {
		c := newClient(t, s.URL, fmt.Sprintf("kh_made_up_%d", made.Add(1)))
		return send(c, http.MethodGet, "/v1/list-licenses", nil)
	}, "tenant B's list-licenses", func(*Client, int) answer {
		return send(tenantB, http.MethodGet, "/v1/list-licenses", nil)
	})
}

// twoLicenses issues two licenses of product to tenant and returns their keys.
func twoLicenses(t *testing.T, tenant *Client, product string) []string {
	t.Helper()
	var keys []string
	for i := range 2 {
		keys = append(keys, issueLicense(t, tenant, map[string]any{"tier": "pro", "product_id": product, "issued_to": fmt.Sprintf("user%d@example.com", i)}))
	}
	return keys
}

// floodWhileAnotherChecks runs flood from 16 addresses at once, back to back, until the
// limit is full (the flood refused a hundred times), then makes 100 checks one after
// another from one other address, and fails the test for each check not answered 200:
// the quiet tenant holds less than its share of the limit whenever the flood holds slots.
// Any 5xx other than the overload 503 fails it too.
func floodWhileAnotherChecks(t *testing.T, s *stack.Stack, floodName string, flood func(c *Client, worker, i int) answer, checkName string, checkOne func(c *Client, i int) answer) {
	t.Helper()
	stop := make(chan struct{})
	var refusedFlood, answeredFlood atomic.Int64
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := anon(t, s)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if i%250 == 249 {
					c = anon(t, s) // stays under every per-IP tier
				}
				a := flood(c, w, i)
				if refused(t, floodName, a) {
					refusedFlood.Add(1)
				} else if a.err == nil {
					answeredFlood.Add(1)
				}
			}
		}()
	}
	for deadline := time.Now().Add(time.Minute); refusedFlood.Load() < 100; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			close(stop)
			wg.Wait()
			t.Fatalf("%s was refused only %d times in a minute (%d answered): the flood never filled the limit", floodName, refusedFlood.Load(), answeredFlood.Load())
		}
	}
	c := anon(t, s)
	failed := 0
	for i := range 100 {
		if a := checkOne(c, i); a.err != nil || a.status != http.StatusOK {
			failed++
			if failed <= 3 {
				t.Errorf("%s %d during the flood: %d %s %v", checkName, i, a.status, a.body, a.err)
			}
		}
	}
	close(stop)
	wg.Wait()
	if failed > 0 {
		t.Errorf("%d of the 100 checks (%s) failed during the flood (%s)", failed, checkName, floodName)
	}
	t.Logf("%s: %d answered, %d refused; %s: %d of 100 answered", floodName, answeredFlood.Load(), refusedFlood.Load(), checkName, 100-failed)
}

// The services name keys' tenants and credentials' callers in their answers' metadata for
// the gateway alone: no REST answer carries them, nor any other gRPC metadata, whether
// the call was public, authenticated or refused.
func TestRESTAnswersCarryNoServiceMetadata(t *testing.T) {
	s := hosted(t)
	tenant := newTenant(t, s)
	prod := product("no-metadata")
	key := issueLicense(t, tenant, map[string]any{"tier": "pro", "product_id": prod, "issued_to": "meta@example.com"})
	seat(t, anon(t, s), key, "host-1")
	madeUp := newClient(t, s.URL, "kh_made_up_key")
	for _, a := range []struct {
		name string
		c    *Client
		do   func(c *Client) *Response
	}{
		{"verify-license", anon(t, s), func(c *Client) *Response { return c.Post("/v1/verify-license", map[string]string{"key": key}) }},
		{"validate-license", anon(t, s), func(c *Client) *Response {
			return c.Post("/v1/validate-license", map[string]string{"key": key, "instance_id": "host-1"})
		}},
		{"check-update", anon(t, s), func(c *Client) *Response { return c.Post("/v1/check-update", check(key, prod, "1.0.0")) }},
		{"list-licenses", tenant, func(c *Client) *Response { return c.Get("/v1/list-licenses") }},
		{"billing/status", tenant, func(c *Client) *Response { return c.Get("/v1/billing/status") }},
		{"list-licenses with a made-up key", madeUp, func(c *Client) *Response { return c.Get("/v1/list-licenses") }},
	} {
		resp := a.do(a.c)
		for name := range resp.Header {
			lower := strings.ToLower(name)
			if strings.HasPrefix(lower, "grpc-") || strings.HasPrefix(lower, "keyhouse-") {
				t.Errorf("%s (%d): answer header %s: %q", a.name, resp.Status, name, resp.Header.Values(name))
			}
		}
	}
}
