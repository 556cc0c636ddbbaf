// Package purge consumes the license.deleted events of the event spine and forgets the
// deleted license's seats and usage, so that no token of a deleted license works
// afterwards even if this service was down when the license was deleted (the durable
// consumer resumes where it stopped). Each seat it removes is a seat.deactivated event
// (reason license_deleted), emitted in the purge's transaction.
package purge

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/keyhouse/keyhouse/pkg/events"
	"github.com/keyhouse/keyhouse/pkg/natsx"
	"github.com/keyhouse/keyhouse/pkg/telemetry"
	eventsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/events/v1"
	"github.com/nats-io/nats.go/jetstream"
)

// Durable is this consumer's name on events.Stream.
const Durable = "activations-license-deleted"

// Purger forgets one license; it must be idempotent (store.Store.Purge is).
type Purger interface {
	Purge(ctx context.Context, tenant, key, productID string, deletedAt time.Time) error
}

// Handler returns the message handler: a malformed event is terminated (redelivering it
// cannot help), a database failure is retried.
func Handler(p Purger, log *slog.Logger) natsx.Handler {
	return func(ctx context.Context, msg jetstream.Msg) error {
		ev, err := Parse(msg.Data())
		if err != nil {
			return natsx.Permanent(err)
		}
		d := ev.GetLicenseDeleted()
		// The seats go on the system's behalf, as part of the request that deleted the license.
		ctx = events.WithActor(telemetry.WithRequestID(ctx, ev.GetActor().GetRequestId().GetValue()), events.ActorSystem)
		if err := p.Purge(ctx, ev.GetTenantId(), d.GetKey(), d.GetProductId(), ev.GetCreatedAt().AsTime()); err != nil {
			return fmt.Errorf("purge license: %w", err)
		}
		log.Info("license purged", "tenant_id", ev.GetTenantId())
		return nil
	}
}

// Parse decodes and checks a license.deleted event.
func Parse(data []byte) (*eventsv1.Event, error) {
	ev, err := events.Unmarshal(data)
	if err != nil {
		return nil, err
	}
	if ev.GetType() != events.TypeLicenseDeleted || ev.GetLicenseDeleted().GetKey() == "" {
		return nil, fmt.Errorf("purge: not a license.deleted event with a key: %s", ev.GetType())
	}
	return ev, nil
}

// Run consumes until ctx is done.
func Run(ctx context.Context, js jetstream.JetStream, p Purger, log *slog.Logger) error {
	return natsx.Consume(ctx, js, events.Stream, jetstream.ConsumerConfig{
		Durable:       Durable,
		FilterSubject: events.Subject(events.TypeLicenseDeleted),
		Description:   "activations: purge seats and usage of deleted licenses",
	}, Handler(p, log), log)
}
