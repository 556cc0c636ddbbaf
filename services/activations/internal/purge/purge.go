// Package purge consumes licensing's license.deleted events and forgets the deleted
// license's seats and usage, so that no token of a deleted license works afterwards even
// if this service was down when the license was deleted (the durable consumer resumes
// where it stopped).
package purge

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/keyhouse/keyhouse/pkg/license"
	"github.com/keyhouse/keyhouse/pkg/natsx"
	"github.com/nats-io/nats.go/jetstream"
)

// Durable is this consumer's name on license.EventStream.
const Durable = "activations-license-deleted"

// Event is the license.deleted payload (the contract lives in pkg/license).
type Event = license.Deleted

// Purger forgets one license; it must be idempotent (store.Store.Purge is).
type Purger interface {
	Purge(ctx context.Context, tenant, key string, deletedAt time.Time) error
}

// Handler returns the message handler: a malformed event is terminated (redelivering it
// cannot help), a database failure is retried.
func Handler(p Purger, log *slog.Logger) natsx.Handler {
	return func(ctx context.Context, msg jetstream.Msg) error {
		ev, err := Parse(msg.Data(), msg.Headers().Get(natsx.HeaderTenant))
		if err != nil {
			return natsx.Permanent(err)
		}
		if err := p.Purge(ctx, ev.TenantID, ev.Key, ev.DeletedAt); err != nil {
			return fmt.Errorf("purge license: %w", err)
		}
		log.Info("license purged", "tenant_id", ev.TenantID)
		return nil
	}
}

// Parse decodes and checks an event. The tenant header, when present, must agree with
// the payload: the header is what the outbox stamped from the deleting transaction.
func Parse(data []byte, headerTenant string) (Event, error) {
	var ev Event
	if err := json.Unmarshal(data, &ev); err != nil {
		return ev, fmt.Errorf("license.deleted: malformed payload: %w", err)
	}
	switch {
	case ev.TenantID == "" || ev.Key == "":
		return ev, fmt.Errorf("license.deleted: tenant_id and key are required")
	case headerTenant != "" && headerTenant != ev.TenantID:
		return ev, fmt.Errorf("license.deleted: tenant header and payload disagree")
	}
	if ev.DeletedAt.IsZero() {
		ev.DeletedAt = time.Now()
	}
	return ev, nil
}

// Run consumes until ctx is done.
func Run(ctx context.Context, js jetstream.JetStream, p Purger, log *slog.Logger) error {
	return natsx.Consume(ctx, js, license.EventStream, jetstream.ConsumerConfig{
		Durable:       Durable,
		FilterSubject: license.DeletedSubject,
		Description:   "activations: purge seats and usage of deleted licenses",
	}, Handler(p, log), log)
}
