package edge

import (
	"context"

	"github.com/keyhouse/keyhouse/pkg/grpcx"
	"github.com/keyhouse/keyhouse/pkg/idempotency"
	"github.com/keyhouse/keyhouse/pkg/telemetry"
	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Batches of calls of one kind: at most batchSize items each, at most batchesInFlight out
// at once per gateway (the rate limiter's Redis pipeline works the same way). A lone
// request goes at once, so batching adds no wait to an idle gateway; under load every
// batch carries what arrived while the one before was out. Fewer in flight make larger,
// cheaper batches: with 32 clients in make bench, track-usage cost 1.65–1.81×
// verify-license's CPU per op with one in flight, 1.82–1.99× with two, 2.24× with four,
// 2.32× with eight. The price of one: a batch that waits (a license licensing is slow to
// give, a row or a license lock another gateway's batch holds) holds up the next one of
// its kind.
const (
	batchSize       = 64
	batchesInFlight = 1
)

// batchedActivations answers TrackUsage through TrackUsageBatch, and ActivateLicense and
// DeactivateLicense through ChangeSeatsBatch: the calls that arrive while earlier ones of
// their kind are out go to activations together, and what they write is committed
// together, in one round trip to Postgres instead of one each. Every caller still gets
// its own answer (the very status its own call would give) only once its change is
// decided. The rest of the client is the connection's own.
//
// The options of a call are ignored: the REST handlers pass only header and trailer
// captures, and this gateway forwards neither.
type batchedActivations struct {
	activationsv1.ActivationsServiceClient
	usage batcher[*activationsv1.TrackUsageBatchItem, *activationsv1.TrackUsageBatchResult]
	seats batcher[*activationsv1.ChangeSeatsBatchItem, *activationsv1.ChangeSeatsBatchResult]
}

func newBatchedActivations(client activationsv1.ActivationsServiceClient) *batchedActivations {
	b := &batchedActivations{ActivationsServiceClient: client}
	b.usage.MaxSize, b.usage.MaxInFlight = batchSize, batchesInFlight
	b.seats.MaxSize, b.seats.MaxInFlight = batchSize, batchesInFlight
	b.usage.Send = func(ctx context.Context, items []*activationsv1.TrackUsageBatchItem) ([]*activationsv1.TrackUsageBatchResult, error) {
		resp, err := client.TrackUsageBatch(ctx, &activationsv1.TrackUsageBatchRequest{Items: items})
		return resp.GetResults(), err
	}
	b.seats.Send = func(ctx context.Context, items []*activationsv1.ChangeSeatsBatchItem) ([]*activationsv1.ChangeSeatsBatchResult, error) {
		resp, err := client.ChangeSeatsBatch(ctx, &activationsv1.ChangeSeatsBatchRequest{Items: items})
		return resp.GetResults(), err
	}
	return b
}

// olderService: activations does not serve the batch call yet (a rolling upgrade that
// replaced the gateways first); the call goes on its own.
func olderService(err error) bool { return status.Code(err) == codes.Unimplemented }

func (b *batchedActivations) TrackUsage(ctx context.Context, req *activationsv1.TrackUsageRequest, _ ...grpc.CallOption) (*activationsv1.TrackUsageResponse, error) {
	if md, _ := metadata.FromOutgoingContext(ctx); idempotency.Sent(md) {
		// The key travels as the call's metadata, which a batch item does not carry.
		return b.ActivationsServiceClient.TrackUsage(ctx, req)
	}
	return answer(ctx, &b.usage, &activationsv1.TrackUsageBatchItem{Request: req, RequestId: telemetry.RequestID(ctx)},
		(*activationsv1.TrackUsageBatchResult).GetResponse,
		func(ctx context.Context) (*activationsv1.TrackUsageResponse, error) {
			return b.ActivationsServiceClient.TrackUsage(ctx, req)
		})
}

func (b *batchedActivations) ActivateLicense(ctx context.Context, req *activationsv1.ActivateLicenseRequest, _ ...grpc.CallOption) (*activationsv1.ActivateLicenseResponse, error) {
	item := &activationsv1.ChangeSeatsBatchItem{Change: &activationsv1.ChangeSeatsBatchItem_Activate{Activate: req}, RequestId: telemetry.RequestID(ctx)}
	return answer(ctx, &b.seats, item, (*activationsv1.ChangeSeatsBatchResult).GetActivated,
		func(ctx context.Context) (*activationsv1.ActivateLicenseResponse, error) {
			return b.ActivationsServiceClient.ActivateLicense(ctx, req)
		})
}

func (b *batchedActivations) DeactivateLicense(ctx context.Context, req *activationsv1.DeactivateLicenseRequest, _ ...grpc.CallOption) (*activationsv1.DeactivateLicenseResponse, error) {
	item := &activationsv1.ChangeSeatsBatchItem{Change: &activationsv1.ChangeSeatsBatchItem_Deactivate{Deactivate: req}, RequestId: telemetry.RequestID(ctx)}
	return answer(ctx, &b.seats, item, (*activationsv1.ChangeSeatsBatchResult).GetDeactivated,
		func(ctx context.Context) (*activationsv1.DeactivateLicenseResponse, error) {
			return b.ActivationsServiceClient.DeactivateLicense(ctx, req)
		})
}

// batchResult is a batch call's answer to one item: the item's own response, or the
// status its own call would have failed with.
type batchResult interface {
	GetError() *activationsv1.CallStatus
}

// answer sends item through b and returns its answer (response picks it out of the
// item's result), or, from a service without the batch call, the call made alone (with
// ctx as grpc-gateway annotates it, see annotated). A request admission control let
// through without a slot takes one first, or is refused (slotForMiss): the misses of the
// three read routes it lets through that way all come here.
func answer[Item any, Result batchResult, Response proto.Message](ctx context.Context, b *batcher[Item, Result], item Item,
	response func(Result) Response, alone func(context.Context) (Response, error)) (Response, error) {
	var none Response
	release, err := slotForMiss(ctx)
	if err != nil {
		return none, err
	}
	defer release()
	r, err := b.Do(ctx, item)
	switch {
	case olderService(err):
		if ctx, err = annotated(ctx); err != nil {
			return none, err
		}
		return alone(ctx)
	case err != nil:
		return none, err
	case r.GetError() != nil:
		return none, itemError(r.GetError())
	}
	if resp := response(r); resp.ProtoReflect().IsValid() {
		return resp, nil
	}
	return none, errNoAnswer
}

// itemError is the status a batch item failed with, as its own call would have.
func itemError(e *activationsv1.CallStatus) error {
	return status.ErrorProto(&spb.Status{Code: e.GetCode(), Message: e.GetMessage(), Details: e.GetDetails()})
}

// errNoAnswer: a batch's answer to an item was not of the item's kind.
var errNoAnswer = status.Error(codes.Internal, "batch call: an item answered with another call's answer")

// batcher is grpcx.Batcher: the calls of one kind that arrive while earlier batches are
// out, sent as one batch call.
type batcher[Item, Result any] = grpcx.Batcher[Item, Result]
