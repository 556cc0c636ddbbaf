package e2e

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	releasesv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/releases/v1"
)

// The license cache (pkg/licensecache) and its staleness bound. The stack runs with a
// cache TTL of an hour, so only the change event can make a replica see a write in time;
// expiry must hold without any event at all.

const (
	verifyNotActive = `{"valid":false,"error":"License is not active"}`
	verifyNotFound  = `{"valid":false,"error":"License key not found"}`
	verifyExpired   = `{"valid":false,"error":"License has expired"}`
)

// staleBound is the staleness the cache promises across replicas.
const staleBound = time.Second

// Two licensing replicas, each behind its own gateway (each gateway caches verify-license's
// valid answers too): a write through one is answered by the other within a second (the
// event), and by the one that wrote at once (licensing's answer names the key).
func TestLicenseCache_AWriteThroughOneReplicaCountsOnTheOtherWithinASecond(t *testing.T) {
	t.Parallel()
	s := startStack(t, map[string]string{"LICENSE_CACHE_TTL": "1h"})
	t.Cleanup(s.Stop)
	second := secondGateway(t, s, "licensing", "LICENSING_ADDR")
	a, one, other := admin(t, s), anon(t, s), newClient(t, second, "")
	key := issueLicense(t, a, lic("cache-replicas"))
	verify := map[string]string{"key": key}
	// Both replicas have the license cached.
	for range 3 {
		one.Post("/v1/verify-license", verify).Expect(t, 200)
		other.Post("/v1/verify-license", verify).Expect(t, 200)
	}

	a.Post("/v1/revoke-license", map[string]any{"key": key, "revoked": true}).Expect(t, 200)
	one.Post("/v1/verify-license", verify).Expect(t, 403).ExpectBody(t, verifyNotActive)
	waitFor(t, other, "/v1/verify-license", verify, 403).ExpectBody(t, verifyNotActive)

	a.Post("/v1/revoke-license", map[string]any{"key": key, "revoked": false}).Expect(t, 200)
	one.Post("/v1/verify-license", verify).Expect(t, 200)
	waitFor(t, other, "/v1/verify-license", verify, 200)

	past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	a.Post("/v1/admin/update-license-terms", map[string]any{"key": key, "expires_at": past}).Expect(t, 200)
	one.Post("/v1/verify-license", verify).Expect(t, 403).ExpectBody(t, verifyExpired)
	waitFor(t, other, "/v1/verify-license", verify, 403).ExpectBody(t, verifyExpired)
	a.Post("/v1/admin/update-license-terms", map[string]any{"key": key, "expires_at": nil}).Expect(t, 200)
	one.Post("/v1/verify-license", verify).Expect(t, 200)
	waitFor(t, other, "/v1/verify-license", verify, 200)

	a.Delete("/v1/delete-license", map[string]string{"key": key}).Expect(t, 200)
	one.Post("/v1/verify-license", verify).Expect(t, 404).ExpectBody(t, verifyNotFound)
	waitFor(t, other, "/v1/verify-license", verify, 404).ExpectBody(t, verifyNotFound)
}

// Two activations replicas, each behind its own gateway (each gateway caches
// validate-license's valid answers): a seat removed through one stops validating there at
// once and on the other within a second; a seat taken counts at once everywhere (only
// valid answers are kept), and a revocation reaches both within a second.
func TestLicenseCache_ASeatRemovedThroughOneGatewayCountsOnTheOtherWithinASecond(t *testing.T) {
	t.Parallel()
	s := startStack(t, map[string]string{"LICENSE_CACHE_TTL": "1h"})
	t.Cleanup(s.Stop)
	second := secondGateway(t, s, "activations", "ACTIVATIONS_ADDR")
	a, one, other := admin(t, s), anon(t, s), newClient(t, second, "")
	key := issueLicense(t, a, lic("cache-seats", "max_activations", 5))
	tok := seat(t, one, key, "host-1")
	seat(t, one, key, "host-2")
	valid, invalid := `{"valid":true}`, `{"valid":false}`
	validate := func(instance string) map[string]string { return map[string]string{"key": key, "instance_id": instance} }
	for range 3 {
		for _, c := range []*Client{one, other} {
			c.Post("/v1/validate-license", validate("host-1")).ExpectBody(t, valid)
			c.Post("/v1/validate-license", validate("host-2")).ExpectBody(t, valid)
			c.Post("/v1/validate-license", validate("host-3")).ExpectBody(t, invalid)
		}
	}

	one.Post("/v1/deactivate-license", map[string]string{"key": key, "token": tok}).ExpectBody(t, `{"deactivated":true}`)
	one.Post("/v1/validate-license", validate("host-1")).ExpectBody(t, invalid)
	waitForBody(t, other, "/v1/validate-license", validate("host-1"), 200, invalid)
	one.Post("/v1/validate-license", validate("host-2")).ExpectBody(t, valid)

	a.Post("/v1/admin/deactivate-by-instance-id", validate("host-2")).ExpectBody(t, `{"deactivated":true}`)
	one.Post("/v1/validate-license", validate("host-2")).ExpectBody(t, invalid)
	waitForBody(t, other, "/v1/validate-license", validate("host-2"), 200, invalid)

	seat(t, one, key, "host-3")
	one.Post("/v1/validate-license", validate("host-3")).ExpectBody(t, valid)
	other.Post("/v1/validate-license", validate("host-3")).ExpectBody(t, valid)

	a.Post("/v1/revoke-license", map[string]any{"key": key, "revoked": true}).Expect(t, 200)
	waitForBody(t, one, "/v1/validate-license", validate("host-3"), 200, invalid)
	waitForBody(t, other, "/v1/validate-license", validate("host-3"), 200, invalid)
}

// Two releases replicas, each behind its own gateway (each gateway caches check-update's
// answers): a release registered or unpublished through one counts there at once and on
// the other within a second, and so does a revocation.
func TestLicenseCache_AReleaseChangeThroughOneGatewayCountsOnTheOtherWithinASecond(t *testing.T) {
	t.Parallel()
	s := startStack(t, map[string]string{"LICENSE_CACHE_TTL": "1h"})
	t.Cleanup(s.Stop)
	second := secondGateway(t, s, "releases", "RELEASES_ADDR")
	a, one, other := admin(t, s), anon(t, s), newClient(t, second, "")
	p := product("cache-releases")
	registerRelease(t, a, rel(p, "2.0.0"))
	key := issueLicense(t, a, lic(p))
	// A client already on 2.0.0: "no update" is an answer the gateways keep until an event
	// (one that offers a release ends with the second its manifest was signed in).
	update := check(key, p, "2.0.0")
	version := func(r *Response) string {
		release, _ := r.JSON(t)["release"].(map[string]any)
		v, _ := release["version"].(string)
		return v
	}
	offers := func(c *Client, want string) func() bool {
		return func() bool { return version(c.Post("/v1/check-update", update).Expect(t, 200)) == want }
	}
	for range 3 {
		for _, c := range []*Client{one, other} {
			if got := version(c.Post("/v1/check-update", update).Expect(t, 200)); got != "" {
				t.Fatalf("offered %q, want no update", got)
			}
		}
	}

	id := registerRelease(t, a, rel(p, "3.0.0"))
	if !offers(one, "3.0.0")() {
		t.Fatal("the gateway that registered 3.0.0 does not offer it at once")
	}
	settles(t, "the other gateway offers 3.0.0", offers(other, "3.0.0"))

	a.Post("/v1/unpublish-release", map[string]any{"id": id}).Expect(t, 200)
	if !offers(one, "")() {
		t.Fatal("the gateway that unpublished 3.0.0 still offers it")
	}
	settles(t, "the other gateway stops offering 3.0.0", offers(other, ""))

	a.Post("/v1/revoke-license", map[string]any{"key": key, "revoked": true}).Expect(t, 200)
	// releases reads the license from its own cache, which the event reaches in
	// milliseconds; the gateway that revoked names the key to it on its next call about it.
	one.Post("/v1/check-update", update).Expect(t, 403).ExpectBody(t, `{"error":"License is not active"}`)
	waitFor(t, other, "/v1/check-update", update, 403).ExpectBody(t, `{"error":"License is not active"}`)
}

// check-update's answers are kept by what they depend on: the class of a usable license
// (its tenant and product) and the question. A license the gateway has seen is answered
// with the answer another license of its product was given, and only such a license: a
// license of another product asking the same question gets its own answer, and a revoked
// one its refusal at once.
func TestLicenseCache_CheckUpdateAnswersALicenseWithItsProductsAnswer(t *testing.T) {
	t.Parallel()
	s := startStack(t, map[string]string{"LICENSE_CACHE_TTL": "1h"})
	t.Cleanup(s.Stop)
	a, c := admin(t, s), anon(t, s)
	app, tool := product("class-app"), product("class-tool")
	registerRelease(t, a, rel(app, "3.0.0"))
	first, second := issueLicense(t, a, lic(app)), issueLicense(t, a, lic(app))
	other := issueLicense(t, a, lic(tool))
	// The questions releases answered: each item of a batch counts as a CheckUpdate call.
	checks := func() float64 {
		return grpcCalls(t, s, "releases", releasesv1.ReleasesService_CheckUpdate_FullMethodName)
	}
	// Up to date: "no update" holds until a release changes (an offer only for its
	// second), so what the gateway keeps is all that is asked here.
	current := func(key string) map[string]any { return check(key, app, "3.0.0") }
	// Each license is asked about until the gateway answers it from memory: an answer
	// loaded around an event about its license (its issue) is not kept.
	for _, key := range []string{first, second, other} {
		settles(t, "the gateway keeps the answer about "+key[:9], func() bool {
			c.Post("/v1/check-update", current(key)).Expect(t, 200).ExpectBody(t, `{"update_available":false,"release":null}`)
			before := checks()
			c.Post("/v1/check-update", current(key)).Expect(t, 200)
			return checks() == before
		})
	}

	// A question asked about one license of the product is answered for the other from
	// the same answer: releases is asked once.
	newer := func(key string) map[string]any { return check(key, app, "3.1.0") }
	before := checks()
	c.Post("/v1/check-update", newer(first)).Expect(t, 200).ExpectBody(t, `{"update_available":false,"release":null}`)
	c.Post("/v1/check-update", newer(second)).Expect(t, 200).ExpectBody(t, `{"update_available":false,"release":null}`)
	if n := checks() - before; n != 1 {
		t.Fatalf("releases asked %v times for one question about two licenses of a product, want 1", n)
	}
	// The license of another product is asked about on its own, and answered as its own.
	c.Post("/v1/check-update", newer(other)).Expect(t, 200).ExpectBody(t, `{"update_available":false,"release":null}`)
	if n := checks() - before; n != 2 {
		t.Fatalf("releases asked %v times once a license of another product asked, want 2", n)
	}
	old := func(key string) map[string]any { return check(key, app, "1.0.0") }
	for range 3 {
		if got := c.Post("/v1/check-update", old(first)).Expect(t, 200).JSON(t)["update_available"]; got != true {
			t.Fatalf("a license of the product on 1.0.0: update_available %v, want true", got)
		}
		c.Post("/v1/check-update", old(other)).Expect(t, 200).ExpectBody(t, `{"update_available":false,"release":null}`)
	}

	// An offer is signed with the time of the response (the addendum), whichever license
	// of the product was asked about first in its second: each answer's issued_at falls
	// within its own request.
	for end := time.Now().Add(2500 * time.Millisecond); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		for _, key := range []string{first, second} {
			sent := time.Now().Truncate(time.Second)
			// From an address of its own: the loop must not spend the client's rate limit.
			release, _ := newClient(t, c.Base, "").Post("/v1/check-update", old(key)).Expect(t, 200).JSON(t)["release"].(map[string]any)
			answered := time.Now()
			issued, err := time.Parse(time.RFC3339, fmt.Sprint(release["issued_at"]))
			if err != nil || issued.Before(sent) || issued.After(answered) {
				t.Fatalf("an offer issued at %v (%v), asked at %v and answered at %v", release["issued_at"], err, sent, answered)
			}
		}
	}

	// A revoked license is refused at once, while the others of its product are still
	// answered from memory.
	a.Post("/v1/revoke-license", map[string]any{"key": second, "revoked": true}).Expect(t, 200)
	c.Post("/v1/check-update", newer(second)).Expect(t, 403).ExpectBody(t, `{"error":"License is not active"}`)
	before = checks()
	c.Post("/v1/check-update", newer(first)).Expect(t, 200).ExpectBody(t, `{"update_available":false,"release":null}`)
	if n := checks() - before; n != 0 {
		t.Fatalf("releases asked %v times about a license of the product after another's revocation, want 0", n)
	}
}

// An app verifies, validates or leases its license, then checks for updates. The gateway
// knows the license's class from the verify-license answer it holds, or from the one a
// valid validate-license answer or a lease named, so the first check-update about the
// license is answered from the answer its product's other licenses got, and a revocation
// through the gateway still refuses each at once.
func TestLicenseCache_CheckUpdateKnowsTheClassOfAVerifiedValidatedOrLeasedLicense(t *testing.T) {
	t.Parallel()
	s := startStack(t, map[string]string{"LICENSE_CACHE_TTL": "1h"})
	t.Cleanup(s.Stop)
	a, c := admin(t, s), anon(t, s)
	app := product("verified-class")
	registerRelease(t, a, rel(app, "3.0.0"))
	checked, verified, validated := issueLicense(t, a, lic(app)), issueLicense(t, a, lic(app)), issueLicense(t, a, lic(app))
	c.Post("/v1/activate-license", map[string]string{"key": validated, "instance_id": "host-1"}).Expect(t, 200)
	leased := issueLicense(t, a, lic(app))
	token := seat(t, c, leased, "host-1")
	// The activation's answer drops what the gateway knew of the license; what is loaded
	// within the settle window after it (100 ms, pkg/licensecache) is not kept.
	seated := time.Now()
	checks := func() float64 {
		return grpcCalls(t, s, "releases", releasesv1.ReleasesService_CheckUpdate_FullMethodName)
	}
	verifies := func() float64 {
		return grpcCalls(t, s, "licensing", licensingv1.LicensingService_VerifyLicense_FullMethodName)
	}
	current := func(key string) map[string]any { return check(key, app, "3.0.0") }
	settles(t, "the gateway keeps the product's answer", func() bool {
		c.Post("/v1/check-update", current(checked)).Expect(t, 200).ExpectBody(t, `{"update_available":false,"release":null}`)
		before := checks()
		c.Post("/v1/check-update", current(checked)).Expect(t, 200)
		return checks() == before
	})
	settles(t, "the gateway keeps verify-license's answer", func() bool {
		c.Post("/v1/verify-license", map[string]string{"key": verified}).Expect(t, 200)
		before := verifies()
		c.Post("/v1/verify-license", map[string]string{"key": verified}).Expect(t, 200)
		return verifies() == before
	})

	before := checks()
	c.Post("/v1/check-update", current(verified)).Expect(t, 200).ExpectBody(t, `{"update_available":false,"release":null}`)
	if n := checks() - before; n != 0 {
		t.Fatalf("releases asked %v times about a verified license of a product whose answer the gateway holds, want 0", n)
	}
	// validate-license's answer names the class only once it is valid and loaded with no
	// event about the license in flight (its activation): validated until it is kept.
	validate := map[string]string{"key": validated, "instance_id": "host-1"}
	settles(t, "the gateway keeps validate-license's answer", func() bool {
		c.Post("/v1/validate-license", validate).Expect(t, 200).ExpectBody(t, `{"valid":true}`)
		before := grpcCalls(t, s, "activations", activationsv1.ActivationsService_ValidateLicense_FullMethodName)
		c.Post("/v1/validate-license", validate).Expect(t, 200)
		return grpcCalls(t, s, "activations", activationsv1.ActivationsService_ValidateLicense_FullMethodName) == before
	})
	before = checks()
	c.Post("/v1/check-update", current(validated)).Expect(t, 200).ExpectBody(t, `{"update_available":false,"release":null}`)
	if n := checks() - before; n != 0 {
		t.Fatalf("releases asked %v times about a validated license of a product whose answer the gateway holds, want 0", n)
	}
	time.Sleep(time.Until(seated.Add(300 * time.Millisecond)))
	lease(c, map[string]any{"key": leased, "token": token}).Expect(t, 200)
	before = checks()
	c.Post("/v1/check-update", current(leased)).Expect(t, 200).ExpectBody(t, `{"update_available":false,"release":null}`)
	if n := checks() - before; n != 0 {
		t.Fatalf("releases asked %v times about a leased license of a product whose answer the gateway holds, want 0", n)
	}

	for _, key := range []string{verified, validated, leased} {
		a.Post("/v1/revoke-license", map[string]any{"key": key, "revoked": true}).Expect(t, 200)
		c.Post("/v1/check-update", current(key)).Expect(t, 403).ExpectBody(t, `{"error":"License is not active"}`)
	}
	c.Post("/v1/verify-license", map[string]string{"key": verified}).Expect(t, 403).ExpectBody(t, verifyNotActive)
	c.Post("/v1/check-update", current(checked)).Expect(t, 200).ExpectBody(t, `{"update_available":false,"release":null}`)
}

// The services that ask licensing for licenses (activations, releases) cache its answers;
// a write in licensing reaches their caches within the same bound.
func TestLicenseCache_CallersSeeAWriteWithinASecond(t *testing.T) {
	t.Parallel()
	s := startStack(t, map[string]string{"LICENSE_CACHE_TTL": "1h"})
	t.Cleanup(s.Stop)
	a, c := admin(t, s), anon(t, s)
	p := product("cache-callers")
	registerRelease(t, a, rel(p, "2.0.0"))
	key := issueLicense(t, a, lic(p))
	c.Post("/v1/activate-license", map[string]string{"key": key, "instance_id": "host-1"}).Expect(t, 200)
	validate := map[string]string{"key": key, "instance_id": "host-1"}
	update := check(key, p, "1.0.0")
	for range 3 {
		c.Post("/v1/validate-license", validate).Expect(t, 200).ExpectBody(t, `{"valid":true}`)
		c.Post("/v1/check-update", update).Expect(t, 200)
	}

	a.Post("/v1/revoke-license", map[string]any{"key": key, "revoked": true}).Expect(t, 200)
	waitForBody(t, c, "/v1/validate-license", validate, 200, `{"valid":false}`)
	waitFor(t, c, "/v1/check-update", update, 403).ExpectBody(t, `{"error":"License is not active"}`)

	a.Post("/v1/revoke-license", map[string]any{"key": key, "revoked": false}).Expect(t, 200)
	waitForBody(t, c, "/v1/validate-license", validate, 200, `{"valid":true}`)
	waitFor(t, c, "/v1/check-update", update, 200)

	// New terms count too: an expiry in the past.
	past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	a.Post("/v1/admin/update-license-terms", map[string]any{"key": key, "expires_at": past}).Expect(t, 200)
	waitForBody(t, c, "/v1/validate-license", validate, 200, `{"valid":false}`)
	waitFor(t, c, "/v1/check-update", update, 403).ExpectBody(t, `{"error":"License has expired"}`)
}

// Expiry is decided at every read: a license whose answers are cached (licensing's row,
// and the gateway's verify, validate and check-update answers) turns expired on time,
// with no write and no event.
func TestLicenseCache_ExpiryIsNeverCached(t *testing.T) {
	t.Parallel()
	s := startStack(t, map[string]string{"LICENSE_CACHE_TTL": "1h"})
	t.Cleanup(s.Stop)
	a, c := admin(t, s), anon(t, s)
	p := product("cache-expiry")
	registerRelease(t, a, rel(p, "2.0.0"))
	// The answers are cached before the expiry: an answer that came back before it must be
	// the license's. A machine too slow to make them within the window (one at a load of
	// 50 took over 3 s) tries again with a license whose window is twice as long.
	var verify, validate, current any
	var expires time.Time
	for window := 4 * time.Second; ; window *= 2 {
		expires = time.Now().Add(window).UTC().Truncate(time.Millisecond)
		key := issueLicense(t, a, lic(p, "expires_at", expires.Format(time.RFC3339Nano)))
		seat(t, c, key, "host-1")
		verify = map[string]string{"key": key}
		validate = map[string]string{"key": key, "instance_id": "host-1"}
		current = check(key, p, "2.0.0")
		// An answer that came back after the expiry may be the expiry's: the round ends.
		inTime := true
	rounds:
		for range 3 {
			for _, r := range []struct {
				path string
				body any
				want string // the whole body; "" for any
			}{
				{"/v1/verify-license", verify, ""},
				{"/v1/validate-license", validate, `{"valid":true}`},
				{"/v1/check-update", current, `{"update_available":false,"release":null}`},
			} {
				resp := c.Post(r.path, r.body)
				if inTime = time.Now().Before(expires); !inTime {
					break rounds
				}
				resp.Expect(t, 200)
				if r.want != "" {
					resp.ExpectBody(t, r.want)
				}
			}
		}
		if inTime {
			break
		}
		if window > time.Minute {
			t.Fatalf("the answers were not made within %v of the license's issue", window)
		}
		t.Logf("the answers took longer than the %v window; again with a longer one", window)
	}
	time.Sleep(time.Until(expires))
	c.Post("/v1/verify-license", verify).Expect(t, 403).ExpectBody(t, verifyExpired)
	c.Post("/v1/validate-license", validate).ExpectBody(t, `{"valid":false}`)
	c.Post("/v1/check-update", current).Expect(t, 403).ExpectBody(t, `{"error":"License has expired"}`)
}

// settles polls cond until it holds, for at most staleBound: a write through licensing
// reaches the license caches of activations and releases within that bound, so a test
// that reads through them right after a write waits for it like a client would.
//
// The bound is checked against when each poll was sent, not when its answer came: on a
// loaded machine an answer to a poll sent inside the bound may arrive after it, and only
// a stale answer to a poll sent after the bound breaks the promise.
func settles(t testing.TB, what string, cond func() bool) {
	t.Helper()
	start := time.Now()
	for {
		sent := time.Now()
		if cond() {
			return
		}
		if sent.Sub(start) > staleBound {
			t.Fatalf("not within %v: %s", staleBound, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitFor posts body to path through c until the answer has status, and fails when a
// request sent after staleBound (as settles counts it) is answered otherwise.
func waitFor(t *testing.T, c *Client, path string, body any, status int) *Response {
	t.Helper()
	start := time.Now()
	for {
		sent := time.Now()
		resp := c.Post(path, body)
		if resp.Status == status {
			t.Logf("%s answered %d after %v", path, status, time.Since(start))
			return resp
		}
		if sent.Sub(start) > staleBound {
			t.Fatalf("%s still answers %d %s after %v", path, resp.Status, resp.Body, staleBound)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitForBody is waitFor until the body is want too.
func waitForBody(t *testing.T, c *Client, path string, body any, status int, want string) {
	t.Helper()
	start := time.Now()
	for {
		sent := time.Now()
		resp := waitFor(t, c, path, body, status)
		if string(resp.Body) == want {
			return
		}
		if sent.Sub(start) > staleBound {
			t.Fatalf("%s still answers %s after %v, want %s", path, resp.Body, staleBound, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// verify-license-file promises a live database check (api.md), so it reads past the cache:
// a revoke that reached the database without any change event (another writer, a lost
// event) is refused at once, while verify-license may answer from the cache until the TTL.
func TestLicenseCache_VerifyLicenseFileChecksTheDatabaseLive(t *testing.T) {
	t.Parallel()
	s := startStack(t, map[string]string{"LICENSE_CACHE_TTL": "1h"})
	t.Cleanup(s.Stop)
	a, c := admin(t, s), anon(t, s)
	key := issueLicense(t, a, lic("cache-live-file"))
	var export map[string]any
	if err := json.Unmarshal(c.Get("/v1/export-license/"+key).Expect(t, 200).Body, &export); err != nil {
		t.Fatal(err)
	}
	c.Post("/v1/verify-license", map[string]string{"key": key}).Expect(t, 200)
	c.Post("/v1/verify-license-file", export).ExpectBody(t, `{"valid":true,"reason":null}`)

	if _, err := dbConn(t, s).Exec(t.Context(),
		`UPDATE licensing.licenses SET status = 'revoked', revoked_at = now() WHERE key = $1`, key); err != nil {
		t.Fatal(err)
	}
	c.Post("/v1/verify-license-file", export).Expect(t, 403).
		ExpectBody(t, `{"valid":false,"reason":"Revoked or not found","error":"Revoked or not found"}`)
	// The cached path still has the old row: that is what the test above bounds.
	c.Post("/v1/verify-license", map[string]string{"key": key}).Expect(t, 200)
}
