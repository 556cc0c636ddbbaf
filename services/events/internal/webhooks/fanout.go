package webhooks

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/keyhouse/keyhouse/pkg/events"
	eventsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/events/v1"
)

// Fanout plugs webhooks into the event log's ingest: every newly stored event gets its
// deliveries in the transaction that stores it, so an event is never logged without them
// (nor they without it), and the worker is woken once it committed.
type Fanout struct {
	Store  *Store
	Worker *Worker
	Now    func() time.Time
}

// Stored creates the event's deliveries (ingest.Fanout).
func (f *Fanout) Stored(ctx context.Context, tx pgx.Tx, ev *eventsv1.Event, body []byte) error {
	if ev.GetType() == PingType {
		return nil // a ping goes to its one endpoint, never through the log
	}
	now := time.Now
	if f.Now != nil {
		now = f.Now
	}
	_, err := f.Store.Fanout(ctx, tx, ev.GetTenantId(), ev.GetId(), ev.GetType(), body, now())
	return err
}

// Committed wakes the worker (ingest.Fanout).
func (f *Fanout) Committed(*eventsv1.Event) { f.Worker.Wake() }

// EmitDisabled records webhook_endpoint.disabled in the transaction that disables the
// endpoint (Worker.OnDisable): the system disabled it.
func EmitDisabled(ctx context.Context, tx pgx.Tx, ep *Endpoint) error {
	return events.Emit(events.WithActor(ctx, events.ActorSystem), tx, events.WebhookEndpointDisabled(ep.TenantID, ep.ID, DisabledReason))
}
