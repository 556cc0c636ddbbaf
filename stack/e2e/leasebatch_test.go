package e2e

import (
	"encoding/json"
	"testing"

	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// The gateway sends lease requests to activations in batches (CreateLeaseBatch). Each
// item of a batch is answered as its own CreateLease call would answer it: the same
// refusal with the same text, or a lease with the same claims (but its own jti and
// times) that verifies with its tenant's keys; another tenant's seat, an unknown or
// revoked license get no lease, and one seat asked for twice in a batch gets both. A
// key rotation shows in the very next batch.
func TestLeaseBatchAnswersEachItemAsItsOwnCall(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	c := anon(t, s)
	tenantA, idA := hostedTenant(t, s)
	tenantB, idB := hostedTenant(t, s)
	floating, bound := product("batch-floating"), product("batch-bound")
	putPolicy(t, tenantA, floating, "*", map[string]any{"floating": true, "lease_ttl_seconds": 3600})
	putPolicy(t, tenantA, bound, "*", map[string]any{"fingerprint_match": "all"})
	keyF := issueLicense(t, tenantA, lic(floating, "max_activations", 5))
	tokF1, tokF2 := seat(t, c, keyF, "f1"), seat(t, c, keyF, "f2")
	keyB := issueLicense(t, tenantA, lic(bound))
	tokB := seat(t, c, keyB, "b")
	machine := map[string]string{"cpu": "c1", "disk": "d1"}
	lease(c, map[string]any{"key": keyB, "token": tokB, "components": machine}).Expect(t, 200)
	keyR := issueLicense(t, tenantA, lic(floating))
	tokR := seat(t, c, keyR, "r")
	tenantA.Post("/v1/revoke-license", map[string]any{"key": keyR, "revoked": true}).Expect(t, 200)
	keyX := issueLicense(t, tenantB, lic(product("batch-other")))
	tokX := seat(t, c, keyX, "x")

	conn, err := grpc.NewClient(s.Env("ACTIVATIONS_ADDR"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	leases := activationsv1.NewLeasesServiceClient(conn)
	ask := func(key, token string) *activationsv1.CreateLeaseRequest {
		return &activationsv1.CreateLeaseRequest{Key: key, Token: token}
	}
	withNonce := ask(keyF, tokF2)
	withNonce.Nonce = proto.String("n-1")
	matching, other := ask(keyB, tokB), ask(keyB, tokB)
	matching.Components, other.Components = machine, map[string]string{"cpu": "c2", "disk": "d1"}
	requests := []*activationsv1.CreateLeaseRequest{
		ask(keyF, tokF1), withNonce, ask(keyF, "act_nope"), ask(keyF, tokX), ask("AAAA-BBBB-CCCC-DDDD-EEEE-FFFF-GGGG", tokF1),
		ask(keyR, tokR), matching, other, ask(keyF, tokF1), ask("", tokF1), ask(keyX, tokX),
	}
	wantOK := []bool{true, true, false, false, false, false, true, false, true, false, true}
	batch := func() []*activationsv1.CreateLeaseBatchResult {
		t.Helper()
		items := make([]*activationsv1.CreateLeaseBatchItem, len(requests))
		for i, r := range requests {
			items[i] = &activationsv1.CreateLeaseBatchItem{Request: r, RequestId: "batch-test"}
		}
		resp, err := leases.CreateLeaseBatch(t.Context(), &activationsv1.CreateLeaseBatchRequest{Items: items})
		if err != nil || len(resp.GetResults()) != len(items) {
			t.Fatalf("batch: %d results for %d items, %v", len(resp.GetResults()), len(items), err)
		}
		return resp.GetResults()
	}
	keysA, keysB := leaseKeys(t, c, "?tenant_id="+idA), leaseKeys(t, c, "?tenant_id="+idB)
	keysOf := map[string]jwks{keyF: keysA, keyB: keysA, keyX: keysB}
	results := batch()
	for i, r := range requests {
		alone, aloneErr := leases.CreateLease(t.Context(), r)
		got := results[i]
		if got.GetError() != nil {
			if aloneErr == nil || got.GetError().GetCode() != int32(status.Code(aloneErr)) || got.GetError().GetMessage() != status.Convert(aloneErr).Message() {
				t.Errorf("item %d: batch refused %d %q, alone %v", i, got.GetError().GetCode(), got.GetError().GetMessage(), aloneErr)
			}
			if wantOK[i] {
				t.Errorf("item %d refused: %q", i, got.GetError().GetMessage())
			}
			continue
		}
		if aloneErr != nil || !wantOK[i] {
			t.Errorf("item %d: batch leased, alone %v", i, aloneErr)
			continue
		}
		if !sameClaims(t, got.GetResponse().GetLease(), alone.GetLease(), keysOf[r.GetKey()]) {
			t.Errorf("item %d: the batch's lease says other than the lone call's", i)
		}
	}

	// A rotation takes effect at the very next batch.
	rotated := tenantA.Post("/v1/lease-keys/rotate", map[string]any{"retire_after_seconds": 60}).Expect(t, 200).JSON(t)
	keysA = leaseKeys(t, c, "?tenant_id="+idA)
	header, _, err := verifyLease(batch()[0].GetResponse().GetLease(), keysA)
	if err != nil || header["kid"] != rotated["kid"] {
		t.Fatalf("the batch after a rotation signed with %v (%v), want %v", header["kid"], err, rotated["kid"])
	}
}

// sameClaims verifies two leases against set and says whether their claims agree but for
// those every lease has of its own (jti) or takes from the moment it is signed.
func sameClaims(t *testing.T, a, b string, set jwks) bool {
	t.Helper()
	var claims [2]map[string]any
	for i, l := range []string{a, b} {
		_, raw, err := verifyLease(l, set)
		if err != nil {
			t.Errorf("lease does not verify: %v", err)
			return false
		}
		if err := json.Unmarshal(raw, &claims[i]); err != nil {
			t.Fatal(err)
		}
		for _, own := range []string{"jti", "iat", "exp", "renew_after"} {
			delete(claims[i], own)
		}
	}
	x, _ := json.Marshal(claims[0])
	y, _ := json.Marshal(claims[1])
	if string(x) != string(y) {
		t.Logf("batch %s\nalone %s", x, y)
		return false
	}
	return true
}
