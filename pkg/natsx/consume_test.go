package natsx

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/devinfra"
	"github.com/keyhouse/keyhouse/devinfra/devnats"
	"github.com/keyhouse/keyhouse/devinfra/testkit"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func publish(t *testing.T, js jetstream.JetStream, subject, msgID string) {
	t.Helper()
	if _, err := js.Publish(context.Background(), subject, []byte(msgID), jetstream.WithMsgID(msgID)); err != nil {
		t.Fatal(err)
	}
}

func consumerInfo(t *testing.T, js jetstream.JetStream, stream, durable string) *jetstream.ConsumerInfo {
	t.Helper()
	c, err := js.Consumer(context.Background(), stream, durable)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil // Consume has not created it yet
	}
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// settled reports a consumer with nothing pending and nothing awaiting an ack or a
// redelivery: every message reached a final outcome (ack or term).
func settled(info *jetstream.ConsumerInfo, streamSeq uint64) bool {
	return info != nil && info.NumPending == 0 && info.NumAckPending == 0 && info.AckFloor.Stream == streamSeq
}

// deliveries records, per message, the NumDelivered of each handler call.
type deliveries struct {
	mu  sync.Mutex
	got map[string][]uint64
}

func (d *deliveries) add(msg jetstream.Msg) uint64 {
	meta, err := msg.Metadata()
	if err != nil {
		panic(err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.got == nil {
		d.got = map[string][]uint64{}
	}
	id := string(msg.Data())
	d.got[id] = append(d.got[id], meta.NumDelivered)
	return meta.NumDelivered
}

func (d *deliveries) of(id string) []uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]uint64(nil), d.got[id]...)
}

func TestConsumerRedeliversAfterHandlerErrorAndAcksOnSuccess(t *testing.T) {
	t.Parallel()
	_, js := connect(t, devnats.SharedURL(t), nil)
	stream, prefix := newStream(t, js)
	log, _ := newLog(t)

	var d deliveries
	handle := func(ctx context.Context, msg jetstream.Msg) error {
		if d.add(msg) < 3 {
			return errors.New("mail server unavailable")
		}
		return nil
	}
	cfg := jetstream.ConsumerConfig{Durable: "mailer", FilterSubject: prefix + ".>"}
	background(t, func(ctx context.Context) error {
		return Consume(ctx, js, stream, cfg, handle, log, WithRetryDelay(20*time.Millisecond, 100*time.Millisecond))
	})
	publish(t, js, prefix+".order.paid", "order:1")

	eventually(t, 10*time.Second, "message acked after two failures", func() bool {
		return settled(consumerInfo(t, js, stream, "mailer"), 1)
	})
	if got := d.of("order:1"); fmt.Sprint(got) != "[1 2 3]" {
		t.Fatalf("deliveries = %v, want [1 2 3]", got)
	}
	info := consumerInfo(t, js, stream, "mailer")
	if info.Config.AckPolicy != jetstream.AckExplicitPolicy {
		t.Errorf("ack policy = %v, want explicit", info.Config.AckPolicy)
	}
}

func TestConsumerTerminatesPermanentFailureWithoutRedelivery(t *testing.T) {
	t.Parallel()
	_, js := connect(t, devnats.SharedURL(t), nil)
	stream, prefix := newStream(t, js)
	log, rec := newLog(t)

	var d deliveries
	handle := func(ctx context.Context, msg jetstream.Msg) error {
		d.add(msg)
		if string(msg.Data()) == "poison" {
			return Permanent(errors.New("payload is not JSON"))
		}
		return nil
	}
	cfg := jetstream.ConsumerConfig{Durable: "worker", FilterSubject: prefix + ".>"}
	background(t, func(ctx context.Context) error {
		return Consume(ctx, js, stream, cfg, handle, log, WithRetryDelay(10*time.Millisecond, 10*time.Millisecond))
	})
	publish(t, js, prefix+".ev", "poison")
	publish(t, js, prefix+".ev", "good")

	// A nak'ed poison message would keep NumAckPending above zero; only a term settles it.
	eventually(t, 10*time.Second, "both messages settled", func() bool {
		return settled(consumerInfo(t, js, stream, "worker"), 2)
	})
	if got := d.of("poison"); len(got) != 1 {
		t.Errorf("poison delivered %v, want once", got)
	}
	if got := d.of("good"); len(got) != 1 {
		t.Errorf("good delivered %v, want once", got)
	}
	if n := rec.count("permanent failure, message terminated"); n != 1 {
		t.Errorf("logged %d permanent-failure lines, want 1", n)
	}
	if !IsPermanent(fmt.Errorf("wrapped: %w", Permanent(errors.New("x")))) || IsPermanent(errors.New("x")) || Permanent(nil) != nil {
		t.Error("Permanent/IsPermanent do not round-trip")
	}
}

// Again is no failure: the message comes back once more, after the delay asked for rather
// than the retry delay, and nothing is logged as failing.
func TestConsumerDeliversAgainWhenAskedWithoutLoggingAFailure(t *testing.T) {
	t.Parallel()
	_, js := connect(t, devnats.SharedURL(t), nil)
	stream, prefix := newStream(t, js)
	log, rec := newLog(t)

	var d deliveries
	const after = 300 * time.Millisecond
	var first time.Time
	var gap time.Duration
	handle := func(ctx context.Context, msg jetstream.Msg) error {
		if d.add(msg) == 1 {
			first = time.Now()
			return Again(after)
		}
		gap = time.Since(first)
		return nil
	}
	cfg := jetstream.ConsumerConfig{Durable: "twice", FilterSubject: prefix + ".>"}
	background(t, func(ctx context.Context) error {
		return Consume(ctx, js, stream, cfg, handle, log, WithRetryDelay(time.Millisecond, time.Millisecond))
	})
	publish(t, js, prefix+".ev", "purge")

	eventually(t, 10*time.Second, "message acked on its second delivery", func() bool {
		return settled(consumerInfo(t, js, stream, "twice"), 1)
	})
	if got := d.of("purge"); fmt.Sprint(got) != "[1 2]" {
		t.Fatalf("deliveries = %v, want [1 2]", got)
	}
	if gap < after {
		t.Errorf("delivered again after %v, want at least %v", gap, after)
	}
	if n := rec.count("handler failed, will redeliver"); n != 0 {
		t.Errorf("logged %d failure lines for Again, want none", n)
	}
}

func TestConsumerStopsRetryingAtMaxDeliver(t *testing.T) {
	t.Parallel()
	_, js := connect(t, devnats.SharedURL(t), nil)
	stream, prefix := newStream(t, js)
	log, rec := newLog(t)

	var d deliveries
	handle := func(ctx context.Context, msg jetstream.Msg) error {
		d.add(msg)
		return errors.New("always failing")
	}
	cfg := jetstream.ConsumerConfig{Durable: "capped", FilterSubject: prefix + ".>", MaxDeliver: 3}
	background(t, func(ctx context.Context) error {
		return Consume(ctx, js, stream, cfg, handle, log, WithRetryDelay(10*time.Millisecond, 10*time.Millisecond))
	})
	publish(t, js, prefix+".ev", "doomed")

	eventually(t, 10*time.Second, "message settled after its last delivery", func() bool {
		return settled(consumerInfo(t, js, stream, "capped"), 1)
	})
	if got := d.of("doomed"); fmt.Sprint(got) != "[1 2 3]" {
		t.Errorf("deliveries = %v, want [1 2 3]", got)
	}
	if n := rec.count("giving up after the last allowed delivery, message terminated"); n != 1 {
		t.Errorf("logged %d give-up lines, want 1", n)
	}
}

// A message that panics the handler on every delivery is poison, not an outage: it is
// terminated on its fifth delivery (with no MaxDeliver set), counted and logged, and the
// message behind it is handled.
func TestConsumerTerminatesAMessageThatPanicsOnEveryDelivery(t *testing.T) {
	t.Parallel()
	_, js := connect(t, devnats.SharedURL(t), nil)
	stream, prefix := newStream(t, js)
	log, rec := newLog(t)

	var d deliveries
	handle := func(ctx context.Context, msg jetstream.Msg) error {
		d.add(msg)
		if string(msg.Data()) == "poison" {
			var m map[string]int
			m["boom"]++ // nil map: a panic, as a bug on one message's data would cause
		}
		return nil
	}
	cfg := jetstream.ConsumerConfig{Durable: "panicky", FilterSubject: prefix + ".>"}
	before := testutil.ToFloat64(consumerTerminated.WithLabelValues(stream, "panicky", termPanic))
	background(t, func(ctx context.Context) error {
		return Consume(ctx, js, stream, cfg, handle, log, WithRetryDelay(10*time.Millisecond, 10*time.Millisecond))
	})
	publish(t, js, prefix+".ev", "poison")
	publish(t, js, prefix+".ev", "good")

	eventually(t, 10*time.Second, "both messages settled", func() bool {
		return settled(consumerInfo(t, js, stream, "panicky"), 2)
	})
	if got := d.of("poison"); fmt.Sprint(got) != "[1 2 3 4 5]" {
		t.Errorf("poison deliveries = %v, want [1 2 3 4 5]", got)
	}
	if got := d.of("good"); len(got) != 1 {
		t.Errorf("good delivered %v, want once", got)
	}
	if n := rec.count("handler panicked on every delivery, message terminated"); n != 1 {
		t.Errorf("logged %d terminated lines, want 1", n)
	}
	if got := rise(t, consumerTerminated.WithLabelValues(stream, "panicky", termPanic), before); got != 1 {
		t.Errorf("keyhouse_consumer_terminated_total{reason=panic} rose by %v, want 1", got)
	}
}

func TestConsumerShutdownFinishesTheMessageInHandAndStartsNoOther(t *testing.T) {
	t.Parallel()
	_, js := connect(t, devnats.SharedURL(t), nil)
	stream, prefix := newStream(t, js)
	log, rec := newLog(t)

	started := make(chan struct{})
	release := make(chan struct{})
	var (
		d                  deliveries
		calls              atomic.Int32
		finished, ctxAlive atomic.Bool
	)
	handle := func(ctx context.Context, msg jetstream.Msg) error {
		d.add(msg)
		if calls.Add(1) == 1 {
			close(started)
			<-release
			ctxAlive.Store(ctx.Err() == nil)
			finished.Store(true)
		}
		return nil
	}
	cfg := jetstream.ConsumerConfig{Durable: "slow", FilterSubject: prefix + ".>"}
	stop := background(t, func(ctx context.Context) error {
		err := Consume(ctx, js, stream, cfg, handle, log)
		if !finished.Load() {
			t.Error("Consume returned while its handler was still running")
		}
		return err
	})
	for i := 1; i <= 3; i++ {
		publish(t, js, prefix+".ev", fmt.Sprintf("slow-%d", i))
	}
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("handler never started")
	}
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	// Release the first handler only once shutdown has begun, so that an early return,
	// a canceled handler context or a second message started during the drain all show.
	eventually(t, 10*time.Second, "consumer draining", func() bool { return rec.count("consumer draining") == 1 })
	close(release)
	<-stopped

	if !ctxAlive.Load() {
		t.Error("handler context was canceled by shutdown")
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("%d handler calls during shutdown, want only the one in hand", n)
	}
	if info := consumerInfo(t, js, stream, "slow"); info.AckFloor.Stream < 1 {
		t.Errorf("message in hand not acked at shutdown (ack floor %d)", info.AckFloor.Stream)
	}
	// What was not started is not lost: the next replica gets it.
	background(t, func(ctx context.Context) error { return Consume(ctx, js, stream, cfg, handle, log) })
	eventually(t, 10*time.Second, "the rest consumed by a new consumer", func() bool {
		return settled(consumerInfo(t, js, stream, "slow"), 3)
	})
	for i := 1; i <= 3; i++ {
		if got := d.of(fmt.Sprintf("slow-%d", i)); len(got) != 1 {
			t.Errorf("slow-%d handled %d times, want once", i, len(got))
		}
	}
}

func TestConsumeRequiresDurable(t *testing.T) {
	t.Parallel()
	_, js := connect(t, devnats.SharedURL(t), nil)
	err := Consume(context.Background(), js, "ANY", jetstream.ConsumerConfig{}, func(context.Context, jetstream.Msg) error { return nil }, nil)
	if err == nil || !strings.Contains(err.Error(), "Durable") {
		t.Fatalf("err = %v, want a Durable error", err)
	}
}

func TestEnsureStreamIsSafeForConcurrentReplicas(t *testing.T) {
	t.Parallel()
	_, js := connect(t, devnats.SharedURL(t), nil)
	name := strings.ToUpper(uniqueName(t))
	// Two versions of a service rolling out at once, several replicas each.
	v1 := jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}, MaxAge: time.Hour}
	v2 := v1
	v2.MaxAge = 2 * time.Hour
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		cfg := v1
		if i%2 == 1 {
			cfg = v2
		}
		wg.Go(func() { errs <- EnsureStream(context.Background(), js, cfg) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	// And again, sequentially: a restart with an unchanged config is a no-op.
	if err := EnsureStream(context.Background(), js, v2); err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CachedInfo().Config.MaxAge; got != 2*time.Hour {
		t.Fatalf("MaxAge = %s after the last ensure, want 2h", got)
	}
}

func TestConnectWaitsForNATSToComeUp(t *testing.T) {
	t.Parallel()
	testkit.Integration(t)
	port, err := devinfra.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)

	log, rec := newLog(t)

	// Nobody there and a short ctx: Connect gives up with the ctx error.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, _, err := Connect(ctx, url, "test", log); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Connect to nothing = %v, want deadline exceeded", err)
	}

	// A server that starts while Connect waits: Connect returns a working JetStream.
	type result struct {
		nc  *nats.Conn
		js  jetstream.JetStream
		err error
	}
	got := make(chan result, 1)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel2()
	go func() {
		nc, js, err := Connect(ctx2, url, "test", log)
		got <- result{nc, js, err}
	}()
	eventually(t, 10*time.Second, "Connect reports it is waiting", func() bool { return rec.count("nats not reachable yet, waiting") == 2 })
	srv, err := devnats.Start(filepath.Join(testkit.Dir(t), uniqueName(t)), port)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(r.nc.Close)
	if _, err := r.js.AccountInfo(context.Background()); err != nil {
		t.Fatalf("jetstream after a late connect: %v", err)
	}
}
