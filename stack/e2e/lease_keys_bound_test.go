package e2e

import (
	"slices"
	"sync"
	"testing"
)

// postAtOnce sends n POSTs of body(i) to path at the same moment, each from a client of
// its own (its own rate-limit budget) on bases[i % len(bases)], and returns the answers
// in order; a request that gets no answer fails the test.
func postAtOnce(t *testing.T, bases []string, token string, n int, path string, body func(i int) any) []*Response {
	t.Helper()
	answers := make([]*Response, n)
	var wg sync.WaitGroup
	for i := range n {
		c := newClient(t, bases[i%len(bases)], token)
		wg.Go(func() {
			r, err := c.Try("POST", path, body(i))
			if err != nil {
				t.Error(err)
				return
			}
			answers[i] = r
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return answers
}

// acceptedOrRefused counts the 200s among answers; every other answer must be the 400
// refusal, byte for byte.
func acceptedOrRefused(t *testing.T, answers []*Response, refusal string) int {
	t.Helper()
	accepted := 0
	for i, r := range answers {
		switch {
		case r.Status == 200:
			accepted++
		case r.Status == 400 && string(r.Body) == refusal:
		default:
			t.Errorf("request %d: %d %s", i, r.Status, r.Body)
		}
	}
	return accepted
}

// The refusal of a rotation past the bound on retiring lease keys (addendum §12).
const tooManyRetiringLeaseKeys = `{"error":"Too many lease keys still retiring (at most 10): rotate with retire_after_seconds 0, or after one retires"}`

// retiringKids are the kids a JWKS lists as retiring.
func retiringKids(set jwks) []string {
	var kids []string
	for _, k := range set.Keys {
		if k.Status == "retiring" {
			kids = append(kids, k.Kid)
		}
	}
	return kids
}

// Rotations sent at once through two gateways over two activations replicas keep at most
// 10 retiring keys: exactly 10 of them rotate, every other one is the 400 and changes
// nothing, none is a 500, and the public JWKS lists the active key and those 10. A
// rotation with retire_after_seconds 0 still goes through and drops no retiring key.
func TestLeaseKeyRotationsFromTwoReplicasKeepTheRetiringBound(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	tn, id := hostedTenant(t, s)
	second := secondGateway(t, s, "activations", "ACTIVATIONS_ADDR")
	if set := leaseKeys(t, anon(t, s), "?tenant_id="+id); len(set.Keys) != 1 {
		t.Fatalf("the first key: %+v", set)
	}

	const rotations = 24
	answers := postAtOnce(t, []string{s.URL, second}, tn.Token, rotations, "/v1/lease-keys/rotate",
		func(int) any { return map[string]any{"retire_after_seconds": 86400} })
	if rotated := acceptedOrRefused(t, answers, tooManyRetiringLeaseKeys); rotated != 10 {
		t.Fatalf("%d of %d concurrent rotations went through; want exactly 10", rotated, rotations)
	}
	before := leaseKeys(t, anon(t, s), "?tenant_id="+id)
	if len(before.Keys) != 11 || before.Keys[0].Status != "active" || len(retiringKids(before)) != 10 {
		t.Fatalf("JWKS after the rotations: %+v", before)
	}

	// Past the bound: refused, then the way out the message names.
	tn.Post("/v1/lease-keys/rotate", map[string]any{}).ExpectBody(t, tooManyRetiringLeaseKeys)
	out := tn.Post("/v1/lease-keys/rotate", map[string]any{"retire_after_seconds": 0}).Expect(t, 200).JSON(t)
	after := leaseKeys(t, anon(t, s), "?tenant_id="+id)
	if after.Keys[0].Kid != out["kid"] || !slices.Equal(retiringKids(after), retiringKids(before)) {
		t.Fatalf("after a rotation with 0: %+v (before %+v)", after, before)
	}
}

// A retiring key frees its place at its retire_at, and the next rotation goes through.
func TestLeaseKeyRotationFitsAgainOnceOneRetires(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	tn, id := hostedTenant(t, s)
	tn.Post("/v1/lease-keys/rotate", map[string]any{}).Expect(t, 200)
	tn.Post("/v1/lease-keys/rotate", map[string]any{"retire_after_seconds": 2}).Expect(t, 200)
	for range 9 {
		tn.Post("/v1/lease-keys/rotate", map[string]any{"retire_after_seconds": 86400}).Expect(t, 200)
	}
	// 10 retiring now, unless the short one retired already on a slow machine.
	if r := tn.Post("/v1/lease-keys/rotate", map[string]any{"retire_after_seconds": 86400}); r.Status == 200 {
		if n := len(retiringKids(leaseKeys(t, anon(t, s), "?tenant_id="+id))); n != 10 {
			t.Fatalf("a rotation went through with %d keys retiring", n)
		}
	} else {
		r.ExpectBody(t, tooManyRetiringLeaseKeys)
		eventually(t, "a rotation once the short-lived key retired", func() bool {
			return tn.Post("/v1/lease-keys/rotate", map[string]any{"retire_after_seconds": 86400}).Status == 200
		})
	}
	if n := len(retiringKids(leaseKeys(t, anon(t, s), "?tenant_id="+id))); n != 10 {
		t.Fatalf("%d keys retiring; want 10", n)
	}
}
