package server

import (
	"context"
	"time"

	"github.com/keyhouse/keyhouse/pkg/licensingclient"
	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	"github.com/keyhouse/keyhouse/services/activations/internal/store"
)

// leaseItem is one item of a CreateLeaseBatch on its way: its license, its plan, and
// its answer or the error its own call fails with.
type leaseItem struct {
	ctx    context.Context
	req    *activationsv1.CreateLeaseRequest
	l      *licensingv1.License
	plan   leasePlan
	answer *activationsv1.CreateLeaseResponse
	err    error
	// alone: the item is signed on its own (leaseAlone), as CreateLease would: a
	// reinstall (its new token is an event), or a seat that changed between the batch's
	// read and its write.
	alone bool
}

// CreateLeaseBatch answers each item as CreateLease would: the same checks, the same
// lease or error, logged and counted as a CreateLease call of the item's request id.
// Their licenses are looked up together (one call to licensing for the cache's misses),
// their seats, policies and keys are one read (store.LeaseBases), and the floating seats
// they renew one write under the licenses' shared locks (store.RenewLeases), as each
// lease's own read and write would be.
func (x *Leases) CreateLeaseBatch(ctx context.Context, req *activationsv1.CreateLeaseBatchRequest) (*activationsv1.CreateLeaseBatchResponse, error) {
	start := time.Now()
	checked, err := checkBatch(ctx, x.licenses, req.GetItems(), func(item *activationsv1.CreateLeaseBatchItem) string {
		return item.GetRequest().GetKey()
	}, func(ctx context.Context, item *activationsv1.CreateLeaseBatchItem, find findLicense) (*licensingv1.License, error) {
		return x.leaseLicense(ctx, item.GetRequest(), find)
	})
	if err != nil {
		return nil, err
	}
	now := x.now()
	items := make([]leaseItem, len(checked))
	var asked []*leaseItem
	var asks []store.LeaseAsk
	for i, c := range checked {
		it := &items[i]
		it.ctx, it.req, it.l, it.err = c.ctx, req.GetItems()[i].GetRequest(), c.change, c.err
		if it.err == nil {
			asked = append(asked, it)
			asks = append(asks, leaseAsk(it.l, it.req))
		}
	}
	if len(asks) > 0 {
		x.planLeases(ctx, now, asked, asks)
	}
	x.renewLeases(ctx, asked)
	resp := &activationsv1.CreateLeaseBatchResponse{Results: make([]*activationsv1.CreateLeaseBatchResult, len(items))}
	for i := range items {
		it := &items[i]
		switch {
		case it.err != nil:
		case it.alone:
			it.answer, it.err = x.leaseAlone(it.ctx, it.l, it.req, now)
		default:
			it.answer, it.err = x.signPlan(it.ctx, it.plan)
		}
		result := &activationsv1.CreateLeaseBatchResult{Outcome: &activationsv1.CreateLeaseBatchResult_Response{Response: it.answer}}
		if st := x.observeItem(it.ctx, start, it.err); st != nil {
			result.Outcome = &activationsv1.CreateLeaseBatchResult_Error{Error: st}
		} else {
			// A lease is given only for a usable license.
			result.UpdateClass = licensingclient.UpdateClass(it.l)
			result.LicenseExpiresAt = it.l.GetExpiresAt()
		}
		resp.Results[i] = result
	}
	return resp, nil
}

// planLeases reads the bases of the asked items (asks, in their order) in one round trip
// and plans each item's lease from its own.
func (x *Leases) planLeases(ctx context.Context, now time.Time, asked []*leaseItem, asks []store.LeaseAsk) {
	bases, err := x.store.LeaseBases(ctx, asks)
	for i, it := range asked {
		if err != nil {
			it.err = err
			continue
		}
		it.plan, it.err = x.planLease(it.ctx, it.l, it.req, asks[i].TokenHash, now, bases[i])
		// A reinstall's new token is an event, written in its own transaction.
		it.alone = it.err == nil && it.plan.writes && it.plan.renewal.NewTokenHash != nil
	}
}

// renewLeases applies the planned writes of the items in one store call. An item whose
// seat changed since the read (or whose write failed with the batch: a deadlock with
// another replica's batch, say) is signed alone, as its own call would be.
func (x *Leases) renewLeases(ctx context.Context, items []*leaseItem) {
	var writing []*leaseItem
	var renewals []store.LeaseRenewal
	for _, it := range items {
		if it.err == nil && !it.alone && it.plan.writes {
			writing = append(writing, it)
			renewals = append(renewals, it.plan.renewal)
		}
	}
	if len(renewals) == 0 {
		return
	}
	renewed, err := x.store.RenewLeases(ctx, renewals)
	for i, it := range writing {
		it.alone = err != nil || !renewed[i]
	}
}

// observeItem logs and counts a batch item as a CreateLease call, as the activations
// service's batch items are (Server.observeItem), and returns the status its own call
// would have failed with, or nil.
func (x *Leases) observeItem(ctx context.Context, start time.Time, err error) *activationsv1.CallStatus {
	return (&Server{log: x.cfg.Log}).observeItem(ctx, activationsv1.LeasesService_CreateLease_FullMethodName, start, err)
}
