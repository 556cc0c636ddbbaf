package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
)

// Activations and usage through the REST edge: api.md's Activation resource, the routes
// activate-license … recent-activations, and their rows of the Errors table.

const (
	errCap        = "Activation limit exceeded for this license key"
	errNotFound   = "License key not found"
	errNotActive  = "License is not active"
	errHasExpired = "License has expired"
	errIsExpired  = "License is expired"
	errBadToken   = "Invalid activation token"
	errNoSeat     = "No activation found for that key and instance_id"
	errUsageRace  = "Usage was changed by a concurrent update; please retry"
)

var tokenFormat = regexp.MustCompile(`^act_[A-Za-z0-9_-]{43}$`)

// seat activates key for instance and returns the seat's token.
func seat(t testing.TB, c *Client, key, instance string) string {
	t.Helper()
	resp := c.Post("/v1/activate-license", map[string]string{"key": key, "instance_id": instance}).Expect(t, 200)
	tok, _ := resp.JSON(t)["token"].(string)
	if !tokenFormat.MatchString(tok) {
		t.Fatalf("activation of %s: no token in %s", instance, resp.Body)
	}
	resp.ExpectBody(t, `{"activated":true,"token":"`+tok+`"}`)
	return tok
}

func trackUsage(c *Client, key, token, metric string, extra ...any) *Response {
	body := map[string]any{"key": key, "token": token, "metric": metric}
	for i := 0; i+1 < len(extra); i += 2 {
		body[extra[i].(string)] = extra[i+1]
	}
	return c.Post("/v1/track-usage", body)
}

func validate(t testing.TB, c *Client, key, instance string) bool {
	t.Helper()
	resp := c.Post("/v1/validate-license", map[string]string{"key": key, "instance_id": instance}).Expect(t, 200)
	switch string(resp.Body) {
	case `{"valid":true}`:
		return true
	case `{"valid":false}`:
		return false
	}
	t.Fatalf("validate-license body %s", resp.Body)
	return false
}

// eventually polls cond until it holds; asynchronous effects (the deletion cascade over
// NATS) have no event to wait on through the REST edge. The deadline only bounds a hang.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never happened: %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func recentKeys(t testing.TB, c *Client, query string) []string {
	t.Helper()
	var rows []struct {
		Key        string `json:"key"`
		InstanceID string `json:"instance_id"`
	}
	resp := c.Get("/v1/recent-activations"+query).Expect(t, 200)
	if err := json.Unmarshal(resp.Body, &rows); err != nil {
		t.Fatalf("recent-activations is not an array: %s", resp.Body)
	}
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.Key + "/" + r.InstanceID
	}
	return out
}

func TestActivateLicenseReturnsTheTokenOnceThenAlreadyActivated(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a, c := admin(t, s), anon(t, s)
	key := issueLicense(t, a, lic("act-basic", "max_activations", 2))
	tok := seat(t, c, key, "laptop-1")
	// The repeat answers alreadyActivated and no token: the token cannot be fetched again.
	c.Post("/v1/activate-license", map[string]string{"key": key, "instance_id": "laptop-1"}).
		ExpectBody(t, `{"activated":true,"alreadyActivated":true}`)
	// A key typed back by a person is the same license and the same seat.
	typed := strings.ToLower(strings.ReplaceAll(key, "-", ""))
	c.Post("/v1/activate-license", map[string]string{"key": typed, "instance_id": "laptop-1"}).
		ExpectBody(t, `{"activated":true,"alreadyActivated":true}`)
	if other := seat(t, c, key, "laptop-2"); other == tok {
		t.Fatal("two seats share a token")
	}
	c.Post("/v1/activate-license", map[string]string{"key": key, "instance_id": "laptop-3"}).ExpectError(t, 403, errCap)
	// At the cap, an existing seat still answers its repeat.
	c.Post("/v1/activate-license", map[string]string{"key": key, "instance_id": "laptop-2"}).Expect(t, 200)

	// max_activations defaults to 1 at issuance; null is unlimited.
	one := issueLicense(t, a, lic("act-basic"))
	seat(t, c, one, "a")
	c.Post("/v1/activate-license", map[string]string{"key": one, "instance_id": "b"}).ExpectError(t, 403, errCap)
	unlimited := issueLicense(t, a, lic("act-basic", "max_activations", nil))
	for i := range 12 {
		seat(t, c, unlimited, fmt.Sprintf("node-%d", i))
	}
}

func TestActivateLicenseRefusals(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a, c := admin(t, s), anon(t, s)
	key := issueLicense(t, a, lic("act-refuse", "max_activations", 5))
	revokedKey := issueLicense(t, a, lic("act-refuse"))
	a.Post("/v1/revoke-license", map[string]any{"key": revokedKey, "revoked": true}).Expect(t, 200)
	expired := issueLicense(t, a, lic("act-refuse", "expires_at", "2020-01-01T00:00:00Z"))

	for _, tc := range []struct {
		name   string
		body   any
		status int
		msg    string
	}{
		{"unknown key", map[string]string{"key": "NOPE-NOPE", "instance_id": "x"}, 404, errNotFound},
		{"over-long key is unknown", map[string]string{"key": strings.Repeat("K", 5000), "instance_id": "x"}, 404, errNotFound},
		{"revoked", map[string]string{"key": revokedKey, "instance_id": "x"}, 403, errNotActive},
		{"expired", map[string]string{"key": expired, "instance_id": "x"}, 403, errHasExpired},
		{"missing key", map[string]string{"instance_id": "x"}, 400, "key is required"},
		{"missing instance_id", map[string]string{"key": key}, 400, "instance_id is required"},
		{"empty instance_id", map[string]string{"key": key, "instance_id": ""}, 400, "instance_id is required"},
		{"over-long instance_id", map[string]string{"key": key, "instance_id": strings.Repeat("i", 257)}, 400, "instance_id must be at most 256 characters"},
		{"instance_id not a string", map[string]any{"key": key, "instance_id": 7}, 400, "Invalid JSON body: invalid value for string field instance_id: 7"},
		{"NUL in instance_id", map[string]string{"key": key, "instance_id": "a\x00b"}, 400, "instance_id must not contain NUL characters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c.Post("/v1/activate-license", tc.body).ExpectError(t, tc.status, tc.msg)
		})
	}
	if resp := c.Post("/v1/activate-license", `{"key":`).Expect(t, 400); len(resp.Keys(t)) != 1 {
		t.Fatalf("malformed JSON: %s", resp.Body)
	}
	// None of the refusals took a seat.
	a.Get("/v1/list-activations/"+key).ExpectBody(t, `{"key":"`+key+`","activations":[]}`)
}

func TestDeactivateLicenseOnlyWithTheToken(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a, c := admin(t, s), anon(t, s)
	key := issueLicense(t, a, lic("deact"))
	other := issueLicense(t, a, lic("deact"))
	tok := seat(t, c, key, "host-a")
	otherTok := seat(t, c, other, "host-a")

	no := `{"deactivated":false}`
	// instance_id is a label, never a credential: as a token it matches nothing, and in
	// place of the token it is not accepted.
	c.Post("/v1/deactivate-license", map[string]string{"key": key, "token": "host-a"}).ExpectBody(t, no)
	c.Post("/v1/deactivate-license", map[string]string{"key": key, "instance_id": "host-a"}).ExpectError(t, 400, "token is required")
	c.Post("/v1/deactivate-license", map[string]string{"key": key, "token": otherTok}).ExpectBody(t, no)
	c.Post("/v1/deactivate-license", map[string]string{"key": "NOPE", "token": tok}).ExpectBody(t, no)
	c.Post("/v1/deactivate-license", map[string]string{"token": tok}).ExpectError(t, 400, "key is required")
	if !validate(t, c, key, "host-a") {
		t.Fatal("a refused deactivation freed the seat")
	}

	c.Post("/v1/deactivate-license", map[string]string{"key": key, "token": tok}).ExpectBody(t, `{"deactivated":true}`)
	c.Post("/v1/deactivate-license", map[string]string{"key": key, "token": tok}).ExpectBody(t, no)
	if validate(t, c, key, "host-a") {
		t.Fatal("the seat is still valid")
	}
	// The seat is free again under the cap of 1, and the license stays valid.
	seat(t, c, key, "host-b")
	anon(t, s).Post("/v1/verify-license", map[string]string{"key": key}).Expect(t, 200)

	// A revoked license's seats can still be given back.
	a.Post("/v1/revoke-license", map[string]any{"key": other, "revoked": true}).Expect(t, 200)
	c.Post("/v1/deactivate-license", map[string]string{"key": other, "token": otherTok}).ExpectBody(t, `{"deactivated":true}`)
}

func TestValidateLicenseAlwaysAnswers200WithValid(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a, c := admin(t, s), anon(t, s)
	key := issueLicense(t, a, lic("validate", "max_activations", 3))
	seat(t, c, key, "host-a")
	seat(t, c, key, "host-b")
	if !validate(t, c, key, "host-a") || !validate(t, c, strings.ToLower(key), "host-a") {
		t.Fatal("an active license with a seat is not valid")
	}
	if validate(t, c, key, "host-z") || validate(t, c, "NOPE", "host-a") {
		t.Fatal("valid without a seat or a license")
	}
	// Anything it cannot validate, malformed bodies included, is 200 {"valid":false}.
	for _, body := range []string{`not json`, `{}`, `[]`, `{"key":"` + key + `"}`, `{"key":5,"instance_id":"host-a"}`, `{"key":"` + key + `","instance_id":""}`, `{"key":"` + key + `",`} {
		c.Post("/v1/validate-license", body).Expect(t, 200).ExpectBody(t, `{"valid":false}`)
	}
	c.Do(http.MethodPost, "/v1/validate-license", nil).Expect(t, 200).ExpectBody(t, `{"valid":false}`)

	// Expired (terms changed after activation) and revoked licenses are not valid.
	a.Post("/v1/admin/update-license-terms", map[string]any{"key": key, "expires_at": "2021-01-01T00:00:00Z"}).Expect(t, 200)
	settles(t, "an expired license is not valid", func() bool { return !validate(t, c, key, "host-a") })
	a.Post("/v1/admin/update-license-terms", map[string]any{"key": key, "expires_at": nil}).Expect(t, 200)
	settles(t, "a license perpetual again is valid", func() bool { return validate(t, c, key, "host-a") })
	a.Post("/v1/revoke-license", map[string]any{"key": key, "revoked": true}).Expect(t, 200)
	settles(t, "a revoked license is not valid", func() bool { return !validate(t, c, key, "host-b") })
}

func TestTrackUsageAddsToTheRunningTotalUpToTheLimit(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a, c := admin(t, s), anon(t, s)
	key := issueLicense(t, a, lic("track", "limits", map[string]any{"api_calls_per_day": 10, "users": 3}, "max_activations", 2))
	tok := seat(t, c, key, "host-a")
	trackUsage(c, key, tok, "api_calls_per_day").ExpectBody(t, `{"ok":true,"metric":"api_calls_per_day","usage":1}`)
	trackUsage(c, key, tok, "api_calls_per_day", "increment", 4).ExpectBody(t, `{"ok":true,"metric":"api_calls_per_day","usage":5}`)
	// Landing exactly on the limit is allowed; one more is refused and not applied.
	trackUsage(c, key, tok, "api_calls_per_day", "increment", 5).ExpectBody(t, `{"ok":true,"metric":"api_calls_per_day","usage":10}`)
	trackUsage(c, key, tok, "api_calls_per_day").ExpectError(t, 403, "Usage limit exceeded for metric: api_calls_per_day")
	trackUsage(c, key, tok, "users", "increment", 4).ExpectError(t, 403, "Usage limit exceeded for metric: users")
	// Another seat of the same license meters the same totals.
	tok2 := seat(t, c, key, "host-b")
	trackUsage(c, key, tok2, "users", "increment", 3).ExpectBody(t, `{"ok":true,"metric":"users","usage":3}`)

	// The totals show wherever license views carry usage and activations_count.
	if u := a.Get("/v1/admin/license/" + key).JSON(t)["usage"]; fmt.Sprint(u) != "map[api_calls_per_day:10 users:3]" {
		t.Fatalf("admin/license usage %v", u)
	}
	terms := a.Post("/v1/admin/update-license-terms", map[string]any{"key": key, "max_activations": 5}).Expect(t, 200)
	terms.ExpectBody(t, `{"key":"`+key+`","expires_at":null,"limits":{"api_calls_per_day":10,"users":3},"max_activations":5,"usage":{"api_calls_per_day":10,"users":3},"status":"active","activations_count":2}`)
}

func TestTrackUsageRefusals(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a, c := admin(t, s), anon(t, s)
	limits := map[string]any{"users": 5}
	key := issueLicense(t, a, lic("track-refuse", "limits", limits))
	tok := seat(t, c, key, "host-a")
	otherKey := issueLicense(t, a, lic("track-refuse", "limits", limits))
	otherTok := seat(t, c, otherKey, "host-a")
	revokedKey := issueLicense(t, a, lic("track-refuse", "limits", limits))
	revokedTok := seat(t, c, revokedKey, "host-a")
	a.Post("/v1/revoke-license", map[string]any{"key": revokedKey, "revoked": true}).Expect(t, 200)
	expiredKey := issueLicense(t, a, lic("track-refuse", "limits", limits))
	expiredTok := seat(t, c, expiredKey, "host-a")
	a.Post("/v1/admin/update-license-terms", map[string]any{"key": expiredKey, "expires_at": "2021-01-01T00:00:00Z"}).Expect(t, 200)
	// Both licenses were looked up (and cached) by their activation; the changes reach
	// activations within the cache's bound.
	settles(t, "the revocation and the expiry reach activations", func() bool {
		r := c.Post("/v1/usage-report", map[string]string{"key": revokedKey}).JSON(t)
		e := c.Post("/v1/usage-report", map[string]string{"key": expiredKey}).JSON(t)
		return r["status"] == "revoked" && e["valid"] == false
	})

	for _, tc := range []struct {
		name   string
		body   any
		status int
		msg    string
	}{
		{"unknown key", map[string]any{"key": "NOPE", "token": tok, "metric": "users"}, 404, errNotFound},
		{"revoked", map[string]any{"key": revokedKey, "token": revokedTok, "metric": "users"}, 403, errNotActive},
		{"expired", map[string]any{"key": expiredKey, "token": expiredTok, "metric": "users"}, 403, errIsExpired},
		{"unknown token", map[string]any{"key": key, "token": "act_nope", "metric": "users"}, 403, errBadToken},
		{"instance_id is not a token", map[string]any{"key": key, "token": "host-a", "metric": "users"}, 403, errBadToken},
		{"another license's token", map[string]any{"key": key, "token": otherTok, "metric": "users"}, 403, errBadToken},
		{"not an allowlisted metric", map[string]any{"key": key, "token": tok, "metric": "storage"}, 403, "Metric not allowed: storage"},
		{"allowlisted but not in the limits", map[string]any{"key": key, "token": tok, "metric": "seats"}, 403, "Metric not allowed: seats"},
		{"missing metric", map[string]any{"key": key, "token": tok}, 400, "metric is required"},
		{"missing token", map[string]any{"key": key, "metric": "users", "instance_id": "host-a"}, 400, "token is required"},
		{"missing key", map[string]any{"token": tok, "metric": "users"}, 400, "key is required"},
		{"zero increment", map[string]any{"key": key, "token": tok, "metric": "users", "increment": 0}, 400, "increment must be a positive integer"},
		{"negative increment", map[string]any{"key": key, "token": tok, "metric": "users", "increment": -2}, 400, "increment must be a positive integer"},
		{"fractional increment", map[string]any{"key": key, "token": tok, "metric": "users", "increment": 1.5}, 400, "increment must be a positive integer"},
		{"increment not a number", map[string]any{"key": key, "token": tok, "metric": "users", "increment": true}, 400, "Invalid JSON body: invalid value for double field increment: true"},
		{"NUL in metric", map[string]any{"key": key, "token": tok, "metric": "us\x00ers"}, 400, "metric must not contain NUL characters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c.Post("/v1/track-usage", tc.body).ExpectError(t, tc.status, tc.msg)
		})
	}
	// One metric per call: a list is not a metric.
	resp := c.Post("/v1/track-usage", map[string]any{"key": key, "token": tok, "metric": []string{"users", "users"}}).Expect(t, 400)
	if msg := resp.JSON(t)["error"].(string); !strings.Contains(msg, "metric") || len(resp.Keys(t)) != 1 {
		t.Fatalf("a list of metrics: %s", resp.Body)
	}
	if m := c.Post("/v1/usage-report", map[string]string{"key": key}).JSON(t)["metrics"].([]any)[0].(map[string]any); m["used"] != 0.0 {
		t.Fatalf("a refused call was applied: %v", m)
	}
}

// trackUntilDecided sends one increment and retries it while the answer is the 503 of a
// lost race, as api.md tells clients to; it returns the final response and the retries.
// It runs on goroutines, so it leaves checking the answer to its caller.
func trackUntilDecided(c *Client, key, token, metric string, inc int) (*Response, int) {
	for retries := 0; ; retries++ {
		resp := trackUsage(c, key, token, metric, "increment", inc)
		if !resp.IsError(http.StatusServiceUnavailable, errUsageRace) {
			return resp, retries
		}
	}
}

// raceUsage sends n parallel increments of 1 through the clients in turn (each retrying its
// 503s) and checks invariant 3: the successes reported distinct totals, the rest were
// refused at the limit, and the final total is exactly the number of successes.
func raceUsage(t *testing.T, clients []*Client, key, token string, n, limit int) {
	t.Helper()
	type result struct {
		resp    *Response
		retries int
	}
	results := make([]result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, retries := trackUntilDecided(clients[i%len(clients)], key, token, "users", 1)
			results[i] = result{resp, retries}
		}()
	}
	wg.Wait()
	totals := map[float64]bool{}
	refused, retried := 0, 0
	for _, r := range results {
		retried += r.retries
		switch r.resp.Status {
		case 200:
			total := r.resp.JSON(t)["usage"].(float64)
			if totals[total] {
				t.Fatalf("total %v reported twice: an increment was lost", total)
			}
			totals[total] = true
		case 403:
			r.resp.ExpectError(t, 403, "Usage limit exceeded for metric: users")
			refused++
		default:
			t.Fatalf("status %d: %s", r.resp.Status, r.resp.Body)
		}
	}
	if len(totals) != limit || refused != n-limit {
		t.Fatalf("%d increments applied, %d refused; want %d and %d", len(totals), refused, limit, n-limit)
	}
	for i := 1; i <= limit; i++ {
		if !totals[float64(i)] {
			t.Fatalf("no increment reported total %d", i)
		}
	}
	report := clients[0].Post("/v1/usage-report", map[string]string{"key": key}).Expect(t, 200)
	report.ExpectBody(t, fmt.Sprintf(`{"valid":true,"status":"active","expires_at":null,"metrics":[{"metric":"users","used":%d,"limit":%d,"remaining":0,"exceeded":false}]}`, limit, limit))
	t.Logf("%d parallel increments: %d applied, %d refused at the limit, %d lost races retried", n, limit, refused, retried)
}

// Invariant 3 through the edge: 60 parallel increments of 1 against a limit of 50.
func TestTrackUsageInParallelLandsExactlyOnTheLimit(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a := admin(t, s)
	key := issueLicense(t, a, lic("track-race", "limits", map[string]any{"users": 50}))
	tok := seat(t, anon(t, s), key, "host-a")
	clients := make([]*Client, 6)
	for i := range clients {
		clients[i] = anon(t, s)
	}
	raceUsage(t, clients, key, tok, 60, 50)
}

// Invariant 2 for batched seat changes: two gateways, each batching the activations and
// deactivations that arrive together, over two activations replicas, on three licenses at
// once. No cap is passed, a seat's token deactivates it exactly once, every answer is
// one a lone call could have had, and the calls did go in batches.
func TestSeatChangesBatchedFromTwoGatewaysHoldEveryCap(t *testing.T) {
	t.Parallel()
	s := startStack(t, nil)
	t.Cleanup(s.Stop)
	a := admin(t, s)
	second := secondGateway(t, s, "activations", "ACTIVATIONS_ADDR")
	clients := []*Client{anon(t, s), newClient(t, second, ""), anon(t, s), newClient(t, second, "")}
	// 20 activate/deactivate calls per key per window: 2 seeded seats, 12 activations and
	// each seeded token deactivated twice make 18.
	const limit, activations = 5, 12
	type license struct {
		key    string
		tokens []string
	}
	var licenses []license
	for _, p := range []string{"seats-one", "seats-two", "seats-three"} {
		key := issueLicense(t, a, lic(p, "max_activations", limit))
		licenses = append(licenses, license{key, []string{seat(t, clients[0], key, "seed-1"), seat(t, clients[1], key, "seed-2")}})
	}
	type call struct {
		license, n int
		deactivate string
		resp       *Response
	}
	var calls []*call
	for l, lic := range licenses {
		for n := range activations {
			calls = append(calls, &call{license: l, n: n})
		}
		for _, tok := range append(lic.tokens, lic.tokens...) {
			calls = append(calls, &call{license: l, deactivate: tok})
		}
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, c := range calls {
		client := clients[(i*7)%len(clients)]
		key := licenses[c.license].key
		wg.Go(func() {
			<-start
			if c.deactivate != "" {
				c.resp = client.Post("/v1/deactivate-license", map[string]string{"key": key, "token": c.deactivate})
				return
			}
			c.resp = client.Post("/v1/activate-license", map[string]string{"key": key, "instance_id": fmt.Sprintf("node-%d", c.n)})
		})
	}
	close(start)
	wg.Wait()
	for l, lic := range licenses {
		created, removed := map[string]string{}, map[string]int{}
		for _, c := range calls {
			switch {
			case c.license != l:
			case c.deactivate != "":
				switch string(c.resp.Body) {
				case `{"deactivated":true}`:
					removed[c.deactivate]++
				case `{"deactivated":false}`:
				default:
					t.Fatalf("deactivate-license answered %d %s", c.resp.Status, c.resp.Body)
				}
			case c.resp.Status == 200:
				tok := fmt.Sprint(c.resp.JSON(t)["token"])
				if !tokenFormat.MatchString(tok) {
					t.Fatalf("activation without a token: %s", c.resp.Body)
				}
				created[fmt.Sprintf("node-%d", c.n)] = tok
			default:
				c.resp.ExpectError(t, 403, errCap)
			}
		}
		for _, tok := range lic.tokens {
			if removed[tok] != 1 {
				t.Errorf("license %d: a seeded token deactivated its seat %d times, want once", l, removed[tok])
			}
		}
		var list struct {
			Activations []struct {
				InstanceID string `json:"instance_id"`
			} `json:"activations"`
		}
		if err := json.Unmarshal(a.Get("/v1/list-activations/"+lic.key).Expect(t, 200).Body, &list); err != nil {
			t.Fatal(err)
		}
		// At least the three seats free from the start were taken; at most the cap.
		if len(created) < limit-2 || len(created) > limit || len(list.Activations) != len(created) {
			t.Errorf("license %d: %d activations answered 200, %d seats exist; the cap is %d", l, len(created), len(list.Activations), limit)
		}
		for _, seat := range list.Activations {
			if created[seat.InstanceID] == "" {
				t.Errorf("license %d: seat %s exists but its activation was refused", l, seat.InstanceID)
			}
		}
		for _, c := range clients[:2] {
			c.Post("/v1/validate-license", map[string]string{"key": lic.key, "instance_id": "seed-1"}).ExpectBody(t, `{"valid":false}`)
		}
	}
	items := grpcCalls(t, s, "activations", activationsv1.ActivationsService_ActivateLicense_FullMethodName, activationsv1.ActivationsService_DeactivateLicense_FullMethodName)
	batches := grpcCalls(t, s, "activations", activationsv1.ActivationsService_ChangeSeatsBatch_FullMethodName)
	if want := float64(len(calls) + 2*len(licenses)); items < want || batches >= items {
		t.Errorf("activations counted %v activate and deactivate calls in %v batches, want %v in fewer batches", items, batches, want)
	}
	t.Logf("%v seat changes in %v batches", items, batches)
}

// Seat changes whose license licensing cannot give (licensing down, the license never
// looked up by activations) fail with licensing's outage, every one of a batch as a lone
// call would, and nothing is changed; once licensing is back they go through.
func TestSeatChangesWhileLicensingIsDownAnswerItsOutage(t *testing.T) {
	t.Parallel()
	s := startStack(t, nil)
	t.Cleanup(s.Stop)
	a, c := admin(t, s), anon(t, s)
	key := issueLicense(t, a, lic("seats-licensing-down", "max_activations", 5))

	s.Service("licensing").Stop()
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Go(func() {
			if i%2 == 0 {
				c.Post("/v1/activate-license", map[string]string{"key": key, "instance_id": fmt.Sprintf("host-%d", i)}).
					ExpectError(t, 503, "Licensing service unavailable, retry")
				return
			}
			c.Post("/v1/deactivate-license", map[string]string{"key": key, "token": "act_unknown"}).
				ExpectError(t, 503, "Licensing service unavailable, retry")
		})
	}
	wg.Wait()

	if err := s.RestartService(t.Context(), "licensing"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		r := c.Post("/v1/activate-license", map[string]string{"key": key, "instance_id": "host-back"})
		if r.Status == 200 {
			break
		}
		r.ExpectError(t, 503, "Licensing service unavailable, retry")
		if time.Now().After(deadline) {
			t.Fatal("activate-license still failing 30 s after licensing came back")
		}
	}
	var list struct {
		Activations []struct {
			InstanceID string `json:"instance_id"`
		} `json:"activations"`
	}
	if err := json.Unmarshal(a.Get("/v1/list-activations/"+key).Expect(t, 200).Body, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Activations) != 1 || list.Activations[0].InstanceID != "host-back" {
		t.Fatalf("seats %+v, want only host-back: nothing changed during the outage", list.Activations)
	}
}

// Invariant 3 for batched increments: two gateways, each batching its requests, over two
// activations replicas, with the increments spread over two licenses and two metrics so
// that batches hold rows of several licenses in their own orders. Every counter lands
// exactly on its limit, each success with a total of its own, and no batch deadlocks.
func TestTrackUsageBatchesFromTwoGatewaysLandExactlyOnTheLimits(t *testing.T) {
	t.Parallel()
	s := startStack(t, nil)
	t.Cleanup(s.Stop)
	a := admin(t, s)
	second := secondGateway(t, s, "activations", "ACTIVATIONS_ADDR")
	clients := make([]*Client, 8)
	for i := range clients {
		clients[i] = anon(t, s)
		if i%2 == 1 {
			clients[i] = newClient(t, second, "")
		}
	}
	const perCounter, limit = 60, 40
	type counter struct{ key, token, metric string }
	var counters []counter
	for _, p := range []string{"batch-one", "batch-two"} {
		key := issueLicense(t, a, lic(p, "limits", map[string]any{"users": limit, "projects": limit}))
		tok := seat(t, clients[0], key, "host-a")
		counters = append(counters, counter{key, tok, "users"}, counter{key, tok, "projects"})
	}
	type result struct {
		c    counter
		resp *Response
	}
	results := make(chan result, perCounter*len(counters))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range perCounter * len(counters) {
		c := counters[(i*3+i/len(counters))%len(counters)]
		wg.Go(func() {
			<-start
			resp, _ := trackUntilDecided(clients[i%len(clients)], c.key, c.token, c.metric, 1)
			results <- result{c, resp}
		})
	}
	close(start)
	wg.Wait()
	close(results)
	totals := map[counter]map[float64]bool{}
	for r := range results {
		if totals[r.c] == nil {
			totals[r.c] = map[float64]bool{}
		}
		switch r.resp.Status {
		case 200:
			total := r.resp.JSON(t)["usage"].(float64)
			if totals[r.c][total] || total < 1 || total > limit {
				t.Fatalf("%v: total %v reported twice or out of range", r.c, total)
			}
			totals[r.c][total] = true
		case 403:
			r.resp.ExpectError(t, 403, "Usage limit exceeded for metric: "+r.c.metric)
		default:
			t.Fatalf("status %d: %s", r.resp.Status, r.resp.Body)
		}
	}
	for _, c := range counters {
		if len(totals[c]) != limit {
			t.Errorf("%v: %d increments applied, want exactly %d", c, len(totals[c]), limit)
		}
	}
	// Each increment is logged and counted as the TrackUsage call it stands for, and the
	// requests did go in batches: fewer batches than increments.
	items := grpcCalls(t, s, "activations", activationsv1.ActivationsService_TrackUsage_FullMethodName)
	batches := grpcCalls(t, s, "activations", activationsv1.ActivationsService_TrackUsageBatch_FullMethodName)
	if want := float64(perCounter * len(counters)); items < want || batches >= items {
		t.Errorf("activations counted %v track-usage calls in %v batches, want %v in fewer batches", items, batches, want)
	}
	t.Logf("%v increments in %v batches", items, batches)
	for _, c := range counters[:1] {
		a.Post("/v1/usage-report", map[string]string{"key": c.key}).Expect(t, 200).ExpectBody(t, fmt.Sprintf(
			`{"valid":true,"status":"active","expires_at":null,"metrics":[{"metric":"projects","used":%d,"limit":%d,"remaining":0,"exceeded":false},{"metric":"users","used":%d,"limit":%d,"remaining":0,"exceeded":false}]}`,
			limit, limit, limit, limit))
	}
}

// reset-usage racing track-usage: an increment that read the total before the reset must
// not write that old total back after it.
func TestResetUsageRacingTrackUsageNeverRestoresTheOldTotal(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a, c := admin(t, s), anon(t, s)
	const before, n = 500, 30
	key := issueLicense(t, a, lic("reset-race", "limits", map[string]any{"users": 10000}))
	tok := seat(t, c, key, "host-a")
	trackUsage(c, key, tok, "users", "increment", before).Expect(t, 200)

	responses := make([]*Response, n)
	var reset *Response
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			responses[i], _ = trackUntilDecided(c, key, tok, "users", 1)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-start
		for reset == nil || reset.Status == http.StatusServiceUnavailable {
			reset = a.Post("/v1/admin/reset-usage", map[string]string{"key": key, "metric": "users"})
		}
	}()
	close(start)
	wg.Wait()
	reset.Expect(t, 200)

	// Increments before the reset saw 501, 502, …; after it 1, 2, …. Without the reset
	// moving the version on, a stale write would leave a total above n.
	after := map[float64]bool{}
	totals := make([]float64, n)
	for i, r := range responses {
		totals[i] = r.Expect(t, 200).JSON(t)["usage"].(float64)
	}
	for _, total := range totals {
		if total <= n {
			after[total] = true
		} else if total <= before {
			t.Fatalf("total %v", total)
		}
	}
	used := a.Post("/v1/usage-report", map[string]string{"key": key}).JSON(t)["metrics"].([]any)[0].(map[string]any)["used"].(float64)
	if int(used) != len(after) {
		t.Fatalf("total %v after the reset, but %d increments landed after it (%v)", used, len(after), totals)
	}
	for i := 1; i <= len(after); i++ {
		if !after[float64(i)] {
			t.Fatalf("totals after the reset %v are not 1..%d", after, len(after))
		}
	}
}

func TestUsageReportIsALiveSnapshotOfEveryLimitKey(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a, c := admin(t, s), anon(t, s)
	key := issueLicense(t, a, lic("report", "limits", map[string]any{"users": 5, "projects": 2}, "expires_at", "2031-01-01T00:00:00Z"))
	tok := seat(t, c, key, "host-a")
	trackUsage(c, key, tok, "users", "increment", 2).Expect(t, 200)
	c.Post("/v1/usage-report", map[string]string{"key": key}).ExpectBody(t, `{"valid":true,"status":"active","expires_at":"2031-01-01T00:00:00Z","metrics":[`+
		`{"metric":"projects","used":0,"limit":2,"remaining":2,"exceeded":false},`+
		`{"metric":"users","used":2,"limit":5,"remaining":3,"exceeded":false}]}`)
	// A limit lowered below the total shows as exceeded with nothing remaining.
	a.Post("/v1/admin/update-license-terms", map[string]any{"key": key, "limits": map[string]any{"users": 1}}).Expect(t, 200)
	lowered := `{"valid":true,"status":"active","expires_at":"2031-01-01T00:00:00Z","metrics":[` +
		`{"metric":"users","used":2,"limit":1,"remaining":0,"exceeded":true}]}`
	settles(t, "the report shows the lowered limit", func() bool {
		return string(c.Post("/v1/usage-report", map[string]string{"key": key}).Body) == lowered
	})
	trackUsage(c, key, tok, "users").ExpectError(t, 403, "Usage limit exceeded for metric: users")

	a.Post("/v1/revoke-license", map[string]any{"key": key, "revoked": true}).Expect(t, 200)
	settles(t, "the report shows the revocation", func() bool {
		resp := c.Post("/v1/usage-report", map[string]string{"key": key}).Expect(t, 200).JSON(t)
		return resp["valid"] == false && resp["status"] == "revoked"
	})
	none := issueLicense(t, a, lic("report"))
	c.Post("/v1/usage-report", map[string]string{"key": none}).ExpectBody(t, `{"valid":true,"status":"active","expires_at":null,"metrics":[]}`)
	c.Post("/v1/usage-report", map[string]string{"key": "NOPE"}).ExpectError(t, 404, errNotFound)
	c.Post("/v1/usage-report", map[string]string{}).ExpectError(t, 400, "key is required")
}

func TestReissueTokenInvalidatesThePreviousToken(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a, c := admin(t, s), anon(t, s)
	key := issueLicense(t, a, lic("reissue", "limits", map[string]any{"users": 9}))
	old := seat(t, c, key, "host-a")
	resp := a.Post("/v1/admin/reissue-token", map[string]string{"key": key, "instance_id": "host-a"}).Expect(t, 200)
	tok, _ := resp.JSON(t)["token"].(string)
	resp.ExpectBody(t, `{"reissued":true,"token":"`+tok+`"}`)
	if !tokenFormat.MatchString(tok) || tok == old {
		t.Fatalf("new token %q", tok)
	}
	trackUsage(c, key, old, "users").ExpectError(t, 403, errBadToken)
	c.Post("/v1/deactivate-license", map[string]string{"key": key, "token": old}).ExpectBody(t, `{"deactivated":false}`)
	trackUsage(c, key, tok, "users").Expect(t, 200)
	// The seat itself is unchanged.
	if !validate(t, c, key, "host-a") {
		t.Fatal("reissue dropped the seat")
	}

	a.Post("/v1/admin/reissue-token", map[string]string{"key": key, "instance_id": "host-b"}).ExpectError(t, 404, errNoSeat)
	a.Post("/v1/admin/reissue-token", map[string]string{"key": "NOPE", "instance_id": "host-a"}).ExpectError(t, 404, errNotFound)
	a.Post("/v1/admin/reissue-token", map[string]string{"key": key}).ExpectError(t, 400, "instance_id is required")
	c.Post("/v1/admin/reissue-token", map[string]string{"key": key, "instance_id": "host-a"}).ExpectError(t, 403, "Unauthorized")
}

func TestDeactivateByInstanceIdFreesTheSeat(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a, c := admin(t, s), anon(t, s)
	key := issueLicense(t, a, lic("deact-admin", "limits", map[string]any{"users": 9}))
	tok := seat(t, c, key, "host-a")
	c.Post("/v1/admin/deactivate-by-instance-id", map[string]string{"key": key, "instance_id": "host-a"}).ExpectError(t, 403, "Unauthorized")
	a.Post("/v1/admin/deactivate-by-instance-id", map[string]string{"key": key, "instance_id": "host-a"}).ExpectBody(t, `{"deactivated":true}`)
	a.Post("/v1/admin/deactivate-by-instance-id", map[string]string{"key": key, "instance_id": "host-a"}).ExpectError(t, 404, errNoSeat)
	a.Post("/v1/admin/deactivate-by-instance-id", map[string]string{"key": "NOPE", "instance_id": "host-a"}).ExpectError(t, 404, errNotFound)
	a.Post("/v1/admin/deactivate-by-instance-id", map[string]string{"key": key}).ExpectError(t, 400, "instance_id is required")
	// The freed seat's token is dead, and the seat can be taken again.
	trackUsage(c, key, tok, "users").ExpectError(t, 403, errBadToken)
	seat(t, c, key, "host-b")
}

func TestResetUsageZeroesOneMetricOrAll(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a, c := admin(t, s), anon(t, s)
	key := issueLicense(t, a, lic("reset", "limits", map[string]any{"users": 9, "projects": 9}))
	tok := seat(t, c, key, "host-a")
	trackUsage(c, key, tok, "users", "increment", 4).Expect(t, 200)
	trackUsage(c, key, tok, "projects", "increment", 2).Expect(t, 200)
	a.Post("/v1/admin/reset-usage", map[string]string{"key": key, "metric": "users"}).
		ExpectBody(t, `{"key":"`+key+`","usage":{"projects":2,"users":0}}`)
	trackUsage(c, key, tok, "users").ExpectBody(t, `{"ok":true,"metric":"users","usage":1}`)
	a.Post("/v1/admin/reset-usage", map[string]string{"key": strings.ToLower(key)}).ExpectBody(t, `{"key":"`+key+`","usage":{}}`)
	if u := a.Get("/v1/admin/license/" + key).JSON(t)["usage"]; fmt.Sprint(u) != "map[]" {
		t.Fatalf("usage after reset %v", u)
	}
	a.Post("/v1/admin/reset-usage", map[string]string{"key": key, "metric": "storage"}).Expect(t, 400)
	a.Post("/v1/admin/reset-usage", map[string]string{"key": "NOPE"}).ExpectError(t, 404, errNotFound)
	c.Post("/v1/admin/reset-usage", map[string]string{"key": key}).ExpectError(t, 403, "Unauthorized")
}

func TestListActivationsAndRecentActivations(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	a, c := newTenant(t, s), anon(t, s)
	k1 := issueLicense(t, a, lic(product("list-act"), "max_activations", 5))
	k2 := issueLicense(t, a, lic(product("list-act"), "max_activations", 5))
	seat(t, c, k1, "srv-1")
	seat(t, c, k2, "srv-2")
	seat(t, c, k1, "srv-3")

	list := a.Get("/v1/list-activations/"+strings.ToLower(k1)).Expect(t, 200)
	if got := strings.Join(list.Keys(t), ","); got != "key,activations" {
		t.Fatalf("fields %s", got)
	}
	var body struct {
		Key         string            `json:"key"`
		Activations []json.RawMessage `json:"activations"`
	}
	if err := json.Unmarshal(list.Body, &body); err != nil || body.Key != k1 || len(body.Activations) != 2 {
		t.Fatalf("list-activations %s", list.Body)
	}
	for i, want := range []string{"srv-1", "srv-3"} { // oldest first
		row := &Response{Body: body.Activations[i]}
		if got := strings.Join(row.Keys(t), ","); got != "instance_id,activated_at" {
			t.Fatalf("activation fields %s", got)
		}
		m := row.JSON(t)
		at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(m["activated_at"]))
		if m["instance_id"] != want || err != nil || !strings.HasSuffix(m["activated_at"].(string), "Z") || time.Since(at) > time.Hour {
			t.Fatalf("activation %d: %v", i, m)
		}
	}
	a.Get("/v1/list-activations/NOPE").ExpectError(t, 404, errNotFound)
	c.Get("/v1/list-activations/"+k1).ExpectError(t, 403, "Unauthorized")
	c.Get("/v1/recent-activations").ExpectError(t, 403, "Unauthorized")

	if got := strings.Join(recentKeys(t, a, ""), " "); got != k1+"/srv-3 "+k2+"/srv-2 "+k1+"/srv-1" {
		t.Fatalf("recent-activations %s", got)
	}
	row := a.Get("/v1/recent-activations?limit=1").Expect(t, 200)
	var rows []json.RawMessage
	if err := json.Unmarshal(row.Body, &rows); err != nil || len(rows) != 1 {
		t.Fatalf("limit=1: %s", row.Body)
	}
	if got := strings.Join((&Response{Body: rows[0]}).Keys(t), ","); got != "key,instance_id,activated_at" {
		t.Fatalf("recent fields %s", got)
	}
	for _, q := range []string{"?limit=0", "?limit=1001", "?limit=-3"} {
		a.Get("/v1/recent-activations"+q).ExpectError(t, 400, "limit must be an integer between 1 and 1000")
	}
	a.Get("/v1/recent-activations?limit=abc").ExpectError(t, 400, "Invalid value for query parameter limit")
	// A tenant without seats sees an empty array, not another tenant's seats.
	newTenant(t, s).Get("/v1/recent-activations").ExpectBody(t, `[]`)
}

// Hosted: the admin routes treat another tenant's key as not found; the public routes
// find any tenant's key.
func TestActivationsAdminRoutesAreScopedToTheTenant(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	owner, stranger, c := newTenant(t, s), newTenant(t, s), anon(t, s)
	key := issueLicense(t, owner, lic(product("scoped"), "limits", map[string]any{"users": 5}))
	tok := seat(t, c, key, "host-a")
	trackUsage(c, key, tok, "users", "increment", 2).Expect(t, 200)

	stranger.Get("/v1/list-activations/"+key).ExpectError(t, 404, errNotFound)
	stranger.Post("/v1/admin/reissue-token", map[string]string{"key": key, "instance_id": "host-a"}).ExpectError(t, 404, errNotFound)
	stranger.Post("/v1/admin/deactivate-by-instance-id", map[string]string{"key": key, "instance_id": "host-a"}).ExpectError(t, 404, errNotFound)
	stranger.Post("/v1/admin/reset-usage", map[string]string{"key": key}).ExpectError(t, 404, errNotFound)
	stranger.Get("/v1/recent-activations").ExpectBody(t, `[]`)
	// Nothing the stranger tried changed anything.
	if !validate(t, c, key, "host-a") {
		t.Fatal("the seat is gone")
	}
	trackUsage(c, key, tok, "users").ExpectBody(t, `{"ok":true,"metric":"users","usage":3}`)
	// The admin key is not a tenant credential in hosted mode.
	admin(t, s).Get("/v1/list-activations/"+key).ExpectError(t, 403, "Unauthorized")
	owner.Get("/v1/list-activations/"+key).Expect(t, 200)
}

func TestLoweringMaxActivationsDeactivatesNothing(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a, c := admin(t, s), anon(t, s)
	key := issueLicense(t, a, lic("lower-cap", "max_activations", 3))
	toks := []string{seat(t, c, key, "a"), seat(t, c, key, "b"), seat(t, c, key, "c")}
	a.Post("/v1/admin/update-license-terms", map[string]any{"key": key, "max_activations": 1}).Expect(t, 200)
	for _, id := range []string{"a", "b", "c"} {
		if !validate(t, c, key, id) {
			t.Fatalf("seat %s lost to a lower cap", id)
		}
	}
	c.Post("/v1/activate-license", map[string]string{"key": key, "instance_id": "d"}).ExpectError(t, 403, errCap)
	// Seats given back do not make room until the count is under the new cap.
	c.Post("/v1/deactivate-license", map[string]string{"key": key, "token": toks[0]}).ExpectBody(t, `{"deactivated":true}`)
	c.Post("/v1/deactivate-license", map[string]string{"key": key, "token": toks[1]}).ExpectBody(t, `{"deactivated":true}`)
	c.Post("/v1/activate-license", map[string]string{"key": key, "instance_id": "d"}).ExpectError(t, 403, errCap)
	c.Post("/v1/deactivate-license", map[string]string{"key": key, "token": toks[2]}).ExpectBody(t, `{"deactivated":true}`)
	seat(t, c, key, "d")
}

// Deleting a license cascades to its seats and usage: nothing of it works afterwards, and
// the admin views forget it.
func TestDeletedLicenseLosesItsSeats(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	a, c := newTenant(t, s), anon(t, s)
	key := issueLicense(t, a, lic(product("cascade"), "limits", map[string]any{"users": 5}, "max_activations", 3))
	kept := issueLicense(t, a, lic(product("cascade"), "max_activations", 3))
	tok := seat(t, c, key, "host-a")
	seat(t, c, key, "host-b")
	seat(t, c, kept, "host-a")
	trackUsage(c, key, tok, "users").Expect(t, 200)

	a.Delete("/v1/delete-license", map[string]string{"key": key}).Expect(t, 200)
	checkForgotten(t, a, c, key, tok)
	eventually(t, "the purge removes the deleted license's seats", func() bool {
		return strings.Join(recentKeys(t, a, ""), " ") == kept+"/host-a"
	})
	if st := a.Get("/v1/admin/stats").JSON(t); st["totalActivations"] != 1.0 {
		t.Fatalf("stats after the purge %v", st)
	}
}

// checkForgotten: every route answers for a deleted license as for one never issued.
func checkForgotten(t *testing.T, a, c *Client, key, tok string) {
	t.Helper()
	settles(t, "the deletion reaches activations", func() bool { return !validate(t, c, key, "host-a") })
	c.Post("/v1/deactivate-license", map[string]string{"key": key, "token": tok}).ExpectBody(t, `{"deactivated":false}`)
	trackUsage(c, key, tok, "users").ExpectError(t, 404, errNotFound)
	c.Post("/v1/activate-license", map[string]string{"key": key, "instance_id": "host-c"}).ExpectError(t, 404, errNotFound)
	c.Post("/v1/usage-report", map[string]string{"key": key}).ExpectError(t, 404, errNotFound)
	a.Get("/v1/list-activations/"+key).ExpectError(t, 404, errNotFound)
	a.Post("/v1/admin/reissue-token", map[string]string{"key": key, "instance_id": "host-a"}).ExpectError(t, 404, errNotFound)
}

// Invariant 9: the cascade happens even when activations is down at the moment of the
// deletion; the durable consumer catches up when it comes back.
func TestDeletedLicenseLosesItsSeatsEvenIfActivationsWasDown(t *testing.T) {
	t.Parallel()
	s := startStack(t, nil)
	t.Cleanup(s.Stop)
	a, c := admin(t, s), anon(t, s)
	key := issueLicense(t, a, lic("cascade-down", "limits", map[string]any{"users": 5}, "max_activations", 3))
	kept := issueLicense(t, a, lic("cascade-down"))
	tok := seat(t, c, key, "host-a")
	seat(t, c, key, "host-b")
	seat(t, c, kept, "host-a")

	s.Service("activations").Stop()
	a.Delete("/v1/delete-license", map[string]string{"key": key}).Expect(t, 200)
	// Meanwhile validate-license still answers 200 {"valid": false}; the rest say retry.
	c.Post("/v1/validate-license", map[string]string{"key": kept, "instance_id": "host-a"}).ExpectBody(t, `{"valid":false}`)
	c.Post("/v1/activate-license", map[string]string{"key": kept, "instance_id": "host-z"}).ExpectError(t, 503, "Service unavailable, retry")
	c.Post("/v1/deactivate-license", map[string]string{"key": kept, "token": tok}).ExpectError(t, 503, "Service unavailable, retry")
	// A batch of track-usage that cannot reach activations fails each of its requests so.
	trackUsage(c, kept, "any-token", "users").ExpectError(t, 503, "Service unavailable, retry")

	if err := s.RestartService(t.Context(), "activations"); err != nil {
		t.Fatal(err)
	}
	checkForgotten(t, a, c, key, tok)
	eventually(t, "the purge after the restart", func() bool {
		return strings.Join(recentKeys(t, a, ""), " ") == kept+"/host-a"
	})
	if !validate(t, c, kept, "host-a") {
		t.Fatal("the other license lost its seat")
	}
}

// While the license.deleted event cannot reach activations (NATS is down, so the purge
// cannot run), the seats of a deleted license are still in activations' tables: admin/stats
// and recent-activations leave them out all the same, because a deleted license has no
// seats.
func TestDeletedLicenseSeatsLeaveTheTenantViewsBeforeThePurge(t *testing.T) {
	t.Parallel()
	s := startStack(t, nil)
	t.Cleanup(s.Stop)
	a, c := admin(t, s), anon(t, s)
	gone := issueLicense(t, a, lic("purge-pending", "max_activations", 3))
	kept := issueLicense(t, a, lic("purge-pending"))
	seat(t, c, gone, "host-a")
	seat(t, c, gone, "host-b")
	seat(t, c, kept, "host-a")
	if n := a.Get("/v1/admin/stats").JSON(t)["totalActivations"]; n != float64(3) {
		t.Fatalf("totalActivations before the delete: %v", n)
	}

	s.NATS.Stop()
	a.Delete("/v1/delete-license", map[string]string{"key": gone}).Expect(t, 200)
	stats := a.Get("/v1/admin/stats").JSON(t)
	if stats["totalLicenses"] != float64(1) || stats["totalActivations"] != float64(1) {
		t.Fatalf("stats right after the delete: %v", stats)
	}
	recent, _ := stats["recentActivations"].([]any)
	if len(recent) != 1 || recent[0].(map[string]any)["key"] != kept {
		t.Fatalf("stats' recent activations: %v", stats["recentActivations"])
	}
	if got := strings.Join(recentKeys(t, a, ""), " "); got != kept+"/host-a" {
		t.Fatalf("recent-activations right after the delete: %s", got)
	}
}

// Invariant 2 across replicas: parallel activations of distinct instance_ids through two
// gateways, each talking to its own activations process on the one database, create
// exactly max_activations seats. The same stack runs invariant 3 across the replicas.
func TestActivationCapHoldsAcrossTwoReplicas(t *testing.T) {
	t.Parallel()
	s := startStack(t, nil)
	t.Cleanup(s.Stop)
	second := secondGateway(t, s, "activations", "ACTIVATIONS_ADDR")
	a := admin(t, s)
	// The per-license-key tier allows 20 activations per key per window, so each round
	// uses a key of its own.
	const rounds, tries, limit = 4, 20, 7
	for round := range rounds {
		key := issueLicense(t, a, lic("replica-cap", "max_activations", limit))
		statuses := make([]*Response, tries)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range tries {
			base := s.URL
			if i%2 == 1 {
				base = second
			}
			c := newClient(t, base, "")
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				statuses[i] = c.Post("/v1/activate-license", map[string]string{"key": key, "instance_id": fmt.Sprintf("node-%d", i)})
			}()
		}
		close(start)
		wg.Wait()
		created := 0
		for _, r := range statuses {
			switch r.Status {
			case 200:
				if !tokenFormat.MatchString(fmt.Sprint(r.JSON(t)["token"])) {
					t.Fatalf("activation without a token: %s", r.Body)
				}
				created++
			default:
				r.ExpectError(t, 403, errCap)
			}
		}
		var list struct {
			Activations []any `json:"activations"`
		}
		if err := json.Unmarshal(a.Get("/v1/list-activations/"+key).Expect(t, 200).Body, &list); err != nil {
			t.Fatal(err)
		}
		if created != limit || len(list.Activations) != limit {
			t.Fatalf("round %d: %d activations answered 200, %d seats exist; the cap is %d", round, created, len(list.Activations), limit)
		}
	}

	key := issueLicense(t, a, lic("replica-usage", "limits", map[string]any{"users": 30}))
	tok := seat(t, anon(t, s), key, "host-a")
	clients := []*Client{anon(t, s), newClient(t, second, ""), anon(t, s), newClient(t, second, "")}
	raceUsage(t, clients, key, tok, 40, 30)
}
