package edge

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/pkg/grpcx"
	"github.com/keyhouse/keyhouse/pkg/license"
	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// batchLicensing stands for licensing with the batch call: VerifyLicense answers a key
// "K…" as valid with the key as its product, "REVOKED" as licensing refuses a revoked
// license (403 with "valid": false), anything else as unknown; VerifyLicenseBatch
// answers each item as VerifyLicense does, holding each batch until release is closed
// (when hold is set).
type batchLicensing struct {
	licensingv1.LicensingServiceClient
	hold    bool
	release chan struct{}
	arrived chan struct{}

	mu      sync.Mutex
	batches [][]string
}

func newBatchLicensing(hold bool) *batchLicensing {
	return &batchLicensing{hold: hold, release: make(chan struct{}), arrived: make(chan struct{}, 1000)}
}

func (l *batchLicensing) VerifyLicense(_ context.Context, req *licensingv1.VerifyLicenseRequest, _ ...grpc.CallOption) (*licensingv1.VerifyLicenseResponse, error) {
	key := req.GetKey()
	switch {
	case key == "REVOKED":
		return nil, license.ErrNotActive.WithBefore("valid", false).GRPCStatus().Err()
	case len(key) > 1 && key[0] == 'K':
		return &licensingv1.VerifyLicenseResponse{Valid: true, Tier: "pro", ProductId: key, Status: "active"}, nil
	}
	return nil, license.ErrNotFound.WithBefore("valid", false).GRPCStatus().Err()
}

func (l *batchLicensing) VerifyLicenseBatch(ctx context.Context, req *licensingv1.VerifyLicenseBatchRequest, _ ...grpc.CallOption) (*licensingv1.VerifyLicenseBatchResponse, error) {
	var keys []string
	resp := &licensingv1.VerifyLicenseBatchResponse{}
	for _, it := range req.GetItems() {
		keys = append(keys, it.GetRequest().GetKey())
		r := &licensingv1.VerifyLicenseBatchResult{}
		answer, err := l.VerifyLicense(ctx, it.GetRequest())
		if err != nil {
			st := status.Convert(err).Proto()
			r.Outcome = &licensingv1.VerifyLicenseBatchResult_Error{Error: &activationsv1.CallStatus{Code: st.GetCode(), Message: st.GetMessage(), Details: st.GetDetails()}}
		} else {
			r.Outcome = &licensingv1.VerifyLicenseBatchResult_Response{Response: answer}
		}
		resp.Results = append(resp.Results, r)
	}
	l.mu.Lock()
	l.batches = append(l.batches, keys)
	l.mu.Unlock()
	l.arrived <- struct{}{}
	if l.hold {
		select {
		case <-l.release:
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	return resp, nil
}

func (l *batchLicensing) sizes() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	var n []int
	for _, b := range l.batches {
		n = append(n, len(b))
	}
	return n
}

// Misses that arrive while batches are out go to licensing together, and each caller
// gets exactly what VerifyLicense gives its key alone: the same answer, or the same
// status with the same details; one key's failure is its own.
func TestBatchedVerifyAnswersEachKeyAsVerifyLicenseAlone(t *testing.T) {
	svc := newBatchLicensing(true)
	b := newBatchedVerify(svc)
	type answer struct {
		key  string
		resp *licensingv1.VerifyLicenseResponse
		err  error
	}
	answers := make(chan answer, 200)
	ask := func(key string) {
		go func() {
			resp, err := b.VerifyLicense(context.Background(), &licensingv1.VerifyLicenseRequest{Key: proto.String(key)})
			answers <- answer{key, resp, err}
		}()
	}
	for i := range grpcx.DefaultInFlight {
		ask("KFIRST" + strconv.Itoa(i))
		<-svc.arrived
	}
	const queued = 60
	for i := range queued {
		key := "K" + strconv.Itoa(i)
		switch i % 6 {
		case 1:
			key = "REVOKED"
		case 2:
			key = "UNKNOWN" + strconv.Itoa(i)
		}
		ask(key)
	}
	waitUntil(t, func() bool { return b.batch.Queued() == queued })
	close(svc.release)
	for range grpcx.DefaultInFlight + queued {
		a := <-answers
		want, wantErr := svc.VerifyLicense(context.Background(), &licensingv1.VerifyLicenseRequest{Key: proto.String(a.key)})
		if wantErr != nil {
			if a.resp != nil || !proto.Equal(status.Convert(a.err).Proto(), status.Convert(wantErr).Proto()) {
				t.Errorf("%s: batched %v %v, alone %v", a.key, a.resp, a.err, wantErr)
			}
			continue
		}
		if a.err != nil || !proto.Equal(a.resp, want) {
			t.Errorf("%s: batched %v %v, alone %v", a.key, a.resp, a.err, want)
		}
	}
	sizes := svc.sizes()
	if len(sizes) != grpcx.DefaultInFlight+1 || sizes[len(sizes)-1] != queued {
		t.Errorf("batches %v: want %d of one, then one of the %d queued", sizes, grpcx.DefaultInFlight, queued)
	}
}

// A caller that leaves while its batch is out gets its cancellation at once, and the
// batch still answers the others; a deadline that passes is its caller's alone too.
func TestBatchedVerifyCancellationIsPerCaller(t *testing.T) {
	svc := newBatchLicensing(true)
	b := newBatchedVerify(svc)
	for i := range grpcx.DefaultInFlight {
		go func() {
			_, _ = b.VerifyLicense(context.Background(), &licensingv1.VerifyLicenseRequest{Key: proto.String("KFIRST" + strconv.Itoa(i))})
		}()
		<-svc.arrived
	}
	leaving, leave := context.WithCancel(context.Background())
	left := make(chan error, 1)
	stayed := make(chan *licensingv1.VerifyLicenseResponse, 1)
	go func() {
		_, err := b.VerifyLicense(leaving, &licensingv1.VerifyLicenseRequest{Key: proto.String("KLEAVES")})
		left <- err
	}()
	go func() {
		resp, err := b.VerifyLicense(context.Background(), &licensingv1.VerifyLicenseRequest{Key: proto.String("KSTAYS")})
		if err != nil {
			t.Error(err)
		}
		stayed <- resp
	}()
	waitUntil(t, func() bool { return b.batch.Queued() == 2 })
	// Let the first batches go so the two leave together in the next one, and hold that.
	for range grpcx.DefaultInFlight {
		svc.release <- struct{}{}
	}
	<-svc.arrived
	if got := svc.sizes(); got[len(got)-1] != 2 {
		t.Fatalf("batches %v: want the two callers in one", got)
	}
	leave()
	select {
	case err := <-left:
		if status.Code(err) != codes.Canceled {
			t.Fatalf("the caller that left: %v, want Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the caller that left still waits for its batch")
	}
	close(svc.release)
	if resp := <-stayed; resp.GetProductId() != "KSTAYS" {
		t.Fatalf("the caller that stayed: %v", resp)
	}
}
