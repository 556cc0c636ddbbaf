// Package tenantpurge is how every service forgets a deleted hosted tenant: billing
// deletes the tenant and emits tenant.deleted in that transaction; each service consumes
// it from the event spine with a durable consumer of its own and deletes every row of the
// tenant in its schema in one transaction. A service that is down at that moment does it
// when it comes back (the consumer resumes where it stopped), and doing it twice changes
// nothing, so the fan-out completes whatever fails along the way.
package tenantpurge

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/keyhouse/keyhouse/pkg/events"
	"github.com/keyhouse/keyhouse/pkg/natsx"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
	eventsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/events/v1"
	"github.com/nats-io/nats.go/jetstream"
)

// Column is the column that scopes every tenant row (invariant 1).
const Column = "tenant_id"

// Tables lists the tables of the transaction's schema (its search_path) that have a
// tenant_id column: what Purge deletes from. Reading it from the catalog means a table a
// later migration adds is purged too.
func Tables(ctx context.Context, tx pgx.Tx) ([]string, error) {
	rows, err := tx.Query(ctx, `
		SELECT c.table_name FROM information_schema.columns c
		JOIN information_schema.tables t ON t.table_schema = c.table_schema AND t.table_name = c.table_name
		WHERE c.table_schema = current_schema() AND c.column_name = $1 AND t.table_type = 'BASE TABLE'
		ORDER BY c.table_name`, Column)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// Purge deletes every row of tenant from every table of tx's schema with a tenant_id
// column. A table whose rows another table still references (a foreign key without
// ON DELETE CASCADE) is tried again after the others, each attempt under a savepoint, so
// the order of the tables needs no list to keep up to date. A delete may also write rows
// of the tenant into a table already purged (licensing's license_counts, kept by a
// trigger on licenses), so the tables are purged again until a pass finds nothing. It
// returns the rows deleted.
func Purge(ctx context.Context, tx pgx.Tx, tenant string) (int64, error) {
	tables, err := Tables(ctx, tx)
	if err != nil {
		return 0, err
	}
	var deleted int64
	for {
		n, err := purgePass(ctx, tx, tables, tenant)
		deleted += n
		if err != nil || n == 0 {
			return deleted, err
		}
	}
}

// purgePass deletes the tenant's rows from each of tables once, the referenced ones after
// the tables that reference them.
func purgePass(ctx context.Context, tx pgx.Tx, pending []string, tenant string) (int64, error) {
	var deleted int64
	for len(pending) > 0 {
		var blocked []string
		var lastErr error
		for _, table := range pending {
			n, err := deleteFrom(ctx, tx, table, tenant)
			if pgxx.IsForeignKeyViolation(err, "") {
				blocked, lastErr = append(blocked, table), err
				continue
			}
			if err != nil {
				return deleted, fmt.Errorf("tenantpurge: %s: %w", table, err)
			}
			deleted += n
		}
		if len(blocked) == len(pending) {
			return deleted, fmt.Errorf("tenantpurge: rows referenced from outside the tenant's tables: %w", lastErr)
		}
		pending = blocked
	}
	return deleted, nil
}

func deleteFrom(ctx context.Context, tx pgx.Tx, table, tenant string) (int64, error) {
	sp, err := tx.Begin(ctx) // a savepoint: a failed delete leaves the transaction usable
	if err != nil {
		return 0, err
	}
	tag, err := sp.Exec(ctx, `DELETE FROM `+pgx.Identifier{table}.Sanitize()+` WHERE `+Column+` = $1`, tenant)
	if err != nil {
		_ = sp.Rollback(ctx)
		return 0, err
	}
	return tag.RowsAffected(), sp.Commit(ctx)
}

// Forget is a service's purge of one tenant: its own transaction around Purge, plus
// whatever the service must do after it (drop cached answers).
type Forget func(ctx context.Context, tenant string) error

// Durable is the consumer name of service on events.Stream.
func Durable(service string) string { return service + "-tenant-deleted" }

// Run consumes tenant.deleted until ctx is done, calling forget for each.
func Run(ctx context.Context, js jetstream.JetStream, service string, forget Forget, log *slog.Logger) error {
	return natsx.Consume(ctx, js, events.Stream, jetstream.ConsumerConfig{
		Durable:       Durable(service),
		FilterSubject: events.Subject(events.TypeTenantDeleted),
		Description:   service + ": forget the rows of deleted tenants",
	}, Handler(forget, log), log)
}

// SecondPurgeAt is how old a tenant.deleted must be for a purge to be the last. A write
// authorized before the deletion (the tenant's credential, or billing's answer that the
// tenant exists) may commit after this service's first purge: it was in flight, and
// nothing it reads refuses it. Such a request ends within its REQUEST_TIMEOUT (5 s by
// default), so a purge run once the deletion is this old finds whatever they wrote.
// Writes that come later are refused: billing no longer has the tenant, and the public
// ones that act for a tenant through its licenses consult the tombstone (IsForgottenSQL).
const SecondPurgeAt = time.Minute

// Handler returns the message handler: a malformed event is terminated (redelivering it
// cannot help), a failed purge is retried, and a purge made before the deletion is
// SecondPurgeAt old is made again then (natsx.Again).
func Handler(forget Forget, log *slog.Logger) natsx.Handler {
	return func(ctx context.Context, msg jetstream.Msg) error {
		ev, err := events.Unmarshal(msg.Data())
		if err != nil {
			return natsx.Permanent(err)
		}
		if ev.GetType() != events.TypeTenantDeleted || ev.GetTenantId() == "" {
			return natsx.Permanent(fmt.Errorf("tenantpurge: not a tenant.deleted event with a tenant: %s", ev.GetType()))
		}
		if err := forget(ctx, ev.GetTenantId()); err != nil {
			return fmt.Errorf("forget tenant: %w", err)
		}
		if wait := SecondPurgeAt - time.Since(ev.GetCreatedAt().AsTime()); wait > 0 {
			log.Info("deleted tenant forgotten, purging again for writes in flight", "tenant_id", ev.GetTenantId(), "again_in", wait.Round(time.Second).String())
			return natsx.Again(wait)
		}
		log.Info("deleted tenant forgotten", "tenant_id", ev.GetTenantId())
		return nil
	}
}

// Stale reads, before the purge and in its transaction, the changes to announce once it
// committed: the events that would have described them (license.deleted per license, …),
// built but never emitted, so that every cached answer about them goes stale in time.
type Stale func(ctx context.Context, tx pgx.Tx, tenant string) ([]*eventsv1.Event, error)

// Retire, in the purge's transaction and before it, takes out of the tenant's rows what
// must outlive the tenant under no tenant id (licensing's product claims: Forgetter.Retire).
type Retire func(ctx context.Context, tx pgx.Tx, tenant string) error

// Forgetter is the usual Forget: ForgetInTx in one transaction on DB (the schema needs a
// forgotten_tenants table), then the cache path of Spine for what Stale found (all three
// optional). Retire runs first in that transaction, so what it keeps is never purged.
type Forgetter struct {
	DB     *pgxpool.Pool
	Stale  Stale
	Retire Retire
	Spine  *events.Spine
}

// Forget purges tenant.
func (f Forgetter) Forget(ctx context.Context, tenant string) error {
	var stale []*eventsv1.Event
	err := pgx.BeginFunc(ctx, f.DB, func(tx pgx.Tx) (err error) {
		if f.Stale != nil {
			if stale, err = f.Stale(ctx, tx, tenant); err != nil {
				return err
			}
		}
		if f.Retire != nil {
			if err := f.Retire(ctx, tx, tenant); err != nil {
				return err
			}
		}
		return ForgetInTx(ctx, tx, tenant)
	})
	if err != nil {
		return err
	}
	if f.Spine != nil && len(stale) > 0 {
		f.Spine.Announce(ctx, stale...)
	}
	return nil
}
