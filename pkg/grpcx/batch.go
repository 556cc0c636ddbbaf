package grpcx

import (
	"cmp"
	"context"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Default bounds of a Batcher: at most DefaultBatchSize calls per batch, one batch out at
// a time (fewer in flight make larger, cheaper batches).
const (
	DefaultBatchSize = 64
	DefaultInFlight  = 1
)

// Batcher sends the calls of one kind that arrive while earlier batches are out as one
// batch call (Send), and hands each its own result. A lone call goes at once, so
// batching adds no wait to an idle process; under load every batch carries what arrived
// while the one before was out. Set the fields before the first Do.
//
// The call that finds a batch slot free sends the batch itself, in its caller's
// goroutine, rather than handing it to a new goroutine and waiting for that one: at a
// moderate load most batches carry one or two calls, and the hand-off cost a goroutine
// and two wake-ups each. What queues while it is out goes on in a goroutine.
type Batcher[Item, Result any] struct {
	// Send makes one batch call: one result per item, in the items' order, or the error
	// of the whole call.
	Send func(ctx context.Context, items []Item) ([]Result, error)
	// Reads: the calls change nothing, so a caller that leaves gets its cancellation at
	// once even when its item is out in a batch (which goes on for the others), unless it
	// is sending that batch itself. Without it, a caller whose item was sent waits for the
	// batch: its change may be made.
	Reads bool
	// MaxSize bounds the calls of one batch (0: DefaultBatchSize); MaxInFlight the
	// batches out at once (0: DefaultInFlight).
	MaxSize, MaxInFlight int

	mu       sync.Mutex
	queue    []*batchedCall[Item, Result]
	inFlight int
}

// batchedCall is one call waiting for its batch.
type batchedCall[Item, Result any] struct {
	ctx    context.Context
	item   Item
	result Result
	err    error
	done   chan struct{}
	// sent: the call went out in a batch; abandoned: its caller left before. Both are
	// guarded by the batcher's mu, so a call is either sent or answered unsent.
	sent, abandoned bool
}

// Do queues item and waits for its result, or for ctx to end.
func (b *Batcher[Item, Result]) Do(ctx context.Context, item Item) (Result, error) {
	c := &batchedCall[Item, Result]{ctx: ctx, item: item, done: make(chan struct{})}
	b.mu.Lock()
	b.queue = append(b.queue, c)
	lead := b.inFlight < cmp.Or(b.MaxInFlight, DefaultInFlight)
	if lead {
		b.inFlight++
	}
	b.mu.Unlock()
	if lead {
		b.lead(c)
	}
	select {
	case <-c.done:
		return c.result, c.err
	case <-ctx.Done():
	}
	b.mu.Lock()
	sent := c.sent
	c.abandoned = !sent
	b.mu.Unlock()
	if sent && !b.Reads {
		// Its batch is out: the change may be made, so the answer waits for the batch's
		// (bounded by the batch's deadline, the latest of its calls'). A 503 now would
		// tell the client to retry a change that may have been applied.
		<-c.done
		return c.result, c.err
	}
	// Never sent, never made (or only read).
	var none Result
	return none, status.FromContextError(ctx.Err()).Err()
}

// lead sends batches, holding the slot Do took, until a batch has taken c (the first,
// unless more than MaxSize calls were queued before it), then leaves what queued
// meanwhile to a goroutine. A batch that took c has answered it or left it out (its
// caller had gone), or is another sender's, out still, which answers it. When the queue
// runs dry first, sendNext has given the slot up.
func (b *Batcher[Item, Result]) lead(c *batchedCall[Item, Result]) {
	for b.sendNext() {
		b.mu.Lock()
		if !c.sent && !c.abandoned {
			b.mu.Unlock()
			continue
		}
		if len(b.queue) == 0 {
			b.inFlight--
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		go b.run()
		return
	}
}

// run sends batches until nothing is queued.
func (b *Batcher[Item, Result]) run() {
	for b.sendNext() {
	}
}

// sendNext sends the next batch of the queue and reports true; with nothing queued it
// gives the slot up and reports false.
func (b *Batcher[Item, Result]) sendNext() bool {
	b.mu.Lock()
	n := min(len(b.queue), cmp.Or(b.MaxSize, DefaultBatchSize))
	if n == 0 {
		b.inFlight--
		b.mu.Unlock()
		return false
	}
	batch := make([]*batchedCall[Item, Result], n)
	copy(batch, b.queue)
	b.queue = append(b.queue[:0], b.queue[n:]...)
	b.mu.Unlock()
	b.call(batch)
	return true
}

// call sends one batch and hands each call its result. Calls whose client left are not
// sent (Do answers them with their cancellation); the others wait for the batch. The batch lasts as
// long as its longest-waiting call may.
func (b *Batcher[Item, Result]) call(batch []*batchedCall[Item, Result]) {
	live := batch[:0]
	items := make([]Item, 0, len(batch))
	var deadline time.Time
	unbounded := false // a request without a deadline (REQUEST_TIMEOUT unset in tests)
	b.mu.Lock()
	for _, c := range batch {
		if c.abandoned || c.ctx.Err() != nil {
			c.abandoned = true
			continue
		}
		c.sent = true
		live = append(live, c)
		items = append(items, c.item)
		d, ok := c.ctx.Deadline()
		unbounded = unbounded || !ok
		if d.After(deadline) {
			deadline = d
		}
	}
	b.mu.Unlock()
	if len(live) == 0 {
		return
	}
	// The batch is a trace of its own, linked to each of its calls' (links.go).
	ctx := withLinks(context.Background(), len(live), func(i int) context.Context { return live[i].ctx })
	if !unbounded {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	results, err := b.Send(ctx, items)
	if err == nil && len(results) != len(live) {
		err = status.Errorf(codes.Internal, "batch call: %d answers for %d calls", len(results), len(live))
	}
	for i, c := range live {
		if err != nil {
			c.err = err
		} else {
			c.result = results[i]
		}
		close(c.done)
	}
}

// Queued is how many calls wait for a batch (tests watch it).
func (b *Batcher[Item, Result]) Queued() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue)
}
