package e2e

import (
	"testing"
	"time"
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

// Two licensing replicas, each behind its own gateway: a write through one is answered by
// the other within a second (the event), and by the one that wrote at once.
func TestLicenseCache_AWriteThroughOneReplicaCountsOnTheOtherWithinASecond(t *testing.T) {
	t.Parallel()
	s := startStack(t, map[string]string{"LICENSE_CACHE_TTL": "1h"})
	t.Cleanup(s.Stop)
	ctx := t.Context()
	replica, err := s.StartServiceReplica(ctx, "licensing")
	if err != nil {
		t.Fatal(err)
	}
	second, err := s.StartGateway(ctx, 0, map[string]string{"LICENSING_ADDR": replica})
	if err != nil {
		t.Fatal(err)
	}
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
	waitForBody(t, other, verify, 403, verifyNotActive)

	a.Post("/v1/revoke-license", map[string]any{"key": key, "revoked": false}).Expect(t, 200)
	one.Post("/v1/verify-license", verify).Expect(t, 200)
	waitForStatus(t, other, verify, 200)

	a.Delete("/v1/delete-license", map[string]string{"key": key}).Expect(t, 200)
	one.Post("/v1/verify-license", verify).Expect(t, 404).ExpectBody(t, verifyNotFound)
	waitForBody(t, other, verify, 404, verifyNotFound)
}

// Expiry is decided at every read: a cached license turns expired on time, with no write
// and no event.
func TestLicenseCache_ExpiryIsNeverCached(t *testing.T) {
	t.Parallel()
	s := startStack(t, map[string]string{"LICENSE_CACHE_TTL": "1h"})
	t.Cleanup(s.Stop)
	a, c := admin(t, s), anon(t, s)
	expires := time.Now().Add(3 * time.Second).UTC().Truncate(time.Millisecond)
	key := issueLicense(t, a, lic("cache-expiry", "expires_at", expires.Format(time.RFC3339Nano)))
	verify := map[string]string{"key": key}
	c.Post("/v1/verify-license", verify).Expect(t, 200)
	time.Sleep(time.Until(expires))
	c.Post("/v1/verify-license", verify).Expect(t, 403).ExpectBody(t, verifyExpired)
}

// waitForStatus polls verify-license through c until it answers status, and fails when
// that takes longer than staleBound.
func waitForStatus(t *testing.T, c *Client, body any, status int) *Response {
	t.Helper()
	start := time.Now()
	for {
		resp := c.Post("/v1/verify-license", body)
		if resp.Status == status {
			t.Logf("the other replica answered %d after %v", status, time.Since(start))
			return resp
		}
		if time.Since(start) > staleBound {
			t.Fatalf("the other replica still answers %d %s after %v", resp.Status, resp.Body, staleBound)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func waitForBody(t *testing.T, c *Client, body any, status int, want string) {
	t.Helper()
	waitForStatus(t, c, body, status).ExpectBody(t, want)
}
