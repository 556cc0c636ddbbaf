package edge

import (
	"context"
	"time"

	"github.com/keyhouse/keyhouse/pkg/licensecache"
	"github.com/keyhouse/keyhouse/pkg/telemetry"
	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// batchedValidate sends validate-license's cache misses to activations through
// ValidateLicenseBatch, as batchedVerify does verify-license's: the misses that arrive
// while a batch is out go together (one batch out at a time, a lone miss at once), and
// activations answers them with one license lookup and one query for their seats. Each
// caller gets the very answer or status ValidateLicense would give it, with the time a
// valid answer holds until, and keeps its own cancellation or deadline.
type batchedValidate struct {
	client activationsv1.ActivationsServiceClient
	batch  batcher[*activationsv1.ValidateLicenseBatchItem, *activationsv1.ValidateLicenseBatchResult]
}

func newBatchedValidate(client activationsv1.ActivationsServiceClient) *batchedValidate {
	b := &batchedValidate{client: client}
	b.batch.Reads = true
	b.batch.Send = func(ctx context.Context, items []*activationsv1.ValidateLicenseBatchItem) ([]*activationsv1.ValidateLicenseBatchResult, error) {
		resp, err := client.ValidateLicenseBatch(ctx, &activationsv1.ValidateLicenseBatchRequest{Items: items})
		return resp.GetResults(), err
	}
	return b
}

// ValidateLicense answers req through a batch, or alone from an activations without the
// batch call (a rolling upgrade that replaced the gateways first). until is what the
// answer names as its end (licensecache.ValidUntilHeader; zero: none), and class the
// license's check-update class a valid answer names (empty from an activations that
// names none).
func (b *batchedValidate) ValidateLicense(ctx context.Context, req *activationsv1.ValidateLicenseRequest) (_ *activationsv1.ValidateLicenseResponse, until time.Time, class string, _ error) {
	item := &activationsv1.ValidateLicenseBatchItem{Request: req, RequestId: telemetry.RequestID(ctx)}
	var header metadata.MD
	resp, err := answer(ctx, &b.batch, item, func(r *activationsv1.ValidateLicenseBatchResult) *activationsv1.ValidateLicenseResponse {
		if t := r.GetValidUntil(); t != nil {
			until = t.AsTime()
		}
		class = r.GetUpdateClass()
		return r.GetResponse()
	}, func(ctx context.Context) (*activationsv1.ValidateLicenseResponse, error) {
		resp, err := b.client.ValidateLicense(ctx, req, grpc.Header(&header))
		until = licensecache.ValidUntil(header)
		return resp, err
	})
	return resp, until, class, err
}
