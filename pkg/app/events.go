package app

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/keyhouse/keyhouse/pkg/events"
	"github.com/keyhouse/keyhouse/pkg/metrics"
	"github.com/keyhouse/keyhouse/pkg/natsx"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// EventSpine is a service's side of the event spine (pkg/events), wired the one way every
// service wires it: its NATS connection, the event stream ensured, its outbox relay
// running, and the post-commit path (Spine) that wakes the relay and announces changes on
// the core-NATS fast path.
type EventSpine struct {
	NATS      *nats.Conn
	JetStream jetstream.JetStream
	// Relay publishes the service's outbox; Notify wakes it (what Spine does after a commit).
	Relay *natsx.Relay
	// Spine is what the service's stores run their writing transactions with.
	Spine *events.Spine
}

// SpineOptions tunes a service's spine: its relay's options and the spine's own (a
// process that caches rows adds events.WithLocal).
type SpineOptions struct {
	// Streams are the service's own streams besides the event stream, which its outbox
	// also feeds: ensured before the relay starts, so it never publishes to none.
	Streams []jetstream.StreamConfig
	Relay   []natsx.RelayOption
	Spine   []events.Option
}

// replicasRefused names NATS_STREAM_REPLICAS in JetStream's refusal of a stream: a count
// the NATS deployment cannot hold (more than its JetStream servers, or more than one on a
// server that is not clustered) stops the service at start, and the refusal alone
// ("replicas > 1 not supported in non-clustered mode") does not say where it was set.
func replicasRefused(err error, replicas int) error {
	var apiErr *jetstream.APIError
	if replicas == 0 || !errors.As(err, &apiErr) {
		return err
	}
	return fmt.Errorf("%w (NATS_STREAM_REPLICAS=%d: each stream needs that many JetStream servers in the NATS cluster)", err, replicas)
}

// StartEventSpine connects to NATS as this service, ensures the event stream (and
// o.Streams), and starts
// the outbox relay until ctx ends. At shutdown the relay finishes its batch before the
// connection closes; closers a service adds later (its consumers) run before both.
func (d *Deps) StartEventSpine(ctx context.Context, name string, o SpineOptions) (*EventSpine, error) {
	nc, js, err := natsx.Connect(ctx, d.Config.NATSURL.Reveal(), name, d.Log)
	if err != nil {
		return nil, err
	}
	d.OnClose(nc.Close)
	// Every stream gets NATS_STREAM_REPLICAS copies; unset, each keeps what it has.
	replicas := d.Config.NATSStreamReplicas
	if err := events.EnsureStream(ctx, js, replicas); err != nil {
		return nil, replicasRefused(err, replicas)
	}
	for _, cfg := range o.Streams {
		cfg.Replicas = replicas
		if err := natsx.EnsureStream(ctx, js, cfg); err != nil {
			return nil, replicasRefused(err, replicas)
		}
	}
	// The relay has a connection of its own. On the request pool it queued for a
	// connection behind every request: at 500 issue-license/s on two cores a round of 32
	// rows (claim, publish, mark) took 250-330 ms, almost all of it waiting in the pool's
	// queue, so the outbox grew by 400 rows a second while every statement of the relay
	// ran in milliseconds. Its claim is planned once (WithGenericPlans): Postgres found
	// the generic plan dearer than the custom ones and planned the claim for every call,
	// 1.5 ms each, three times its execution (natsx's claimSQL is written to need no
	// statistics and no arguments to plan well; its plan tests run it generic), and from
	// its indexes, whatever an analyze of the empty outbox said (pgxx.GenericPlanSettings).
	relayDB, err := pgxx.Open(ctx, d.Config.DatabaseURL.Reveal(), name, pgxx.WithMaxConns(1), pgxx.WithGenericPlans())
	if err != nil {
		return nil, err
	}
	d.OnClose(relayDB.Close)
	metrics.RegisterPgxPool(relayDB, name+"-relay")
	relay := natsx.NewRelay(relayDB, js, d.Log, o.Relay...)
	// The fast path announces only license, seat and release changes (events.fastPath):
	// a service that emits none of them publishes nothing on it.
	spineOpts := append([]events.Option{events.WithRelay(relay), events.WithFastPath(nc), events.WithLog(d.Log)}, o.Spine...)
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := relay.Run(ctx); err != nil {
			d.Log.Error("outbox relay stopped", "error", err.Error())
		}
	})
	d.OnClose(wg.Wait)
	return &EventSpine{NATS: nc, JetStream: js, Relay: relay, Spine: events.NewSpine(spineOpts...)}, nil
}
