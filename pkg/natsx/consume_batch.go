package natsx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// BatchHandler processes the messages of one fetch together (one transaction for all of
// them, say) and returns one result per message, in order, each read as a Handler's:
// nil acks the message, Permanent(err) terminates it, another error redelivers it with a
// growing delay. The idempotency rule of Handler holds for every message.
type BatchHandler func(ctx context.Context, msgs []jetstream.Msg) []error

// ConsumeBatch is Consume for a handler whose cost is per call rather than per message:
// it hands the handler every message waiting, up to WithPullBatch at a time, and one
// message as soon as it arrives when nothing else waits, so a burst goes through in few
// calls and a trickle waits for no batch to fill. The messages are acked after the
// handler returned (after its commit). At shutdown the batch in hand finishes and is
// acked. Consumer creation, redelivery, termination and the metrics are Consume's.
func ConsumeBatch(ctx context.Context, js jetstream.JetStream, stream string, cfg jetstream.ConsumerConfig,
	handle BatchHandler, log *slog.Logger, opts ...ConsumeOption) error {
	if handle == nil {
		return errors.New("natsx: consume: nil handler")
	}
	c, err := newConsumer(ctx, stream, cfg, log, opts)
	if err != nil {
		return err
	}
	for {
		cons, err := c.create(ctx, js)
		if cons == nil {
			return err
		}
		err = c.fetchLoop(ctx, cons, handle)
		consumers.set(stream, c.cfg.Durable, nil)
		if ctx.Err() != nil {
			return nil
		}
		if js.Conn().IsClosed() {
			return fmt.Errorf("natsx: consume %s/%s: connection closed", stream, c.cfg.Durable)
		}
		c.log.Warn("consumer gone, recreating", "error", err.Error())
		if !sleepCtx(ctx, 100*time.Millisecond) {
			return nil
		}
	}
}

// fetchLoop fetches and handles batches until ctx ends (nil) or the consumer is gone.
func (c *consumer) fetchLoop(ctx context.Context, cons jetstream.Consumer, handle BatchHandler) error {
	for failures := 0; ctx.Err() == nil; {
		msgs, err := c.fetch(ctx, cons)
		switch {
		case ctx.Err() != nil:
			// A message fetched as ctx ended is handled like the rest: the work is cheap,
			// and otherwise it would wait for AckWait before another replica gets it.
		case errors.Is(err, jetstream.ErrConsumerNotFound), errors.Is(err, jetstream.ErrConsumerDeleted):
			return err
		case err != nil:
			failures++
			c.onError(nil, err)
			if !sleepCtx(ctx, jitter(backoff(100*time.Millisecond, 5*time.Second, failures))) {
				return nil
			}
			continue
		}
		failures = 0
		if len(msgs) > 0 {
			c.erroring.Store(false)
			c.handleBatch(msgs, handle)
		}
	}
	return nil
}

// fetch waits for one message (until ctx ends or the pull expires), then takes whatever
// else is waiting, up to the batch size, without waiting for more.
func (c *consumer) fetch(ctx context.Context, cons jetstream.Consumer) ([]jetstream.Msg, error) {
	first, err := cons.Fetch(1, jetstream.FetchContext(ctx))
	if err != nil {
		return nil, err
	}
	msgs, err := collect(first, nil)
	if len(msgs) == 0 || c.opts.pullBatch == 1 {
		if errors.Is(err, context.Canceled) || errors.Is(err, jetstream.ErrNoMessages) {
			err = nil
		}
		return msgs, err
	}
	rest, err := cons.FetchNoWait(c.opts.pullBatch - 1)
	if err != nil {
		return msgs, nil // the next fetch finds them
	}
	msgs, _ = collect(rest, msgs)
	return msgs, nil
}

func collect(b jetstream.MessageBatch, into []jetstream.Msg) ([]jetstream.Msg, error) {
	for m := range b.Messages() {
		into = append(into, m)
	}
	return into, b.Error()
}

// handleBatch runs handle on msgs and settles each message by its result.
func (c *consumer) handleBatch(msgs []jetstream.Msg, handle BatchHandler) {
	results := c.callBatch(msgs, handle)
	for i, msg := range msgs {
		var err error
		if i < len(results) {
			err = results[i]
		}
		meta, merr := msg.Metadata()
		if merr != nil {
			c.terminate(msg, c.log.With("subject", msg.Subject()), termMalformed, "not a JetStream message, terminating", merr)
			continue
		}
		log := c.log.With("subject", msg.Subject(), "stream_seq", meta.Sequence.Stream, "delivery", meta.NumDelivered)
		// A plain ack: a lost one redelivers the message after AckWait, and the idempotent
		// handler absorbs it; a round trip per message would cost a burst more than its
		// handling.
		c.settle(msg, meta, log, err, msg.Ack)
	}
}

// callBatch is call for a batch: a context that survives shutdown but not AckWait, and a
// panic turned into every message's error.
func (c *consumer) callBatch(msgs []jetstream.Msg, handle BatchHandler) (results []error) {
	ctx, cancel := context.WithTimeout(c.base, c.cfg.AckWait)
	defer cancel()
	ctx, span := c.startSpan(ctx, msgs...)
	defer span.End()
	defer func() {
		if r := recover(); r != nil {
			c.log.Error("handler panic", "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			results = make([]error, len(msgs))
			for i := range results {
				results[i] = panicError{value: fmt.Sprint(r)}
			}
		}
	}()
	return handle(ctx, msgs)
}
