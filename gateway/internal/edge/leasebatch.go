package edge

import (
	"context"
	"time"

	"github.com/keyhouse/keyhouse/pkg/license"
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
//
// A lease's answer also names the license's check-update class, which check-update's
// answers keep (updateAnswers.learnFrom): an app renews its lease, then checks for updates.
type batchedLeases struct {
	activationsv1.LeasesServiceClient
	leases  batcher[*activationsv1.CreateLeaseBatchItem, *activationsv1.CreateLeaseBatchResult]
	updates updateAnswers
}

func newBatchedLeases(client activationsv1.LeasesServiceClient, updates updateAnswers) *batchedLeases {
	b := &batchedLeases{LeasesServiceClient: client, updates: updates}
	b.leases.MaxSize, b.leases.MaxInFlight = batchSize, batchesInFlight
	b.leases.Send = func(ctx context.Context, items []*activationsv1.CreateLeaseBatchItem) ([]*activationsv1.CreateLeaseBatchResult, error) {
		resp, err := client.CreateLeaseBatch(ctx, &activationsv1.CreateLeaseBatchRequest{Items: items})
		return resp.GetResults(), err
	}
	return b
}

func (b *batchedLeases) CreateLease(ctx context.Context, req *activationsv1.CreateLeaseRequest, _ ...grpc.CallOption) (*activationsv1.CreateLeaseResponse, error) {
	item := &activationsv1.CreateLeaseBatchItem{Request: req, RequestId: telemetry.RequestID(ctx)}
	classes := b.updates.classes.StartLoad()
	var class string
	var until time.Time
	resp, err := answer(ctx, &b.leases, item, func(r *activationsv1.CreateLeaseBatchResult) *activationsv1.CreateLeaseResponse {
		class = r.GetUpdateClass()
		if t := r.GetLicenseExpiresAt(); t != nil {
			until = t.AsTime()
		}
		return r.GetResponse()
	}, func(ctx context.Context) (*activationsv1.CreateLeaseResponse, error) {
		return b.LeasesServiceClient.CreateLease(ctx, req)
	})
	if err == nil {
		b.updates.learnFrom(classes, license.CanonicalKey(req.GetKey()), class, until)
	}
	return resp, err
}
