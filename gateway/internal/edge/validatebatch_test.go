package edge

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/pkg/license"
	"github.com/keyhouse/keyhouse/pkg/licensecache"
	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	releasesv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/releases/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// asBatchStatus is err as a batch result carries it.
func asBatchStatus(err error) *activationsv1.CallStatus {
	st := status.Convert(err).Proto()
	return &activationsv1.CallStatus{Code: st.GetCode(), Message: st.GetMessage(), Details: st.GetDetails()}
}

// headerUntil is the answer's end an alone call names in its metadata.
func headerUntil(f func(opts ...grpc.CallOption) error) (*timestamppb.Timestamp, error) {
	var header metadata.MD
	err := f(grpc.Header(&header))
	if t := licensecache.ValidUntil(header); !t.IsZero() {
		return timestamppb.New(t), err
	}
	return nil, err
}

// ValidateLicenseBatch answers each item as ValidateLicense (the fake's) does; with
// older set the fake is an activations from before the batch call.
func (f *fakeValidator) ValidateLicenseBatch(ctx context.Context, req *activationsv1.ValidateLicenseBatchRequest, _ ...grpc.CallOption) (*activationsv1.ValidateLicenseBatchResponse, error) {
	if f.older {
		return nil, status.Error(codes.Unimplemented, "unknown method ValidateLicenseBatch")
	}
	resp := &activationsv1.ValidateLicenseBatchResponse{}
	for _, it := range req.GetItems() {
		var answer *activationsv1.ValidateLicenseResponse
		until, err := headerUntil(func(opts ...grpc.CallOption) (err error) {
			answer, err = f.ValidateLicense(ctx, it.GetRequest(), opts...)
			return err
		})
		r := &activationsv1.ValidateLicenseBatchResult{ValidUntil: until, Outcome: &activationsv1.ValidateLicenseBatchResult_Response{Response: answer}}
		// With every answer, valid or not: the gateway must keep it only from a valid one.
		r.UpdateClass = f.class
		if err != nil {
			r.Outcome = &activationsv1.ValidateLicenseBatchResult_Error{Error: asBatchStatus(err)}
		}
		resp.Results = append(resp.Results, r)
	}
	return resp, nil
}

// CheckUpdateBatch answers each item as CheckUpdate (the fake's) does.
func (u *updater) CheckUpdateBatch(ctx context.Context, req *releasesv1.CheckUpdateBatchRequest, _ ...grpc.CallOption) (*releasesv1.CheckUpdateBatchResponse, error) {
	if u.older {
		return nil, status.Error(codes.Unimplemented, "unknown method CheckUpdateBatch")
	}
	resp := &releasesv1.CheckUpdateBatchResponse{}
	for _, it := range req.GetItems() {
		var answer *releasesv1.CheckUpdateResponse
		until, err := headerUntil(func(opts ...grpc.CallOption) (err error) {
			answer, err = u.CheckUpdate(ctx, it.GetRequest(), opts...)
			return err
		})
		r := &releasesv1.CheckUpdateBatchResult{ValidUntil: until, UpdateClass: u.classOf(it.GetRequest().GetKey()), Outcome: &releasesv1.CheckUpdateBatchResult_Response{Response: answer}}
		if err != nil {
			r.UpdateClass = ""
			r.Outcome = &releasesv1.CheckUpdateBatchResult_Error{Error: asBatchStatus(err)}
		}
		resp.Results = append(resp.Results, r)
	}
	return resp, nil
}

// Through a batch or alone (an activations from before the batch call), each caller
// gets what ValidateLicense gives its request alone, with the same end of validity;
// concurrent callers each get their own answer.
func TestBatchedValidateAnswersAsValidateLicenseAlone(t *testing.T) {
	until := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	for _, older := range []bool{false, true} {
		f := &fakeValidator{invalid: map[string]bool{"no-seat": true}, until: until, older: older}
		b := newBatchedValidate(f)
		var wg sync.WaitGroup
		for i := range 40 {
			wg.Go(func() {
				instance := "host-" + strconv.Itoa(i)
				if i%3 == 0 {
					instance = "no-seat"
				}
				resp, got, _, err := b.ValidateLicense(context.Background(), &activationsv1.ValidateLicenseRequest{Key: "K", InstanceId: instance})
				switch {
				case err != nil:
					t.Errorf("%s: %v", instance, err)
				case resp.GetValid() == (instance == "no-seat"):
					t.Errorf("%s: valid %v", instance, resp.GetValid())
				case resp.GetValid() && !got.Equal(until):
					t.Errorf("%s: valid until %v, want %v", instance, got, until)
				}
			})
		}
		wg.Wait()
	}
	f := &fakeValidator{err: status.Error(codes.Unavailable, "Licensing service unavailable, retry")}
	if _, _, _, err := newBatchedValidate(f).ValidateLicense(context.Background(), &activationsv1.ValidateLicenseRequest{Key: "K", InstanceId: "i"}); !proto.Equal(status.Convert(err).Proto(), status.Convert(f.err).Proto()) {
		t.Fatalf("outage: %v, want %v", err, f.err)
	}
}

// The same for check-update: each caller's answer, its error, its end and, from a
// releases with the batch call, its class.
func TestBatchedCheckUpdateAnswersAsCheckUpdateAlone(t *testing.T) {
	until := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	answer := &releasesv1.CheckUpdateResponse{UpdateAvailable: true, Release: &releasesv1.Manifest{Version: "2.0.0"}}
	for _, older := range []bool{false, true} {
		u := &updater{answer: answer, until: until, older: older, class: "tenant\x00app"}
		wantClass := u.class
		if older {
			wantClass = ""
		}
		b := newBatchedCheckUpdate(u)
		var wg sync.WaitGroup
		for range 40 {
			wg.Go(func() {
				resp, got, class, err := b.CheckUpdate(context.Background(), &releasesv1.CheckUpdateRequest{Key: license.NewKey(), ProductId: "app", CurrentVersion: "1.0.0"})
				if err != nil || !proto.Equal(resp, answer) || !got.Equal(until) || class != wantClass {
					t.Errorf("answer %v until %v class %q, %v", resp, got, class, err)
				}
			})
		}
		wg.Wait()
	}
	u := &updater{err: license.ErrNotActive.GRPCStatus().Err()}
	if _, _, _, err := newBatchedCheckUpdate(u).CheckUpdate(context.Background(), &releasesv1.CheckUpdateRequest{Key: "K"}); !proto.Equal(status.Convert(err).Proto(), status.Convert(u.err).Proto()) {
		t.Fatalf("refusal: %v, want %v", err, u.err)
	}
}
