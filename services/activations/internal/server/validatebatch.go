package server

import (
	"context"
	"time"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/license"
	"github.com/keyhouse/keyhouse/pkg/licensingclient"
	"github.com/keyhouse/keyhouse/pkg/telemetry"
	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	"github.com/keyhouse/keyhouse/services/activations/internal/store"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// ValidateLicenseBatch answers each item as ValidateLicense would answer it alone: the
// same answer (valid or not) or the same status, the same time a valid answer holds
// until (the result's valid_until, ValidateLicense's licensecache.ValidUntilHeader), and
// logged and counted as a ValidateLicense call with the item's request id. The items'
// licenses are looked up together (one call to licensing for those its cache lacks) and
// their seats read with one query; when either fails, every item that needed it fails as
// its own call would have.
func (s *Server) ValidateLicenseBatch(ctx context.Context, req *activationsv1.ValidateLicenseBatchRequest) (*activationsv1.ValidateLicenseBatchResponse, error) {
	items := req.GetItems()
	if len(items) > maxBatchItems {
		return nil, apierr.Invalid("at most %d items in a batch", maxBatchItems)
	}
	start := time.Now()
	results := make([]*activationsv1.ValidateLicenseBatchResult, len(items))
	errs := make([]error, len(items))
	invalid := func(i int) {
		results[i] = &activationsv1.ValidateLicenseBatchResult{Outcome: &activationsv1.ValidateLicenseBatchResult_Response{
			Response: &activationsv1.ValidateLicenseResponse{Valid: false}}}
	}

	// What ValidateLicense answers before asking licensing: valid false. (An over-long key
	// is not asked about either: lookUpTogether answers it not found, as lookup does.)
	var keys []string
	var asking []int
	for i, item := range items {
		r := item.GetRequest()
		if r.GetKey() == "" || checkField("instance_id", r.GetInstanceId()) != nil {
			invalid(i)
			continue
		}
		keys = append(keys, r.GetKey())
		asking = append(asking, i)
	}

	// The licenses, then the seats of the usable ones.
	find := lookUpTogether(ctx, s.licenses, keys)
	var seats []store.SeatKey
	var seatOf []int
	licenses := make([]*licensingv1.License, len(items))
	for _, i := range asking {
		l, err := find(ctx, items[i].GetRequest().GetKey())
		switch {
		case isNotFound(err):
			invalid(i)
			continue
		case err != nil:
			errs[i] = err
			continue
		case s.usable(l, license.ErrExpired) != nil:
			invalid(i)
			continue
		}
		licenses[i] = l
		seats = append(seats, store.SeatKey{Tenant: l.GetTenantId(), Key: l.GetKey(), Instance: items[i].GetRequest().GetInstanceId()})
		seatOf = append(seatOf, i)
	}
	var live []store.LiveSeat
	var seatErr error
	if len(seats) > 0 {
		live, seatErr = s.store.LiveSeats(ctx, seats)
	}
	for j, i := range seatOf {
		if seatErr != nil {
			errs[i] = seatErr
			continue
		}
		result := &activationsv1.ValidateLicenseBatchResult{Outcome: &activationsv1.ValidateLicenseBatchResult_Response{
			Response: &activationsv1.ValidateLicenseResponse{Valid: live[j].Present}}}
		if live[j].Present {
			if until := validUntil(licenses[i], live[j].LeaseEnds); until != nil {
				result.ValidUntil = timestamppb.New(*until)
			}
			result.UpdateClass = licensingclient.UpdateClass(licenses[i])
		}
		results[i] = result
	}

	for i, item := range items {
		itemCtx := telemetry.WithRequestID(ctx, item.GetRequestId())
		if st := s.observeItem(itemCtx, activationsv1.ActivationsService_ValidateLicense_FullMethodName, start, errs[i]); st != nil {
			results[i] = &activationsv1.ValidateLicenseBatchResult{Outcome: &activationsv1.ValidateLicenseBatchResult_Error{Error: st}}
		}
	}
	return &activationsv1.ValidateLicenseBatchResponse{Results: results}, nil
}
