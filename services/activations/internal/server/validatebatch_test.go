package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/license"
	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	"github.com/keyhouse/keyhouse/services/activations/internal/store"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

func (f *fakeStore) LiveSeats(ctx context.Context, seats []store.SeatKey) ([]store.LiveSeat, error) {
	out := make([]store.LiveSeat, len(seats))
	for i, k := range seats {
		ok, ends, err := f.HasSeat(ctx, k.Tenant, k.Key, k.Instance)
		if err != nil {
			return nil, err
		}
		out[i] = store.LiveSeat{Present: ok, LeaseEnds: ends}
	}
	return out, nil
}

func validateBatch(t *testing.T, s *Server, reqs []*activationsv1.ValidateLicenseRequest) []*activationsv1.ValidateLicenseBatchResult {
	t.Helper()
	items := make([]*activationsv1.ValidateLicenseBatchItem, len(reqs))
	for i, r := range reqs {
		items[i] = &activationsv1.ValidateLicenseBatchItem{Request: r, RequestId: "req"}
	}
	resp, err := s.ValidateLicenseBatch(context.Background(), &activationsv1.ValidateLicenseBatchRequest{Items: items})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetResults()) != len(reqs) {
		t.Fatalf("%d results for %d items", len(resp.GetResults()), len(reqs))
	}
	return resp.GetResults()
}

// Each item of a batch gets what ValidateLicense gives it alone: valid only for a usable
// license with a seat for the instance, valid false for everything else, and a valid
// answer holds no longer than the license.
func TestValidateLicenseBatchAnswersEachItemAsValidateLicense(t *testing.T) {
	expiry := now.Add(time.Hour)
	active := lic("t1", "K1", 2, nil, expiresAt(expiry))
	perpetual := lic("t2", "K2", 2, nil)
	gone := lic("t1", "REV", 2, nil)
	exp := lic("t1", "EXP", 2, nil)
	s, _ := newTest(active, perpetual, gone, exp)
	for _, k := range []string{"K1", "K2", "REV", "EXP"} {
		activate(t, s, k, "host-a")
	}
	revoked(gone)
	exp.ExpiresAt = lic("", "", 0, nil, expiresAt(now.Add(-time.Minute))).ExpiresAt
	reqs := []*activationsv1.ValidateLicenseRequest{
		{Key: "K1", InstanceId: "host-a"},
		{Key: "K1", InstanceId: "host-b"}, // no seat
		{Key: "NOPE", InstanceId: "host-a"},
		{Key: "K2", InstanceId: "host-a"}, // another tenant's license, its own seat
		{Key: "REV", InstanceId: "host-a"},
		{Key: "EXP", InstanceId: "host-a"},
		{Key: "", InstanceId: "host-a"},
		{Key: "K1", InstanceId: ""},
		{Key: strings.Repeat("K", 300), InstanceId: "host-a"},
		{Key: "K1", InstanceId: strings.Repeat("h", 300)},
		{Key: "K1", InstanceId: "host-a"}, // twice in one batch
	}
	results := validateBatch(t, s, reqs)
	valid := 0
	for i, r := range reqs {
		alone, err := s.ValidateLicense(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		got := results[i]
		if got.GetError() != nil || !proto.Equal(got.GetResponse(), alone) {
			t.Fatalf("item %d (%v): batch %v, alone %v", i, r, got, alone)
		}
		if alone.GetValid() {
			valid++
		}
	}
	if valid != 3 {
		t.Fatalf("%d valid, want 3 (K1 twice, K2)", valid)
	}
	if u := results[0].GetValidUntil(); u == nil || !u.AsTime().Equal(expiry) {
		t.Fatalf("valid until %v, want the license's expiry %v", u, expiry)
	}
	if u := results[3].GetValidUntil(); u != nil {
		t.Fatalf("a perpetual license's seat: valid until %v, want none", u)
	}
	if u := results[1].GetValidUntil(); u != nil {
		t.Fatalf("an invalid answer names a time: %v", u)
	}
	// A valid answer names the license's check-update class; any other names none.
	active.ProductId, perpetual.ProductId = "App", "tool"
	results = validateBatch(t, s, reqs)
	for i, want := range map[int]string{0: license.UpdateClass("t1", "app"), 3: license.UpdateClass("t2", "tool"), 10: license.UpdateClass("t1", "app")} {
		if got := results[i].GetUpdateClass(); got != want {
			t.Errorf("item %d: update class %q, want %q", i, got, want)
		}
	}
	for _, i := range []int{1, 2, 4, 5, 6, 7, 8, 9} {
		if got := results[i].GetUpdateClass(); got != "" {
			t.Errorf("item %d (%v, valid %v): update class %q, want none", i, reqs[i], results[i].GetResponse().GetValid(), got)
		}
	}
}

// An outage fails the items that needed licensing with ValidateLicense's status; the
// items answered before asking it are still valid false.
func TestValidateLicenseBatchReportsAnOutageOnTheItemsThatNeededLicensing(t *testing.T) {
	s, _ := newTest()
	s.licenses.(*fakeLicenses).err = apierr.Unavailable("Licensing service unavailable, retry")
	results := validateBatch(t, s, []*activationsv1.ValidateLicenseRequest{{Key: "K", InstanceId: "i"}, {Key: "", InstanceId: "i"},
		{Key: strings.Repeat("K", 300), InstanceId: "i"}})
	e := results[0].GetError()
	if codes.Code(e.GetCode()) != codes.Unavailable || e.GetMessage() != "Licensing service unavailable, retry" {
		t.Fatalf("outage: %v", results[0])
	}
	if results[1].GetError() != nil || results[1].GetResponse().GetValid() {
		t.Fatalf("an item without a key: %v", results[1])
	}
	if results[2].GetError() != nil || results[2].GetResponse().GetValid() {
		t.Fatalf("an item with an over-long key, which licensing is never asked about: %v", results[2])
	}
}

func TestValidateLicenseBatchRefusesOversizedBatches(t *testing.T) {
	s, _ := newTest()
	items := make([]*activationsv1.ValidateLicenseBatchItem, maxBatchItems+1)
	_, err := s.ValidateLicenseBatch(context.Background(), &activationsv1.ValidateLicenseBatchRequest{Items: items})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("got %v, want InvalidArgument", err)
	}
}
