package edge

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/idempotency"
	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// usageService stands for activations: it answers every item with the key as its metric
// and the item's position as its total, refuses the key "REFUSED" as activations would,
// and holds each batch until release has a value (when hold is set).
type usageService struct {
	activationsv1.ActivationsServiceClient
	hold    bool
	release chan struct{}
	fail    error

	mu        sync.Mutex
	batches   [][]string
	deadlines []time.Time
	arrived   chan struct{}
}

func newUsageService(hold bool) *usageService {
	return &usageService{hold: hold, release: make(chan struct{}), arrived: make(chan struct{}, 1000)}
}

func (u *usageService) TrackUsageBatch(ctx context.Context, req *activationsv1.TrackUsageBatchRequest, _ ...grpc.CallOption) (*activationsv1.TrackUsageBatchResponse, error) {
	var keys []string
	for _, it := range req.GetItems() {
		keys = append(keys, it.GetRequest().GetKey())
	}
	deadline, _ := ctx.Deadline()
	u.mu.Lock()
	u.batches = append(u.batches, keys)
	u.deadlines = append(u.deadlines, deadline)
	u.mu.Unlock()
	u.arrived <- struct{}{}
	if u.hold {
		select {
		case <-u.release:
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	if u.fail != nil {
		return nil, u.fail
	}
	resp := &activationsv1.TrackUsageBatchResponse{}
	for i, key := range keys {
		r := &activationsv1.TrackUsageBatchResult{}
		if key == "REFUSED" {
			st := apierr.Forbidden("Usage limit exceeded for metric: users").GRPCStatus().Proto()
			r.Outcome = &activationsv1.TrackUsageBatchResult_Error{Error: &activationsv1.CallStatus{Code: st.GetCode(), Message: st.GetMessage(), Details: st.GetDetails()}}
		} else {
			r.Outcome = &activationsv1.TrackUsageBatchResult_Response{Response: &activationsv1.TrackUsageResponse{Ok: true, Metric: key, Usage: float64(i)}}
		}
		resp.Results = append(resp.Results, r)
	}
	return resp, nil
}

func (u *usageService) sizes() []int {
	u.mu.Lock()
	defer u.mu.Unlock()
	var n []int
	for _, b := range u.batches {
		n = append(n, len(b))
	}
	return n
}

func trackVia(b *batchedActivations, ctx context.Context, key string) (*activationsv1.TrackUsageResponse, error) {
	return b.TrackUsage(ctx, &activationsv1.TrackUsageRequest{Key: key, Token: "t", Metric: "users"})
}

func TestBatchedSendsALoneRequestAtOnce(t *testing.T) {
	svc := newUsageService(false)
	b := newBatchedActivations(svc)
	resp, err := trackVia(b, context.Background(), "K1")
	if err != nil || resp.GetMetric() != "K1" {
		t.Fatalf("%v %v", resp, err)
	}
	if got := svc.sizes(); len(got) != 1 || got[0] != 1 {
		t.Fatalf("batches %v, want one of 1", got)
	}
}

// Requests that arrive while the batches in flight are out go together, each answered
// with its own item's answer or status.
func TestBatchedCoalescesWhatArrivesWhileBatchesAreOut(t *testing.T) {
	svc := newUsageService(true)
	b := newBatchedActivations(svc)
	type answer struct {
		key  string
		resp *activationsv1.TrackUsageResponse
		err  error
	}
	answers := make(chan answer, 200)
	ask := func(key string) {
		go func() {
			resp, err := trackVia(b, context.Background(), key)
			answers <- answer{key, resp, err}
		}()
	}
	// The first batchesInFlight requests each take a batch of their own.
	for i := range batchesInFlight {
		ask("FIRST-" + strconv.Itoa(i))
		<-svc.arrived
	}
	const queued = 100
	for i := range queued {
		key := "K" + strconv.Itoa(i)
		if i%10 == 0 {
			key = "REFUSED"
		}
		ask(key)
	}
	waitUntil(t, func() bool { return b.usage.Queued() == queued })
	close(svc.release)
	for range batchesInFlight + queued {
		a := <-answers
		if a.key == "REFUSED" {
			if st := status.Convert(a.err); st.Code() != codes.PermissionDenied || st.Message() != "Usage limit exceeded for metric: users" || a.resp != nil {
				t.Errorf("refused: %v %v", a.resp, a.err)
			}
			continue
		}
		if a.err != nil || a.resp.GetMetric() != a.key {
			t.Errorf("%s answered %v %v", a.key, a.resp, a.err)
		}
	}
	sizes := svc.sizes()
	if len(sizes) > batchesInFlight+4 {
		t.Errorf("%d batches for %d requests (%v): not coalesced", len(sizes), batchesInFlight+queued, sizes)
	}
	for _, n := range sizes {
		if n > batchSize {
			t.Errorf("a batch of %d, over %d", n, batchSize)
		}
	}
}

// A batch that fails as a whole (activations down, too slow) fails each of its calls with
// that status, which the gateway renders as for a single call.
func TestBatchedFailsEveryCallOfAFailedBatch(t *testing.T) {
	svc := newUsageService(false)
	svc.fail = status.Error(codes.Unavailable, "connection refused")
	b := newBatchedActivations(svc)
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			if _, err := trackVia(b, context.Background(), "K"+strconv.Itoa(i)); status.Code(err) != codes.Unavailable {
				t.Errorf("K%d: %v, want Unavailable", i, err)
			}
		})
	}
	wg.Wait()
}

// A caller that gave up before its batch left is not sent: its increment is not applied
// behind its back.
func TestBatchedDoesNotSendACallWhoseClientLeft(t *testing.T) {
	svc := newUsageService(true)
	b := newBatchedActivations(svc)
	for i := range batchesInFlight {
		go func() { _, _ = trackVia(b, context.Background(), "FIRST-"+strconv.Itoa(i)) }()
		<-svc.arrived
	}
	ctx, cancel := context.WithCancel(context.Background())
	left := make(chan error, 1)
	go func() { _, err := trackVia(b, ctx, "LEFT"); left <- err }()
	waitUntil(t, func() bool { return b.usage.Queued() == 1 })
	cancel()
	if err := <-left; status.Code(err) != codes.Canceled {
		t.Fatalf("the caller that left got %v, want Canceled", err)
	}
	stayed := make(chan error, 1)
	go func() { _, err := trackVia(b, context.Background(), "STAYED"); stayed <- err }()
	waitUntil(t, func() bool { return b.usage.Queued() == 2 })
	close(svc.release)
	if err := <-stayed; err != nil {
		t.Fatal(err)
	}
	svc.mu.Lock()
	defer svc.mu.Unlock()
	for _, batch := range svc.batches {
		for _, key := range batch {
			if key == "LEFT" {
				t.Fatalf("the call whose client left was sent: %v", svc.batches)
			}
		}
	}
}

// A batch may take as long as the most patient of its requests: one that waits shorter is
// answered at its own deadline, not cut by another's.
func TestBatchedLastsAsLongAsItsLongestDeadline(t *testing.T) {
	svc := newUsageService(true)
	b := newBatchedActivations(svc)
	go func() { _, _ = trackVia(b, context.Background(), "FIRST") }()
	<-svc.arrived
	late := time.Now().Add(time.Hour)
	for _, d := range []time.Time{time.Now().Add(time.Minute), late} {
		ctx, cancel := context.WithDeadline(context.Background(), d)
		defer cancel()
		go func() { _, _ = trackVia(b, ctx, "K") }()
	}
	waitUntil(t, func() bool { return b.usage.Queued() == 2 })
	close(svc.release)
	<-svc.arrived
	svc.mu.Lock()
	defer svc.mu.Unlock()
	if len(svc.deadlines) != 2 || !svc.deadlines[0].IsZero() || !svc.deadlines[1].Equal(late) {
		t.Fatalf("batch deadlines %v, want none, then %v", svc.deadlines, late)
	}
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 10 s")
		}
	}
}

// seatService stands for activations' seat calls: a batch answers each activation with
// its instance as token and each deactivation true; with older set it serves no batch
// call (a version before ChangeSeatsBatch) and answers the single calls.
type seatService struct {
	activationsv1.ActivationsServiceClient
	older   bool
	release chan struct{}

	mu      sync.Mutex
	batches [][]string
	singles []string
	arrived chan struct{}
}

func (s *seatService) ChangeSeatsBatch(ctx context.Context, req *activationsv1.ChangeSeatsBatchRequest, _ ...grpc.CallOption) (*activationsv1.ChangeSeatsBatchResponse, error) {
	if s.older {
		return nil, status.Error(codes.Unimplemented, "unknown method ChangeSeatsBatch")
	}
	resp := &activationsv1.ChangeSeatsBatchResponse{}
	var names []string
	for _, it := range req.GetItems() {
		if a := it.GetActivate(); a != nil {
			names = append(names, "activate "+a.GetInstanceId())
			resp.Results = append(resp.Results, &activationsv1.ChangeSeatsBatchResult{Outcome: &activationsv1.ChangeSeatsBatchResult_Activated{
				Activated: &activationsv1.ActivateLicenseResponse{Activated: true, Token: proto.String(a.GetInstanceId())}}})
			continue
		}
		names = append(names, "deactivate "+it.GetDeactivate().GetToken())
		resp.Results = append(resp.Results, &activationsv1.ChangeSeatsBatchResult{Outcome: &activationsv1.ChangeSeatsBatchResult_Deactivated{
			Deactivated: &activationsv1.DeactivateLicenseResponse{Deactivated: true}}})
	}
	s.mu.Lock()
	s.batches = append(s.batches, names)
	s.mu.Unlock()
	s.arrived <- struct{}{}
	<-s.release
	return resp, nil
}

func (s *seatService) ActivateLicense(_ context.Context, req *activationsv1.ActivateLicenseRequest, _ ...grpc.CallOption) (*activationsv1.ActivateLicenseResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.singles = append(s.singles, "activate "+req.GetInstanceId())
	return &activationsv1.ActivateLicenseResponse{Activated: true, Token: proto.String(req.GetInstanceId())}, nil
}

func (s *seatService) DeactivateLicense(_ context.Context, req *activationsv1.DeactivateLicenseRequest, _ ...grpc.CallOption) (*activationsv1.DeactivateLicenseResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.singles = append(s.singles, "deactivate "+req.GetToken())
	return &activationsv1.DeactivateLicenseResponse{Deactivated: true}, nil
}

// Activations and deactivations that arrive while a batch is out go together in the
// next, each answered with its own item's answer.
func TestBatchedSeatChangesGoTogether(t *testing.T) {
	svc := &seatService{release: make(chan struct{}), arrived: make(chan struct{}, 100)}
	b := newBatchedActivations(svc)
	ctx := context.Background()
	first := make(chan error, 1)
	go func() {
		_, err := b.ActivateLicense(ctx, &activationsv1.ActivateLicenseRequest{Key: "K", InstanceId: "first"})
		first <- err
	}()
	<-svc.arrived
	var wg sync.WaitGroup
	for i := range 10 {
		name := "i" + strconv.Itoa(i)
		wg.Go(func() {
			if i%2 == 0 {
				resp, err := b.ActivateLicense(ctx, &activationsv1.ActivateLicenseRequest{Key: "K", InstanceId: name})
				if err != nil || resp.GetToken() != name {
					t.Errorf("activate %s: %v %v", name, resp, err)
				}
				return
			}
			resp, err := b.DeactivateLicense(ctx, &activationsv1.DeactivateLicenseRequest{Key: "K", Token: name})
			if err != nil || !resp.GetDeactivated() {
				t.Errorf("deactivate %s: %v %v", name, resp, err)
			}
		})
	}
	waitUntil(t, func() bool { return b.seats.Queued() == 10 })
	close(svc.release)
	wg.Wait()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	svc.mu.Lock()
	defer svc.mu.Unlock()
	if len(svc.batches) != 2 || len(svc.batches[1]) != 10 || len(svc.singles) != 0 {
		t.Fatalf("batches %v, singles %v: want the first alone, then the ten together", svc.batches, svc.singles)
	}
}

// An activations replica that does not serve ChangeSeatsBatch yet (a rolling upgrade that
// replaced the gateways first) still answers: each call goes on its own.
func TestBatchedSeatChangesFallBackToSingleCallsOnAnOlderService(t *testing.T) {
	svc := &seatService{older: true}
	b := newBatchedActivations(svc)
	resp, err := b.ActivateLicense(context.Background(), &activationsv1.ActivateLicenseRequest{Key: "K", InstanceId: "host"})
	if err != nil || resp.GetToken() != "host" {
		t.Fatalf("activate: %v %v", resp, err)
	}
	if resp, err := b.DeactivateLicense(context.Background(), &activationsv1.DeactivateLicenseRequest{Key: "K", Token: "host"}); err != nil || !resp.GetDeactivated() {
		t.Fatalf("deactivate: %v %v", resp, err)
	}
	if fmt.Sprint(svc.singles) != "[activate host deactivate host]" {
		t.Fatalf("single calls %v", svc.singles)
	}
}

// mixedUpService answers every seat item as an activation, whatever it was.
type mixedUpService struct {
	activationsv1.ActivationsServiceClient
}

func (mixedUpService) ChangeSeatsBatch(_ context.Context, req *activationsv1.ChangeSeatsBatchRequest, _ ...grpc.CallOption) (*activationsv1.ChangeSeatsBatchResponse, error) {
	resp := &activationsv1.ChangeSeatsBatchResponse{}
	for range req.GetItems() {
		resp.Results = append(resp.Results, &activationsv1.ChangeSeatsBatchResult{Outcome: &activationsv1.ChangeSeatsBatchResult_Activated{
			Activated: &activationsv1.ActivateLicenseResponse{Activated: true}}})
	}
	return resp, nil
}

// An item answered with another kind of answer fails as an internal error (a 500), never
// as a made-up answer of its own kind.
func TestBatchedCallAnsweredWithAnotherCallsAnswerFails(t *testing.T) {
	b := newBatchedActivations(mixedUpService{})
	resp, err := b.DeactivateLicense(context.Background(), &activationsv1.DeactivateLicenseRequest{Key: "K", Token: "t"})
	if status.Code(err) != codes.Internal || resp != nil {
		t.Fatalf("%v %v, want Internal", resp, err)
	}
	if resp, err := b.ActivateLicense(context.Background(), &activationsv1.ActivateLicenseRequest{Key: "K", InstanceId: "i"}); err != nil || !resp.GetActivated() {
		t.Fatalf("%v %v", resp, err)
	}
}

// A call whose batch is out is answered with the batch's answer even when its own
// deadline passes first: the change may be made, so a 503 ("retry") would be a lie.
func TestBatchedCallAlreadySentWaitsForItsBatchPastItsDeadline(t *testing.T) {
	svc := newUsageService(true)
	b := newBatchedActivations(svc)
	ctx, cancel := context.WithCancel(context.Background())
	answered := make(chan error, 1)
	go func() { _, err := trackVia(b, ctx, "SENT"); answered <- err }()
	<-svc.arrived
	cancel()
	select {
	case err := <-answered:
		t.Fatalf("answered %v while its batch was out", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(svc.release)
	if err := <-answered; err != nil {
		t.Fatalf("got %v, want the batch's answer", err)
	}
}

// trackOnlyService answers the single call (the batch call would fail the test).
type trackOnlyService struct {
	activationsv1.ActivationsServiceClient
	keys chan []string
}

func (s *trackOnlyService) TrackUsage(ctx context.Context, req *activationsv1.TrackUsageRequest, _ ...grpc.CallOption) (*activationsv1.TrackUsageResponse, error) {
	md, _ := metadata.FromOutgoingContext(ctx)
	s.keys <- append(md.Get(idempotency.Header), md.Get(idempotency.BinaryHeader)...)
	return &activationsv1.TrackUsageResponse{Ok: true, Metric: req.GetMetric(), Usage: 1}, nil
}

// The Idempotency-Key is the call's metadata, which a batch item does not carry: such a
// call goes alone, with its key.
func TestBatchedCallWithAnIdempotencyKeyGoesAloneWithIt(t *testing.T) {
	svc := &trackOnlyService{keys: make(chan []string, 1)}
	b := newBatchedActivations(svc)
	ctx := metadata.AppendToOutgoingContext(context.Background(), idempotency.Header, "k-1")
	if _, err := trackVia(b, ctx, "K"); err != nil {
		t.Fatal(err)
	}
	if got := <-svc.keys; len(got) != 1 || got[0] != "k-1" {
		t.Fatalf("the call carried %v, want [k-1]", got)
	}
	// A key gRPC text metadata cannot carry goes as binary metadata, and alone too: the
	// service refuses it (a batch item would have been applied without a key).
	ctx = metadata.AppendToOutgoingContext(context.Background(), idempotency.BinaryHeader, "ünï")
	if _, err := trackVia(b, ctx, "K"); err != nil {
		t.Fatal(err)
	}
	if got := <-svc.keys; len(got) != 1 || got[0] != "ünï" {
		t.Fatalf("the call carried %v, want [ünï]", got)
	}
}

// An Idempotency-Key grpc-gateway cannot pass as text metadata (it logs and drops a value
// outside printable ASCII) reaches the service as binary metadata, byte for byte, so the
// service refuses it; a printable key goes as text, as before.
func TestAnIdempotencyKeyTextMetadataCannotCarryReachesTheService(t *testing.T) {
	t.Parallel()
	got := make(chan metadata.MD, 1)
	h, err := New(context.Background(), Options{Log: slog.New(slog.DiscardHandler), Conns: serveBackends(t, func(_ any, stream grpc.ServerStream) error {
		md, _ := metadata.FromIncomingContext(stream.Context())
		got <- md
		return status.Error(codes.InvalidArgument, "refused")
	})})
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]metadata.MD{
		"ünï":        {idempotency.BinaryHeader: {"ünï"}},
		"order 1001": {idempotency.Header: {"order 1001"}},
	} {
		r := httptest.NewRequest(http.MethodPost, "/v1/issue-license", strings.NewReader(`{"product_id":"p"}`))
		r.Header.Set("Idempotency-Key", key)
		h.ServeHTTP(httptest.NewRecorder(), r)
		md := <-got
		for _, k := range []string{idempotency.Header, idempotency.BinaryHeader} {
			if !slices.Equal(md.Get(k), want.Get(k)) {
				t.Errorf("key %q: %s %q, want %q", key, k, md.Get(k), want.Get(k))
			}
		}
	}
}
