package tenantpurge

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/keyhouse/keyhouse/pkg/apierr"
)

// A service's purge of a tenant is not the end of writes for it: another service may still
// hold the tenant's licenses (it purges on its own, or is down), so a buyer can still
// activate one, and an internal caller can still name the tenant. So the purge leaves a
// tombstone in the service's schema (table forgotten_tenants: the SHA-256 of the tenant id,
// so no id outlives the tenant), and every write that acts for a tenant it did not
// authenticate (public routes, internal callers) calls Forgotten in its transaction first.
//
// The tenant's advisory lock orders the two across replicas: the purge holds it
// exclusively, the writers shared. A write either commits before the purge, whose delete
// (a later statement, so a later snapshot) then removes its rows, or waits for the purge
// to commit and then sees the tombstone, read by a statement of its own after the lock so
// that it sees a purge committed while the lock was awaited (each statement of a
// transaction reads as of its own start).

// TombstoneTableSQL is the table of tombstones. Each service copies it verbatim into one
// of its migrations (as natsx.OutboxTableSQL; a test per service holds the copy to it,
// pgxx.CheckSharedDDL).
const TombstoneTableSQL = `CREATE TABLE forgotten_tenants (
    tenant_sha256 text        PRIMARY KEY,
    forgotten_at  timestamptz NOT NULL DEFAULT now()
);`

// ErrTenantNotFound is the refusal of a write for a tenant that was deleted (or, from
// billing, never existed): 404 "Tenant not found", as the operator routes answer.
var ErrTenantNotFound = apierr.NotFound("Tenant not found")

// TenantHash is how a tombstone names its tenant.
func TenantHash(tenant string) string {
	sum := sha256.Sum256([]byte(tenant))
	return hex.EncodeToString(sum[:])
}

// tenantLock is the advisory lock of the tenant the SQL expression tenant names, in the
// schema of the transaction (its search_path), so one service's purge never waits for
// another's writers. The events service took it as 'events.tenant:' || id before this
// package did, which is what this is in its schema: replicas of either release agree.
func tenantLock(tenant string) string {
	return `hashtextextended(current_schema() || '.tenant:' || ` + tenant + `, 0)`
}

// shareTenantsSQL takes the shared lock of each tenant of $1 (sorted and distinct: a
// function scan yields the array's rows in order, so two writers of the same tenants
// never deadlock).
var shareTenantsSQL = `SELECT pg_advisory_xact_lock_shared(` + tenantLock("t") + `) FROM unnest($1::text[]) AS t`

// QueueShare queues on b the statement that takes the shared lock of every tenant of
// tenants, held until the transaction ends. A statement queued after it that reads
// IsForgottenSQL sees a purge that committed while the lock was awaited.
func QueueShare(b *pgx.Batch, tenants []string) {
	sorted := slices.Clone(tenants)
	slices.Sort(sorted)
	b.Queue(shareTenantsSQL, slices.Compact(sorted))
}

// IsForgottenSQL is the SQL condition "the tenant the SQL expression tenant names was
// deleted here", for a write's own statement, after QueueShare's (TenantHash in SQL).
func IsForgottenSQL(tenant string) string {
	return `EXISTS (SELECT 1 FROM forgotten_tenants WHERE tenant_sha256 = encode(sha256(convert_to(` + tenant + `, 'UTF8')), 'hex'))`
}

// Forgotten takes the shared lock of every tenant of tenants, held until tx ends, and
// reports which of them were deleted here. One round trip however many tenants.
func Forgotten(ctx context.Context, tx pgx.Tx, tenants []string) (map[string]bool, error) {
	gone := map[string]bool{}
	var b pgx.Batch
	QueueShare(&b, tenants)
	b.Queue(`SELECT t FROM unnest($1::text[]) AS t WHERE `+IsForgottenSQL("t"), tenants).Query(func(rows pgx.Rows) error {
		var t string
		_, err := pgx.ForEachRow(rows, []any{&t}, func() error {
			gone[t] = true
			return nil
		})
		return err
	})
	if err := tx.SendBatch(ctx, &b).Close(); err != nil {
		return nil, err
	}
	return gone, nil
}

// ForgetInTx deletes every row of tenant in tx's schema (Purge) under the tenant's
// exclusive lock and leaves its tombstone, so a write for it that comes later is refused.
func ForgetInTx(ctx context.Context, tx pgx.Tx, tenant string) error {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(`+tenantLock("$1")+`)`, tenant); err != nil {
		return err
	}
	if _, err := Purge(ctx, tx, tenant); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `INSERT INTO forgotten_tenants (tenant_sha256) VALUES ($1) ON CONFLICT DO NOTHING`, TenantHash(tenant))
	return err
}
