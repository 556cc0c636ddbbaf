package natsx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keyhouse/keyhouse/pkg/telemetry"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Handler processes one message. JetStream delivers at least once (a lost ack, a handler
// that outlived AckWait, a crash after the work and before the ack, a relay re-publish
// outside the duplicate window), so a handler MUST be idempotent: doing the work twice
// must leave the same state as doing it once, e.g. by keying its writes on the message's
// id and using INSERT … ON CONFLICT DO NOTHING.
//
// Return nil when done (the message is acked), an error to have it redelivered later with
// a growing delay, Permanent(err) when retrying cannot help (the message is
// terminated), or Again(d) when the work is done for now and must be done once more d
// from now. ctx is not canceled by shutdown, so the work in hand can finish; it ends
// at the consumer's AckWait, after which JetStream would redeliver anyway.
type Handler func(ctx context.Context, msg jetstream.Msg) error

type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// Permanent marks err as not worth retrying (a malformed payload, a reference that will
// never exist): Consume terminates the message with a log line instead of redelivering
// it. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanentError{err: err}
}

// IsPermanent reports whether err (or an error it wraps) was made by Permanent.
func IsPermanent(err error) bool {
	var p permanentError
	return errors.As(err, &p)
}

type againError struct{ after time.Duration }

func (e againError) Error() string { return "deliver again after " + e.after.String() }

// Again asks for the message to be delivered again after d, with no failure logged: the
// handler did its work and must do it once more then (tenantpurge's second purge).
func Again(d time.Duration) error { return againError{after: d} }

type consumeOptions struct {
	retryMin, retryMax time.Duration
	pullBatch          int
}

// ConsumeOption tunes Consume.
type ConsumeOption func(*consumeOptions)

// WithRetryDelay sets the redelivery delay after a handler error: first, doubled per
// delivery, capped at last (default 1s … 1m).
func WithRetryDelay(first, last time.Duration) ConsumeOption {
	return func(o *consumeOptions) { o.retryMin, o.retryMax = first, max(first, last) }
}

// WithPullBatch sets how many messages are fetched ahead (default 8). Messages wait in
// this buffer while AckWait runs, so it stays small: the handler runs one at a time.
func WithPullBatch(n int) ConsumeOption { return func(o *consumeOptions) { o.pullBatch = max(n, 1) } }

// Consume runs handle over a durable pull consumer on stream until ctx is done, then
// drains: the handler call in progress finishes and is acked, and messages fetched but
// not started are nak'ed for another replica. It returns nil after a clean stop.
//
// cfg.Durable is required; replicas sharing it share the work. The consumer is created or
// updated idempotently, with AckPolicy forced to explicit; AckWait defaults to 30s and
// MaxDeliver, when zero, to unlimited (a message that keeps failing is retried with the
// backoff cap until a handler returns Permanent or an operator steps in, rather than
// silently dropped). When MaxDeliver is set and the last delivery fails, Consume logs it
// as an error and terminates the message. A message whose handler panics on its fifth
// delivery or later is terminated too (poison, not an outage). Every termination is one
// ERROR line with its reason and a count in keyhouse_consumer_terminated_total.
//
// While NATS is unreachable, Consume waits and resumes; if the consumer is deleted under
// it, it is created again.
func Consume(ctx context.Context, js jetstream.JetStream, stream string, cfg jetstream.ConsumerConfig,
	handle Handler, log *slog.Logger, opts ...ConsumeOption) error {
	if handle == nil {
		return errors.New("natsx: consume: nil handler")
	}
	c, err := newConsumer(ctx, stream, cfg, log, opts)
	if err != nil {
		return err
	}
	c.handle = handle
	o := c.opts

	for {
		cons, err := c.create(ctx, js)
		if cons == nil {
			return err
		}
		cc, err := cons.Consume(c.onMessage,
			jetstream.PullMaxMessages(o.pullBatch),
			jetstream.ConsumeErrHandler(c.onError))
		if err != nil {
			return fmt.Errorf("natsx: consume %s/%s: %w", stream, cfg.Durable, err)
		}
		select {
		case <-ctx.Done():
			c.stop(cc)
			consumers.set(stream, cfg.Durable, nil)
			return nil
		case <-cc.Closed():
			// The subscription ended on its own: the consumer was deleted, or the
			// connection closed. Start over, which tells the two apart.
			c.log.Warn("consumer subscription ended, recreating")
			if !sleepCtx(ctx, 100*time.Millisecond) {
				return nil
			}
		}
	}
}

// newConsumer applies Consume's defaults to cfg and opts.
func newConsumer(ctx context.Context, stream string, cfg jetstream.ConsumerConfig, log *slog.Logger, opts []ConsumeOption) (*consumer, error) {
	if cfg.Durable == "" {
		return nil, errors.New("natsx: consume: ConsumerConfig.Durable is required")
	}
	if log == nil {
		log = slog.Default()
	}
	o := consumeOptions{retryMin: time.Second, retryMax: time.Minute, pullBatch: 8}
	for _, opt := range opts {
		opt(&o)
	}
	cfg.AckPolicy = jetstream.AckExplicitPolicy
	if cfg.AckWait <= 0 {
		cfg.AckWait = 30 * time.Second
	}
	if cfg.MaxDeliver == 0 {
		cfg.MaxDeliver = -1
	}
	// Every reason's series is there at 0 from the start, so an alert on an increase has
	// a series before the first termination.
	for _, reason := range []string{termPermanent, termPanic, termMaxDeliveries, termMalformed} {
		consumerTerminated.WithLabelValues(stream, cfg.Durable, reason)
	}
	return &consumer{
		base:     context.WithoutCancel(ctx),
		erroring: erroringFlag(stream, cfg.Durable),
		stream:   stream,
		cfg:      cfg,
		opts:     o,
		log:      log.With("component", "consumer", "stream", stream, "consumer", cfg.Durable),
	}, nil
}

// create creates or updates the durable consumer, retrying while NATS is unreachable. It
// returns a nil consumer when ctx ended (nil error) or the connection is closed for good.
func (c *consumer) create(ctx context.Context, js jetstream.JetStream) (jetstream.Consumer, error) {
	for attempt := 1; ; attempt++ {
		cons, err := js.CreateOrUpdateConsumer(ctx, c.stream, c.cfg)
		if err == nil {
			if attempt > 1 {
				c.log.Info("consumer ready")
			}
			consumers.set(c.stream, c.cfg.Durable, cons)
			return cons, nil
		}
		if ctx.Err() != nil {
			return nil, nil
		}
		if js.Conn().IsClosed() {
			return nil, fmt.Errorf("natsx: consume %s/%s: connection closed", c.stream, c.cfg.Durable)
		}
		if attempt == 1 {
			c.log.Warn("cannot create consumer, retrying", "error", err.Error())
		}
		if !sleepCtx(ctx, jitter(backoff(100*time.Millisecond, 5*time.Second, attempt))) {
			return nil, nil
		}
	}
}

type consumer struct {
	base   context.Context // ctx's values without its cancel: handlers finish at shutdown
	stream string
	cfg    jetstream.ConsumerConfig
	opts   consumeOptions
	handle Handler
	log    *slog.Logger

	// stopping makes every callback that starts after shutdown began nak its message
	// instead of starting work. mu is held for the whole of each handler call (callbacks
	// of one subscription run one after another, so it costs nothing): stop takes it to
	// wait for the call in progress, even when draining gives up.
	stopping atomic.Bool
	mu       sync.Mutex

	// erroring: a consume error was logged and no message has succeeded since. Every
	// Consume of one durable consumer in the process shares it (the storefront runs
	// several), so an outage is one WARN line, not one per loop.
	erroring *atomic.Bool
}

// erroring holds the erroring flag of each durable consumer of the process, by stream
// and durable name.
var erroring sync.Map

func erroringFlag(stream, durable string) *atomic.Bool {
	flag, _ := erroring.LoadOrStore([2]string{stream, durable}, new(atomic.Bool))
	return flag.(*atomic.Bool)
}

// stop drains the subscription: in-flight work finishes, buffered messages are nak'ed.
func (c *consumer) stop(cc jetstream.ConsumeContext) {
	c.stopping.Store(true)
	c.log.Debug("consumer draining")
	c.mu.Lock() // waits for the handler call in progress
	c.mu.Unlock()
	cc.Drain()
	select {
	case <-cc.Closed():
	case <-time.After(10 * time.Second):
		// Draining needs the server; with NATS down the buffered messages are simply
		// redelivered after AckWait.
		cc.Stop()
	}
}

func (c *consumer) onError(_ jetstream.ConsumeContext, err error) {
	if c.erroring.CompareAndSwap(false, true) {
		c.log.Warn("consume error, retrying", "error", err.Error())
		return
	}
	c.log.Debug("consume error", "error", err.Error())
}

func (c *consumer) onMessage(msg jetstream.Msg) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopping.Load() {
		_ = msg.Nak()
		return
	}
	meta, err := msg.Metadata()
	if err != nil {
		c.terminate(msg, c.log.With("subject", msg.Subject()), termMalformed, "not a JetStream message, terminating", err)
		return
	}
	log := c.log.With("subject", msg.Subject(), "stream_seq", meta.Sequence.Stream, "delivery", meta.NumDelivered)

	err = c.call(msg)
	if err == nil || errors.As(err, new(againError)) {
		c.erroring.Store(false)
	}
	c.settle(msg, meta, log, err, func() error {
		actx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		// A double ack makes a lost ack visible here; the message would be redelivered
		// after AckWait and the idempotent handler would absorb it.
		return msg.DoubleAck(actx)
	})
}

// settle ends a handled message by the handler's result: acked (with ack) on success,
// delivered again when asked (Again), terminated when the failure is permanent, poison or its last delivery, else redelivered
// with a growing delay.
func (c *consumer) settle(msg jetstream.Msg, meta *jetstream.MsgMetadata, log *slog.Logger, err error, ack func() error) {
	var again againError
	switch {
	case err == nil:
		if err := ack(); err != nil {
			log.Warn("ack failed, message will be redelivered", "error", err.Error())
		}
	case errors.As(err, &again):
		_ = msg.NakWithDelay(again.after)
	case IsPermanent(err):
		c.terminate(msg, log, termPermanent, "permanent failure, message terminated", err)
	case errors.As(err, new(panicError)) && meta.NumDelivered >= maxPanics:
		// An outage makes handlers fail, not panic: a message that panics the handler
		// delivery after delivery is poison, and retrying it for ever helps nobody.
		c.terminate(msg, log, termPanic, "handler panicked on every delivery, message terminated", err)
	case c.cfg.MaxDeliver > 0 && meta.NumDelivered >= uint64(c.cfg.MaxDeliver):
		c.terminate(msg, log, termMaxDeliveries, "giving up after the last allowed delivery, message terminated", err)
	default:
		delay := backoff(c.opts.retryMin, c.opts.retryMax, int(min(meta.NumDelivered, 64)))
		log.Warn("handler failed, will redeliver", "error", err.Error(), "retry_in", delay.String())
		_ = msg.NakWithDelay(delay)
	}
}

// maxPanics is the delivery after which a message whose handler panics is terminated.
const maxPanics = 5

// Termination reasons, the values of keyhouse_consumer_terminated_total's reason label
// and the reason JetStream records with the termination.
const (
	termPermanent     = "permanent"
	termPanic         = "panic"
	termMaxDeliveries = "max_deliveries"
	termMalformed     = "not_jetstream"
)

// terminate ends msg for good: one ERROR line with the handler's error, a count in
// keyhouse_consumer_terminated_total, and the reason on the JetStream termination.
func (c *consumer) terminate(msg jetstream.Msg, log *slog.Logger, reason, line string, err error) {
	log.Error(line, "reason", reason, "error", err.Error())
	consumerTerminated.WithLabelValues(c.stream, c.cfg.Durable, reason).Inc()
	_ = msg.TermWithReason(reason)
}

// panicError is a recovered handler panic.
type panicError struct{ value string }

func (e panicError) Error() string { return "handler panic: " + e.value }

// call runs the handler with a context that survives shutdown but not AckWait, and turns
// a panic into an error rather than a crashed service: retried like any failure, and
// terminated once it has panicked on maxPanics deliveries.
func (c *consumer) call(msg jetstream.Msg) (err error) {
	ctx, cancel := context.WithTimeout(c.base, c.cfg.AckWait)
	defer cancel()
	ctx, span := c.startSpan(ctx, msg)
	defer func() {
		if err != nil {
			span.SetStatus(codes.Error, "handler failed") // its ERROR or WARN line says why
		}
		span.End()
	}()
	defer func() {
		if r := recover(); r != nil {
			c.log.Error("handler panic", "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			err = panicError{value: fmt.Sprint(r)}
		}
	}()
	return c.handle(ctx, msg)
}

// startSpan starts the span of a handler call: a trace of its own, "<durable> process",
// linked to the span of each request that wrote one of msgs' outbox rows
// (HeaderTraceparent), so an operator follows a purchase from its callback to its
// fulfillment, or an issued license to its event. With tracing off the messages' headers
// are not read (telemetry.StartRoot).
func (c *consumer) startSpan(ctx context.Context, msgs ...jetstream.Msg) (context.Context, trace.Span) {
	traceparents := func(yield func(string) bool) {
		for _, m := range msgs {
			if !yield(m.Headers().Get(HeaderTraceparent)) {
				return
			}
		}
	}
	return telemetry.StartRoot(ctx, c.cfg.Durable+" process", trace.SpanKindConsumer, traceparents,
		attribute.String("messaging.system", "nats"), attribute.String("messaging.destination.name", c.stream),
		attribute.String("messaging.consumer.group.name", c.cfg.Durable), attribute.Int("messaging.batch.message_count", len(msgs)))
}

// sleepCtx waits d or until ctx is done, reporting whether the full wait happened.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
