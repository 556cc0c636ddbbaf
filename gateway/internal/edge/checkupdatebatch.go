package edge

import (
	"context"
	"time"

	"github.com/keyhouse/keyhouse/pkg/licensecache"
	"github.com/keyhouse/keyhouse/pkg/telemetry"
	releasesv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/releases/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// batchedCheckUpdate sends check-update's cache misses to releases through
// CheckUpdateBatch, as batchedVerify does verify-license's: the misses that arrive while
// a batch is out go together (one batch out at a time, a lone miss at once), and
// releases answers them with one license lookup and one query for the latest releases.
// Each caller gets the very answer or status CheckUpdate would give it, with the time
// the answer holds until, and keeps its own cancellation or deadline.
type batchedCheckUpdate struct {
	client releasesv1.ReleasesServiceClient
	batch  batcher[*releasesv1.CheckUpdateBatchItem, *releasesv1.CheckUpdateBatchResult]
}

func newBatchedCheckUpdate(client releasesv1.ReleasesServiceClient) *batchedCheckUpdate {
	b := &batchedCheckUpdate{client: client}
	b.batch.Reads = true
	b.batch.Send = func(ctx context.Context, items []*releasesv1.CheckUpdateBatchItem) ([]*releasesv1.CheckUpdateBatchResult, error) {
		resp, err := client.CheckUpdateBatch(ctx, &releasesv1.CheckUpdateBatchRequest{Items: items})
		return resp.GetResults(), err
	}
	return b
}

// CheckUpdate answers req through a batch, or alone from a releases without the batch
// call (a rolling upgrade that replaced the gateways first). until is what the answer
// names as its end (licensecache.ValidUntilHeader; zero: none), class the answer's class
// (CheckUpdateBatchResult.update_class; empty from a releases that names none).
func (b *batchedCheckUpdate) CheckUpdate(ctx context.Context, req *releasesv1.CheckUpdateRequest) (_ *releasesv1.CheckUpdateResponse, until time.Time, class string, _ error) {
	item := &releasesv1.CheckUpdateBatchItem{Request: req, RequestId: telemetry.RequestID(ctx)}
	var header metadata.MD
	resp, err := answer(ctx, &b.batch, item, func(r *releasesv1.CheckUpdateBatchResult) *releasesv1.CheckUpdateResponse {
		if t := r.GetValidUntil(); t != nil {
			until = t.AsTime()
		}
		class = r.GetUpdateClass()
		return r.GetResponse()
	}, func(ctx context.Context) (*releasesv1.CheckUpdateResponse, error) {
		resp, err := b.client.CheckUpdate(ctx, req, grpc.Header(&header))
		until = licensecache.ValidUntil(header)
		return resp, err
	})
	return resp, until, class, err
}
