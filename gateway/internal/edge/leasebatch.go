package edge

import (
	"context"

	"github.com/keyhouse/keyhouse/pkg/telemetry"
	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	"google.golang.org/grpc"
)

// batchedLeases answers CreateLease through CreateLeaseBatch: the lease requests (and
// floating renewals) that arrive while a batch is out go to activations together, which
// reads their seats, policies and keys in one query, looks their licenses up together and
// writes the renewed seats' lease ends in one statement. A lone request goes at once. Each
// caller gets the very lease or status its own call would give; a caller whose request is
// out waits for its batch, because a renewal may then be written (grpcx.Batcher). The
// rest of the client is the connection's own; the options of a call are ignored, as for
// batchedActivations.
type batchedLeases struct {
	activationsv1.LeasesServiceClient
	leases batcher[*activationsv1.CreateLeaseBatchItem, *activationsv1.CreateLeaseBatchResult]
}

func newBatchedLeases(client activationsv1.LeasesServiceClient) *batchedLeases {
	b := &batchedLeases{LeasesServiceClient: client}
	b.leases.MaxSize, b.leases.MaxInFlight = batchSize, batchesInFlight
	b.leases.Send = func(ctx context.Context, items []*activationsv1.CreateLeaseBatchItem) ([]*activationsv1.CreateLeaseBatchResult, error) {
		resp, err := client.CreateLeaseBatch(ctx, &activationsv1.CreateLeaseBatchRequest{Items: items})
		return resp.GetResults(), err
	}
	return b
}

func (b *batchedLeases) CreateLease(ctx context.Context, req *activationsv1.CreateLeaseRequest, _ ...grpc.CallOption) (*activationsv1.CreateLeaseResponse, error) {
	item := &activationsv1.CreateLeaseBatchItem{Request: req, RequestId: telemetry.RequestID(ctx)}
	return answer(ctx, &b.leases, item, (*activationsv1.CreateLeaseBatchResult).GetResponse,
		func(ctx context.Context) (*activationsv1.CreateLeaseResponse, error) {
			return b.LeasesServiceClient.CreateLease(ctx, req)
		})
}
