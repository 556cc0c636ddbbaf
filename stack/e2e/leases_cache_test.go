package e2e

import (
	"testing"
	"time"
)

// Activations serves a lease's license from its cache past LICENSE_CACHE_TTL (1 s) while
// the cache proves it heard every change event (LICENSE_CACHE_LIVE_TTL): a revocation or
// deletion still refuses the very next lease, however long ago the license was cached.
func TestLeaseOfALicenseCachedLongAgoSeesItsRevocation(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a, c := admin(t, s), anon(t, s)
	key := issueLicense(t, a, lic(product("lease-cached")))
	tok := seat(t, c, key, "box")
	lease(c, map[string]any{"key": key, "token": tok}).Expect(t, 200)
	// Past the TTL: the entry now answers only by the cache's liveness.
	time.Sleep(1500 * time.Millisecond)
	lease(c, map[string]any{"key": key, "token": tok}).Expect(t, 200)
	a.Post("/v1/revoke-license", map[string]any{"key": key, "revoked": true}).Expect(t, 200)
	lease(c, map[string]any{"key": key, "token": tok}).ExpectError(t, 403, errNotActive)
	a.Post("/v1/revoke-license", map[string]any{"key": key, "revoked": false}).Expect(t, 200)
	lease(c, map[string]any{"key": key, "token": tok}).Expect(t, 200)
	time.Sleep(1500 * time.Millisecond)
	lease(c, map[string]any{"key": key, "token": tok}).Expect(t, 200)
	a.Delete("/v1/delete-license", map[string]any{"key": key}).Expect(t, 200)
	lease(c, map[string]any{"key": key, "token": tok}).ExpectError(t, 404, errNotFound)
}
