// Package natsx is the NATS JetStream wiring the services share: a connection that rides
// out NATS restarts, idempotent stream setup, a transactional outbox on Postgres (Enqueue
// + Relay) and durable pull consumers (Consume).
//
// The shape follows the rule that a business change and the event announcing it must not
// disagree: a service writes the event into its own outbox table in the same transaction
// as the change, and a Relay publishes it later, however long NATS was away. Delivery is
// at least once from end to end; JetStream's duplicate window (Nats-Msg-Id) removes the
// duplicates the relay itself can cause, and consumers must be idempotent for the rest.
package natsx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	neturl "net/url"
	"sync"
	"time"

	"github.com/keyhouse/keyhouse/pkg/readiness"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Reconnect backoff bounds: quick first retries so a NATS restart costs little, capped so
// a long outage does not turn into a storm of dials from every replica.
const (
	reconnectMin = 100 * time.Millisecond
	reconnectMax = 5 * time.Second
)

// Connect dials NATS at url (one URL or a comma-separated list) as client name and
// returns the connection and its JetStream handle.
//
// It waits for the first connection until ctx is done, so a service started before NATS
// comes up simply waits (bound ctx with a timeout to fail instead). After that the
// connection reconnects forever with a jittered exponential backoff; each disconnect and
// each reconnect is logged once, never once per dial attempt.
//
// Publishes are not buffered while reconnecting (ReconnectBufSize -1): a JetStream
// publish needs the server's ack anyway, so it fails fast and its caller (the Relay, a
// consumer's ack) retries, instead of blocking for the publish timeout on a buffer that
// may never be flushed.
//
// The caller closes the connection (nc.Drain or nc.Close) at shutdown.
func Connect(ctx context.Context, url, name string, log *slog.Logger) (*nats.Conn, jetstream.JetStream, error) {
	if log == nil {
		log = slog.Default()
	}
	log = log.With("component", "nats")
	connected := make(chan struct{})
	var once sync.Once
	nc, err := nats.Connect(url,
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(true),
		nats.CustomReconnectDelay(reconnectDelay),
		nats.ReconnectBufSize(-1),
		nats.PingInterval(20*time.Second),
		nats.MaxPingsOutstanding(3),
		nats.ConnectHandler(func(*nats.Conn) { once.Do(func() { close(connected) }) }),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected, reconnecting", "error", err.Error())
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			log.Info("nats reconnected", "server", c.ConnectedServerId())
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			attrs := []any{"error", err.Error()}
			if sub != nil {
				attrs = append(attrs, "subject", sub.Subject)
			}
			log.Warn("nats async error", attrs...)
		}),
	)
	if err != nil {
		// Not "unreachable" (RetryOnFailedConnect covers that) but a bad URL or option.
		// The URL may carry credentials: never echo it (url.Parse's *url.Error quotes the
		// URL whole), as pgxx does not echo DATABASE_URL.
		var urlErr *neturl.Error
		if errors.As(err, &urlErr) {
			return nil, nil, errors.New("natsx: NATS_URL is not a valid nats:// URL")
		}
		return nil, nil, fmt.Errorf("natsx: connect: %w", err)
	}
	if !nc.IsConnected() {
		log.Warn("nats not reachable yet, waiting")
		select {
		case <-connected:
		case <-ctx.Done():
			nc.Close()
			return nil, nil, fmt.Errorf("natsx: nats not reachable: %w", ctx.Err())
		}
	}
	// The outbox relay publishes asynchronously and stops waiting after its own publish
	// timeout; an ack that never comes is dropped after a minute instead of holding one
	// of the connection's slots for pending acks forever.
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(time.Minute))
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("natsx: jetstream: %w", err)
	}
	return nc, js, nil
}

func reconnectDelay(attempts int) time.Duration {
	return jitter(backoff(reconnectMin, reconnectMax, attempts))
}

// backoff is min·2^(n-1) capped at max, for n ≥ 1.
func backoff(minD, maxD time.Duration, n int) time.Duration {
	if n < 1 {
		n = 1
	}
	d := minD
	for i := 1; i < n && d < maxD; i++ {
		d *= 2
	}
	return min(d, maxD)
}

// jitter spreads d over [d/2, d) so replicas that lost NATS together do not retry in step.
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	half := d / 2
	return half + rand.N(half)
}

// EnsureStream creates the stream or updates it to cfg. It is safe when many replicas
// start at once: JetStream answers an identical create with success, and a replica that
// lost a create race against a different config (an older or newer version during a
// rollout) retries as an update. Changes JetStream cannot apply in place (storage type,
// retention policy) are returned as errors, never "fixed" by deleting the stream.
// cfg.Replicas 0 keeps an existing stream's replica count (KeepReplicas).
func EnsureStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) error {
	cfg, err := KeepReplicas(ctx, js, cfg)
	if err != nil {
		return err
	}
	for attempt := 1; attempt <= 5; attempt++ {
		if _, err = js.CreateOrUpdateStream(ctx, cfg); err == nil {
			return nil
		}
		// CreateOrUpdateStream is update-then-create: between the two another replica
		// may have created the stream with a config that differs from ours.
		if !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("natsx: ensure stream %s: %w", cfg.Name, ctx.Err())
		case <-time.After(jitter(backoff(10*time.Millisecond, 200*time.Millisecond, attempt))):
		}
	}
	return fmt.Errorf("natsx: ensure stream %s: %w", cfg.Name, err)
}

// KeepReplicas returns cfg with the replica count of the stream as it exists when cfg
// leaves it 0 (unset): an update would otherwise set it back to one at every start of
// every replica, undoing a count an operator set by hand (`nats stream edit --replicas`).
// A stream that does not exist yet keeps 0, which JetStream creates with one replica.
func KeepReplicas(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) (jetstream.StreamConfig, error) {
	if cfg.Replicas != 0 {
		return cfg, nil
	}
	stream, err := js.Stream(ctx, cfg.Name)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return cfg, nil
	case err != nil:
		return cfg, fmt.Errorf("natsx: look up stream %s: %w", cfg.Name, err)
	}
	cfg.Replicas = stream.CachedInfo().Config.Replicas
	return cfg, nil
}

// ReadinessCheck is the readiness probe of a service that consumes from NATS: the
// connection is up. It is Background: requests do not need NATS, but a replica whose
// consumer cannot receive is not fully ready.
func ReadinessCheck(nc *nats.Conn) readiness.Check {
	return readiness.Check{Name: "nats", Background: true, Probe: func(ctx context.Context) error {
		if !nc.IsConnected() {
			return fmt.Errorf("nats connection %s", nc.Status())
		}
		return nc.FlushWithContext(ctx)
	}}
}
