// Package ingest is the events service's consumer of the event stream: every event of
// every service, from a durable JetStream consumer, stored once in the log (by event id,
// so a redelivery changes nothing) and handed to the fan-out (webhook deliveries) in the
// same transaction, a batch of events per transaction.
package ingest

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/keyhouse/keyhouse/pkg/events"
	"github.com/keyhouse/keyhouse/pkg/natsx"
	"github.com/keyhouse/keyhouse/pkg/tenantpurge"
	eventsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/events/v1"
	"github.com/keyhouse/keyhouse/services/events/internal/store"
	"github.com/nats-io/nats.go/jetstream"
)

// Durable is the consumer's name on events.Stream; every replica shares it (the stream's
// messages are split between them).
const Durable = "events-log"

// Stored is an event newly stored in the log, with its JSON as stored.
type Stored struct {
	Event *eventsv1.Event
	Body  []byte
	// Traceparent is the one the event's message carried (natsx.HeaderTraceparent: the
	// request that wrote its outbox row), "" for none. The fan-out keeps it on the event's
	// deliveries, whose attempts' spans link to it.
	Traceparent string
}

// Fanout is what else happens to newly stored events.
type Fanout interface {
	// Stored runs inside the transaction that stores new events (never for a duplicate),
	// so what it writes (deliveries) commits with the events or not at all. It reports
	// whether it wrote anything.
	Stored(ctx context.Context, tx pgx.Tx, evs []Stored) (wrote bool, err error)
	// Committed runs after that transaction committed, when Stored wrote something: events
	// no endpoint subscribes to wake nobody.
	Committed(evs []Stored)
}

// Ingester stores events.
type Ingester struct {
	st     *store.Store
	log    *slog.Logger
	fanout Fanout
	batch  int
}

// Option configures an Ingester.
type Option func(*Ingester)

// WithFanout hands every newly stored event to f.
func WithFanout(f Fanout) Option { return func(i *Ingester) { i.fanout = f } }

// WithBatch stores at most n events per transaction (default Batch; 1 is the consumer
// one event at a time, the figure the batch is measured against).
func WithBatch(n int) Option { return func(i *Ingester) { i.batch = max(n, 1) } }

// New makes an Ingester.
func New(st *store.Store, log *slog.Logger, opts ...Option) *Ingester {
	i := &Ingester{st: st, log: log, batch: Batch}
	for _, o := range opts {
		o(i)
	}
	return i
}

// Batch is how many events the consumer stores in one transaction at most. A burst (an
// import of 40,000 licenses) goes into the log in a few hundred transactions instead of
// one per event, so the events of other tenants queued behind it wait seconds, not
// minutes (docs/events.md).
const Batch = 256

// Run consumes the event stream until ctx is done.
func (i *Ingester) Run(ctx context.Context, js jetstream.JetStream) error {
	return natsx.ConsumeBatch(ctx, js, events.Stream, jetstream.ConsumerConfig{
		Durable:       Durable,
		FilterSubject: events.SubjectPrefix + ">",
		// Every stored event is the log's; a new consumer starts from the oldest event the
		// stream still has.
		DeliverPolicy: jetstream.DeliverAllPolicy,
		// Room for a full batch per replica while the one before it commits.
		MaxAckPending: 4 * Batch,
	}, i.HandleBatch, i.log, natsx.WithRetryDelay(time.Second, 30*time.Second), natsx.WithPullBatch(i.batch))
}

// HandleBatch stores the events of msgs in one transaction (idempotent), with one result
// per message (natsx.BatchHandler). When that transaction fails, each event is stored on
// its own, so an event that cannot be stored fails alone rather than holding back the
// events fetched with it.
func (i *Ingester) HandleBatch(ctx context.Context, msgs []jetstream.Msg) []error {
	results := make([]error, len(msgs))
	var evs []*eventsv1.Event
	var traceparents []string // traceparents[n]: evs[n]'s message's
	var at []int              // at[n]: the message evs[n] came in
	for k, msg := range msgs {
		ev, err := events.Unmarshal(msg.Data())
		if err != nil {
			results[k] = natsx.Permanent(err)
			continue
		}
		evs = append(evs, ev)
		traceparents = append(traceparents, msg.Headers().Get(natsx.HeaderTraceparent))
		at = append(at, k)
	}
	if len(evs) == 0 {
		return results
	}
	_, err := i.storeAll(ctx, evs, traceparents)
	if err == nil {
		return results
	}
	if len(evs) == 1 {
		results[at[0]] = err
		return results
	}
	for n, ev := range evs {
		_, results[at[n]] = i.storeAll(ctx, []*eventsv1.Event{ev}, traceparents[n:n+1])
	}
	return results
}

// Store stores ev unless it is stored already, and reports whether it was new.
func (i *Ingester) Store(ctx context.Context, ev *eventsv1.Event) (bool, error) {
	fresh, err := i.StoreAll(ctx, []*eventsv1.Event{ev})
	return len(fresh) == 1, err
}

// StoreAll stores, in one transaction with their fan-out, those of evs not stored yet,
// and returns them.
func (i *Ingester) StoreAll(ctx context.Context, evs []*eventsv1.Event) ([]Stored, error) {
	return i.storeAll(ctx, evs, nil)
}

// storeAll is StoreAll for events whose messages carried traceparents (traceparents[n]
// evs[n]'s, or nil for none), which the fan-out keeps on their deliveries.
func (i *Ingester) storeAll(ctx context.Context, evs []*eventsv1.Event, traceparents []string) ([]Stored, error) {
	// tenant.deleted is not an event of the log: the tenant's log, endpoints and deliveries
	// go with it (pkg/tenantpurge), and its events that arrive later are dropped.
	var deleted []string
	logged := make([]*eventsv1.Event, 0, len(evs))
	var traced map[*eventsv1.Event]string // none while tracing is off
	for n, ev := range evs {
		if ev.GetType() == events.TypeTenantDeleted {
			deleted = append(deleted, ev.GetTenantId())
			continue
		}
		logged = append(logged, ev)
		if n < len(traceparents) && traceparents[n] != "" {
			if traced == nil {
				traced = make(map[*eventsv1.Event]string, len(evs))
			}
			traced[ev] = traceparents[n]
		}
	}
	all := make([]store.Event, len(logged))
	for k, ev := range logged {
		body, err := events.JSON(ev)
		if err != nil {
			return nil, natsx.Permanent(err)
		}
		all[k] = store.Event{
			ID: ev.GetId(), TenantID: ev.GetTenantId(), Type: ev.GetType(), LicenseKey: events.LicenseKey(ev),
			// The microsecond the JSON prints (events.TimeLayout): Postgres would round
			// finer digits, not drop them.
			CreatedAt: ev.GetCreatedAt().AsTime().Truncate(time.Microsecond), Body: body,
		}
	}
	var fresh []Stored
	var fannedOut bool
	err := i.st.InTx(ctx, func(tx pgx.Tx) error {
		fannedOut = false
		for _, tenant := range deleted {
			if err := tenantpurge.ForgetInTx(ctx, tx, tenant); err != nil {
				return err
			}
		}
		rows, evs, err := i.ofLiveTenants(ctx, tx, all, logged)
		if err != nil || len(rows) == 0 {
			fresh = fresh[:0]
			return err
		}
		ids, err := store.InsertAll(ctx, tx, rows)
		if err != nil {
			return err
		}
		fresh = fresh[:0]
		for k, row := range rows {
			if ids[row.ID] {
				delete(ids, row.ID) // an id twice in one batch is one event
				fresh = append(fresh, Stored{Event: evs[k], Body: row.Body, Traceparent: traced[evs[k]]})
			}
		}
		if len(fresh) == 0 || i.fanout == nil {
			return nil
		}
		fannedOut, err = i.fanout.Stored(ctx, tx, fresh)
		return err
	})
	if err != nil {
		return nil, err
	}
	if fannedOut {
		i.fanout.Committed(fresh)
	}
	return fresh, nil
}

// ofLiveTenants leaves out the rows (and their events) of deleted tenants, taking each
// tenant's shared lock against its purge (tenantpurge.Forgotten).
func (i *Ingester) ofLiveTenants(ctx context.Context, tx pgx.Tx, rows []store.Event, evs []*eventsv1.Event) ([]store.Event, []*eventsv1.Event, error) {
	tenants := make([]string, len(rows))
	for k, row := range rows {
		tenants[k] = row.TenantID
	}
	gone, err := tenantpurge.Forgotten(ctx, tx, tenants)
	if err != nil {
		return nil, nil, err
	}
	if len(gone) == 0 {
		return rows, evs, nil
	}
	keptRows, keptEvs := rows[:0:0], evs[:0:0]
	for k, row := range rows {
		if !gone[row.TenantID] {
			keptRows, keptEvs = append(keptRows, row), append(keptEvs, evs[k])
		}
	}
	return keptRows, keptEvs, nil
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
