package webhooks

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/keyhouse/keyhouse/pkg/events"
	"github.com/keyhouse/keyhouse/services/events/internal/ingest"
)

// Fanout plugs webhooks into the event log's ingest: every newly stored event gets its
// deliveries in the transaction that stores it, so an event is never logged without them
// (nor they without it), and the worker is woken once they committed. Events no enabled
// endpoint subscribes to make no delivery and wake no worker.
type Fanout struct {
	Store  *Store
	Worker *Worker
	Now    func() time.Time
}

// Stored creates the events' deliveries (ingest.Fanout) and reports whether it made any.
func (f *Fanout) Stored(ctx context.Context, tx pgx.Tx, stored []ingest.Stored) (bool, error) {
	evs := make([]NewEvent, 0, len(stored))
	for _, s := range stored {
		if s.Event.GetType() == PingType {
			continue // a ping goes to its one endpoint, never through the log
		}
		evs = append(evs, NewEvent{TenantID: s.Event.GetTenantId(), ID: s.Event.GetId(), Type: s.Event.GetType(), Body: s.Body,
			Traceparent: s.Traceparent})
	}
	if len(evs) == 0 {
		return false, nil
	}
	now := time.Now
	if f.Now != nil {
		now = f.Now
	}
	made, err := f.Store.FanoutAll(ctx, tx, evs, now())
	return made > 0, err
}

// Committed wakes the worker for the deliveries Stored made (ingest.Fanout).
func (f *Fanout) Committed([]ingest.Stored) { f.Worker.Wake() }

// EmitDisabled records webhook_endpoint.disabled in the transaction that disables the
// endpoint (Worker.OnDisable): the system disabled it.
func EmitDisabled(ctx context.Context, tx pgx.Tx, ep *Endpoint) error {
	return events.Emit(events.WithActor(ctx, events.ActorSystem), tx, events.WebhookEndpointDisabled(ep.TenantID, ep.ID, DisabledReason))
}
