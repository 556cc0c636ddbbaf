package edge

import (
	"context"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A request admission control lets through without a slot because the gateway's cache
// holds its answer (Caches.AnswersFromMemory) may find the answer gone when its handler
// asks: it expired, or a change dropped it, while the request waited for its turn on a
// busy gateway. Such a miss reaches the services as any other does, so it takes a slot
// first (slotForMiss), and is refused as admission control refuses when none is left:
// without it, one tenant's flood of such misses joined every other tenant's batches with
// nothing to hold it back.

type slotOnMissKey struct{}

// WithSlotOnMiss returns ctx for a request let through without a slot: take is called if
// its answer is gone when the handler asks, and returns the slot's release, or false
// when the request is refused (take then set the refusal's headers).
func WithSlotOnMiss(ctx context.Context, take func() (release func(), ok bool)) context.Context {
	return context.WithValue(ctx, slotOnMissKey{}, take)
}

// errRefusedOnMiss is the error of a miss refused for want of a slot: the 503 admission
// control answers (WriteOverloaded), the same status and body as any dependency's that
// could not take the call.
var errRefusedOnMiss = status.Error(codes.Unavailable, apierr.UnavailableMessage)

// slotForMiss takes the slot a miss of ctx's request needs when it was let through
// without one, and returns its release (nothing to release for any other request), or
// errRefusedOnMiss.
func slotForMiss(ctx context.Context) (release func(), err error) {
	take, _ := ctx.Value(slotOnMissKey{}).(func() (func(), bool))
	if take == nil {
		return func() {}, nil
	}
	release, ok := take()
	if !ok {
		return nil, errRefusedOnMiss
	}
	return release, nil
}
