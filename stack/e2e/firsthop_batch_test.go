package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/pkg/licensecache"
	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	releasesv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/releases/v1"
	"github.com/keyhouse/keyhouse/stack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// dialService is a gRPC connection to the stack's service at addrVar (ACTIVATIONS_ADDR, …),
// as the gateway has one.
func dialService(t *testing.T, s *stack.Stack, addrVar string) *grpc.ClientConn {
	t.Helper()
	return dialAddr(t, s.Env(addrVar))
}

// dialAddr is a gRPC connection to the service process at addr (a replica's).
func dialAddr(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// aloneUntil is the end of validity an alone call names in its answer's metadata.
func aloneUntil(header metadata.MD) *timestamppb.Timestamp {
	if u := licensecache.ValidUntil(header); !u.IsZero() {
		return timestamppb.New(u)
	}
	return nil
}

// sameStatus fails unless a batch item's error is the status its alone call failed with
// (code, message, details), or both succeeded.
func sameStatus(t *testing.T, what string, batch *activationsv1.CallStatus, alone error) {
	t.Helper()
	if alone == nil {
		if batch != nil {
			t.Fatalf("%s: batch failed with %v, alone answered", what, batch)
		}
		return
	}
	want := status.Convert(alone).Proto()
	if batch == nil || batch.GetCode() != want.GetCode() || batch.GetMessage() != want.GetMessage() || len(batch.GetDetails()) != len(want.GetDetails()) {
		t.Fatalf("%s: batch %v, alone %v", what, batch, want)
	}
	for i := range want.GetDetails() {
		if !proto.Equal(batch.GetDetails()[i], want.GetDetails()[i]) {
			t.Fatalf("%s: detail %d: batch %v, alone %v", what, i, batch.GetDetails()[i], want.GetDetails()[i])
		}
	}
}

// Every item of a ValidateLicenseBatch gets what ValidateLicense gives it alone, on the
// real services: the same answer, and the same end of validity the gateway's cache keeps
// it to, for a mix of seated, unseated, unknown, revoked, expired and other tenants'
// licenses in one batch.
func TestValidateLicenseBatchAnswersEachItemAsValidateLicense(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	ownerA, ownerB, c := newTenant(t, s), newTenant(t, s), anon(t, s)
	keyA := issueLicense(t, ownerA, lic(product("vbatch-a"), "expires_at", "2031-05-01T12:00:00Z"))
	perpetual := issueLicense(t, ownerA, lic(product("vbatch-a2")))
	keyB := issueLicense(t, ownerB, lic(product("vbatch-b")))
	revoked := issueLicense(t, ownerA, lic(product("vbatch-r")))
	expired := issueLicense(t, ownerA, lic(product("vbatch-e"), "expires_at", "2021-06-01T00:00:00Z"))
	seat(t, c, keyA, "host-a")
	seat(t, c, perpetual, "host-a")
	seat(t, c, keyB, "host-b")
	seat(t, c, revoked, "host-a")
	ownerA.Post("/v1/revoke-license", map[string]any{"key": revoked, "revoked": true}).Expect(t, 200)
	settles(t, "the revocation reaches activations", func() bool { return !validate(t, c, revoked, "host-a") })

	reqs := []*activationsv1.ValidateLicenseRequest{
		{Key: keyA, InstanceId: "host-a"},
		{Key: keyA, InstanceId: "host-z"},
		{Key: keyB, InstanceId: "host-b"}, // another tenant's license in the same batch
		{Key: keyB, InstanceId: "host-a"}, // an instance seated on another tenant's license
		{Key: revoked, InstanceId: "host-a"},
		{Key: expired, InstanceId: "host-a"},
		{Key: "NOPE-NOPE-NOPE", InstanceId: "host-a"},
		{Key: "", InstanceId: "host-a"},
		{Key: keyA, InstanceId: ""},
		{Key: strings.ToLower(strings.ReplaceAll(keyA, "-", "")), InstanceId: "host-a"}, // typed by hand
		{Key: perpetual, InstanceId: "host-a"},
		{Key: keyA, InstanceId: "host-a"}, // twice in one batch
	}
	client := activationsv1.NewActivationsServiceClient(dialService(t, s, "ACTIVATIONS_ADDR"))
	items := make([]*activationsv1.ValidateLicenseBatchItem, len(reqs))
	for i, r := range reqs {
		items[i] = &activationsv1.ValidateLicenseBatchItem{Request: r, RequestId: fmt.Sprintf("vbatch-%d", i)}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	resp, err := client.ValidateLicenseBatch(ctx, &activationsv1.ValidateLicenseBatchRequest{Items: items})
	if err != nil || len(resp.GetResults()) != len(reqs) {
		t.Fatalf("%d results for %d items: %v", len(resp.GetResults()), len(reqs), err)
	}
	valid := 0
	for i, r := range reqs {
		var header metadata.MD
		alone, err := client.ValidateLicense(ctx, r, grpc.Header(&header))
		got := resp.GetResults()[i]
		what := fmt.Sprintf("item %d (%q, %q)", i, r.GetKey(), r.GetInstanceId())
		sameStatus(t, what, got.GetError(), err)
		if err != nil {
			continue
		}
		if !proto.Equal(got.GetResponse(), alone) {
			t.Fatalf("%s: batch %v, alone %v", what, got.GetResponse(), alone)
		}
		if want := aloneUntil(header); alone.GetValid() && !proto.Equal(got.GetValidUntil(), want) {
			t.Fatalf("%s: batch valid until %v, alone %v", what, got.GetValidUntil(), want)
		}
		if alone.GetValid() {
			valid++
		}
	}
	if valid != 5 {
		t.Fatalf("%d valid answers, want 5 (A's seat twice and typed by hand, B's seat, the perpetual seat)", valid)
	}
	if u := resp.GetResults()[0].GetValidUntil(); u == nil || !u.AsTime().Equal(time.Date(2031, 5, 1, 12, 0, 0, 0, time.UTC)) {
		t.Fatalf("A's seat valid until %v, want its license's expiry", u)
	}
}

// Every item of a CheckUpdateBatch gets what CheckUpdate gives it alone: the same
// manifest (signed in the same second), refusal or "no update", and the same end of
// validity, across tenants and products in one batch.
func TestCheckUpdateBatchAnswersEachItemAsCheckUpdate(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	ownerA, ownerB := newTenant(t, s), newTenant(t, s)
	pA, pB := product("ubatch-a"), product("ubatch-b")
	registerRelease(t, ownerA, rel(pA, "2.0.0"))
	registerRelease(t, ownerA, rel(pA, "2.1.0", "platform", "linux-x64"))
	registerRelease(t, ownerB, rel(pB, "5.0.0"))
	keyA := issueLicense(t, ownerA, lic(pA, "expires_at", "2031-05-01T12:00:00Z"))
	keyB := issueLicense(t, ownerB, lic(pB))
	revoked := issueLicense(t, ownerA, lic(pA))
	expired := issueLicense(t, ownerA, lic(pA, "expires_at", "2021-06-01T00:00:00Z"))
	ownerA.Post("/v1/revoke-license", map[string]any{"key": revoked, "revoked": true}).Expect(t, 200)

	reqs := []*releasesv1.CheckUpdateRequest{
		{Key: keyA, ProductId: pA, CurrentVersion: "1.0.0"},
		{Key: keyA, ProductId: pA, CurrentVersion: "1.0.0", Platform: "linux-x64"},
		{Key: keyA, ProductId: pA, CurrentVersion: "2.0.0"},
		{Key: keyA, ProductId: pA, CurrentVersion: "1.0.0", Channel: "beta"},
		{Key: keyA, ProductId: pB, CurrentVersion: "1.0.0"}, // another tenant's product
		{Key: keyB, ProductId: pB, CurrentVersion: "1.0.0"}, // another tenant's license
		{Key: keyB, ProductId: pA, CurrentVersion: "1.0.0"},
		{Key: revoked, ProductId: pA, CurrentVersion: "1.0.0"},
		{Key: expired, ProductId: pA, CurrentVersion: "1.0.0"},
		{Key: "NOPE-NOPE-NOPE", ProductId: pA, CurrentVersion: "1.0.0"},
		{Key: "", ProductId: pA, CurrentVersion: "1.0.0"},
		{Key: keyA, CurrentVersion: "1.0.0"},
		{Key: keyA, ProductId: pA},
		{Key: strings.ToLower(keyA), ProductId: " " + strings.ToUpper(pA), CurrentVersion: "1.0.0"},
	}
	client := releasesv1.NewReleasesServiceClient(dialService(t, s, "RELEASES_ADDR"))
	items := make([]*releasesv1.CheckUpdateBatchItem, len(reqs))
	for i, r := range reqs {
		items[i] = &releasesv1.CheckUpdateBatchItem{Request: r, RequestId: fmt.Sprintf("ubatch-%d", i)}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	settles(t, "the revocation reaches releases", func() bool {
		_, err := client.CheckUpdate(ctx, reqs[7])
		return err != nil
	})
	// A manifest is signed with the second it is issued in: the batch and the alone
	// answers are compared whole when both fell in the same second, and but for the
	// signature and issued_at when a loaded machine put them in different seconds (a
	// machine at load 50 did in five attempts in a row).
	for attempt := 1; ; attempt++ {
		resp, err := client.CheckUpdateBatch(ctx, &releasesv1.CheckUpdateBatchRequest{Items: items})
		if err != nil || len(resp.GetResults()) != len(reqs) {
			t.Fatalf("%d results for %d items: %v", len(resp.GetResults()), len(reqs), err)
		}
		sameSecond, offers, refusals := true, 0, 0
		for i, r := range reqs {
			var header metadata.MD
			alone, err := client.CheckUpdate(ctx, r, grpc.Header(&header))
			got := resp.GetResults()[i]
			what := fmt.Sprintf("item %d (%v)", i, r)
			sameStatus(t, what, got.GetError(), err)
			if err != nil {
				refusals++
				continue
			}
			batched := got.GetResponse()
			if !batched.GetRelease().GetIssuedAt().AsTime().Equal(alone.GetRelease().GetIssuedAt().AsTime()) {
				sameSecond = false
				batched, alone = withoutSignature(batched), withoutSignature(alone)
			}
			if !proto.Equal(batched, alone) {
				t.Fatalf("%s: batch %v, alone %v", what, batched, alone)
			}
			if want := aloneUntil(header); !proto.Equal(got.GetValidUntil(), want) {
				t.Fatalf("%s: batch valid until %v, alone %v", what, got.GetValidUntil(), want)
			}
			if alone.GetUpdateAvailable() {
				offers++
			}
		}
		if !sameSecond && attempt < 5 {
			continue
		}
		if offers != 4 || refusals != 6 {
			t.Fatalf("%d offers (want A's two, B's, A's typed by hand), %d refusals (want revoked, expired, unknown, empty key, two missing fields)", offers, refusals)
		}
		if u := resp.GetResults()[0].GetValidUntil(); u == nil || !u.AsTime().Equal(time.Date(2031, 5, 1, 12, 0, 0, 0, time.UTC)) {
			t.Fatalf("A's answer valid until %v, want its license's expiry", u)
		}
		// The answer's class (what a cache may answer other licenses by): one for every
		// question about A's license, another for B's, none with a refusal.
		classA, classB := resp.GetResults()[0].GetUpdateClass(), resp.GetResults()[5].GetUpdateClass()
		if classA == "" || classB == "" || classA == classB {
			t.Fatalf("classes of A's and B's licenses %q and %q, want two different ones", classA, classB)
		}
		for i, r := range resp.GetResults() {
			want := classA
			switch {
			case r.GetError() != nil:
				want = ""
			case reqs[i].GetKey() == keyB:
				want = classB
			}
			if r.GetUpdateClass() != want {
				t.Fatalf("item %d (%v): class %q, want %q", i, reqs[i], r.GetUpdateClass(), want)
			}
		}
		return
	}
}

// Many clients at once through the gateway: validate-license and check-update misses
// go out in batches, and each client still gets exactly its own answer.
func TestValidateAndCheckUpdateInParallelAnswerEachClient(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a := admin(t, s)
	p := product("parallel-first-hop")
	registerRelease(t, a, rel(p, "3.0.0"))
	const licenses = 24
	keys := make([]string, licenses)
	for i := range keys {
		keys[i] = issueLicense(t, a, lic(p))
		seat(t, anon(t, s), keys[i], "seated")
	}
	batchesBefore := grpcCalls(t, s, "activations", activationsv1.ActivationsService_ValidateLicenseBatch_FullMethodName) +
		grpcCalls(t, s, "releases", releasesv1.ReleasesService_CheckUpdateBatch_FullMethodName)
	clients := make([]*Client, 8)
	for i := range clients {
		clients[i] = anon(t, s)
	}
	var wg sync.WaitGroup
	for i := range 8 * licenses {
		c, key := clients[i%len(clients)], keys[i%licenses]
		wg.Go(func() {
			switch i % 4 {
			case 0:
				c.Post("/v1/validate-license", map[string]string{"key": key, "instance_id": "seated"}).ExpectBody(t, `{"valid":true}`)
			case 1:
				c.Post("/v1/validate-license", map[string]string{"key": key, "instance_id": fmt.Sprintf("never-seated-%d", i)}).ExpectBody(t, `{"valid":false}`)
			case 2:
				var out struct {
					UpdateAvailable bool `json:"update_available"`
					Release         struct {
						Version   string `json:"version"`
						ProductID string `json:"product_id"`
					} `json:"release"`
				}
				body := c.Post("/v1/check-update", check(key, p, fmt.Sprintf("1.%d.0", i))).Expect(t, 200).Body
				if err := json.Unmarshal(body, &out); err != nil || !out.UpdateAvailable || out.Release.Version != "3.0.0" || out.Release.ProductID != p {
					t.Errorf("check-update %s: %s", key, body)
				}
			case 3:
				c.Post("/v1/check-update", check(key, p, "3.0.0")).ExpectBody(t, noUpdate)
			}
		})
	}
	wg.Wait()
	if after := grpcCalls(t, s, "activations", activationsv1.ActivationsService_ValidateLicenseBatch_FullMethodName) +
		grpcCalls(t, s, "releases", releasesv1.ReleasesService_CheckUpdateBatch_FullMethodName); after <= batchesBefore {
		t.Fatalf("no batch call reached activations or releases (%v before, %v after)", batchesBefore, after)
	}
}

// withoutSignature is answer without what changes with the second it was signed in (the
// manifest's issued_at and signature).
func withoutSignature(answer *releasesv1.CheckUpdateResponse) *releasesv1.CheckUpdateResponse {
	answer = proto.Clone(answer).(*releasesv1.CheckUpdateResponse)
	if m := answer.GetRelease(); m != nil {
		m.IssuedAt, m.Signature = nil, ""
	}
	return answer
}
