// Package ingest is the events service's consumer of the event stream: every event of
// every service, from a durable JetStream consumer, stored once in the log (by event id,
// so a redelivery changes nothing) and handed to the fan-out (webhook deliveries) in the
// same transaction.
package ingest

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/keyhouse/keyhouse/pkg/events"
	"github.com/keyhouse/keyhouse/pkg/natsx"
	eventsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/events/v1"
	"github.com/keyhouse/keyhouse/services/events/internal/store"
	"github.com/nats-io/nats.go/jetstream"
)

// Durable is the consumer's name on events.Stream; every replica shares it (the stream's
// messages are split between them).
const Durable = "events-log"

// Fanout is what else happens to a newly stored event.
type Fanout interface {
	// Stored runs inside the transaction that stores a new event (never for a duplicate),
	// so what it writes (deliveries) commits with the event or not at all. body is the
	// event's JSON as stored.
	Stored(ctx context.Context, tx pgx.Tx, ev *eventsv1.Event, body []byte) error
	// Committed runs after that transaction committed.
	Committed(ev *eventsv1.Event)
}

// Ingester stores events.
type Ingester struct {
	st     *store.Store
	log    *slog.Logger
	fanout Fanout
}

// Option configures an Ingester.
type Option func(*Ingester)

// WithFanout hands every newly stored event to f.
func WithFanout(f Fanout) Option { return func(i *Ingester) { i.fanout = f } }

// New makes an Ingester.
func New(st *store.Store, log *slog.Logger, opts ...Option) *Ingester {
	i := &Ingester{st: st, log: log}
	for _, o := range opts {
		o(i)
	}
	return i
}

// Run consumes the event stream until ctx is done.
func (i *Ingester) Run(ctx context.Context, js jetstream.JetStream) error {
	return natsx.Consume(ctx, js, events.Stream, jetstream.ConsumerConfig{
		Durable:       Durable,
		FilterSubject: events.SubjectPrefix + ">",
		// Every stored event is the log's; a new consumer starts from the oldest event the
		// stream still has.
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}, i.Handle, i.log, natsx.WithRetryDelay(time.Second, 30*time.Second), natsx.WithPullBatch(64))
}

// Handle stores one message's event (idempotent).
func (i *Ingester) Handle(ctx context.Context, msg jetstream.Msg) error {
	ev, err := events.Unmarshal(msg.Data())
	if err != nil {
		return natsx.Permanent(err)
	}
	_, err = i.Store(ctx, ev)
	return err
}

// Store stores ev unless it is stored already, and reports whether it was new.
func (i *Ingester) Store(ctx context.Context, ev *eventsv1.Event) (bool, error) {
	body, err := events.JSON(ev)
	if err != nil {
		return false, natsx.Permanent(err)
	}
	if ev.GetType() == events.TypeTenantDeleted {
		// Not an event of the log: the tenant's log, endpoints and deliveries go with it.
		return false, i.st.InTx(ctx, func(tx pgx.Tx) error { return store.ForgetTenant(ctx, tx, ev.GetTenantId()) })
	}
	var fresh bool
	err = i.st.InTx(ctx, func(tx pgx.Tx) error {
		if gone, err := store.Forgotten(ctx, tx, ev.GetTenantId()); err != nil || gone {
			return err
		}
		fresh, err = store.Insert(ctx, tx, store.Event{
			ID: ev.GetId(), TenantID: ev.GetTenantId(), Type: ev.GetType(), LicenseKey: events.LicenseKey(ev),
			CreatedAt: ev.GetCreatedAt().AsTime(), Body: body,
		})
		if err != nil || !fresh || i.fanout == nil {
			return err
		}
		return i.fanout.Stored(ctx, tx, ev, body)
	})
	if err != nil {
		return false, err
	}
	if fresh && i.fanout != nil {
		i.fanout.Committed(ev)
	}
	return fresh, nil
}

// Retain deletes the events older than retention every interval until ctx is done.
func Retain(ctx context.Context, st *store.Store, retention, interval time.Duration, now func() time.Time, log *slog.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := st.ForgetTombstonesBefore(ctx, now().Add(-events.StreamMaxAge)); err != nil && ctx.Err() == nil {
			log.Warn("deleted-tenant tombstone sweep failed, retrying at the next", "error", err.Error())
		}
		if n, err := st.DeleteBefore(ctx, now().Add(-retention)); err != nil {
			if ctx.Err() == nil {
				log.Warn("event retention sweep failed, retrying at the next", "error", err.Error())
			}
		} else if n > 0 {
			log.Info("event retention sweep", "deleted", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
