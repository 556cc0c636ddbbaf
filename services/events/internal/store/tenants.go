package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/keyhouse/keyhouse/pkg/tenantpurge"
)

func tenantHash(tenant string) string {
	sum := sha256.Sum256([]byte(tenant))
	return hex.EncodeToString(sum[:])
}

// tenantLock is the advisory lock between a tenant's purge (exclusive) and the storing of
// its events (shared), of the tenant id the SQL expression tenant names: an event is
// stored either before the purge, which deletes it, or after, when the tombstone drops
// it.
func tenantLock(tenant string) string {
	return `hashtextextended('events.tenant:' || ` + tenant + `, 0)`
}

// Forgotten takes the shared lock of every tenant of tenants and reports which of them
// were deleted: their events are then dropped, not stored. One round trip however many
// tenants a batch holds: the locks, in the tenants' sorted order, then the tombstones,
// read by a statement of their own so that it sees a purge that committed while a lock
// was awaited (each statement of a transaction reads as of its own start).
func Forgotten(ctx context.Context, tx pgx.Tx, tenants []string) (map[string]bool, error) {
	sorted := slices.Clone(tenants)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	hashes := make([]string, len(sorted))
	for i, t := range sorted {
		hashes[i] = tenantHash(t)
	}
	var batch pgx.Batch
	// A function scan yields the array's rows in order, so the locks are taken in it.
	batch.Queue(`SELECT pg_advisory_xact_lock_shared(`+tenantLock("t")+`) FROM unnest($1::text[]) AS t`, sorted)
	batch.Queue(`SELECT u.t FROM unnest($1::text[], $2::text[]) AS u(t, h)
		WHERE EXISTS (SELECT 1 FROM forgotten_tenants f WHERE f.tenant_sha256 = u.h)`, sorted, hashes)
	results := tx.SendBatch(ctx, &batch)
	defer results.Close()
	if _, err := results.Exec(); err != nil {
		return nil, err
	}
	rows, err := results.Query()
	if err != nil {
		return nil, err
	}
	forgotten, err := collectSet(rows)
	if err != nil {
		return nil, err
	}
	return forgotten, results.Close()
}

// ForgetTenant deletes every row of the tenant (its log, webhook endpoints, deliveries,
// outbox) and leaves the tombstone that drops its late events.
func ForgetTenant(ctx context.Context, tx pgx.Tx, tenant string) error {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(`+tenantLock("$1")+`)`, tenant); err != nil {
		return err
	}
	if _, err := tenantpurge.Purge(ctx, tx, tenant); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `INSERT INTO forgotten_tenants (tenant_sha256) VALUES ($1) ON CONFLICT DO NOTHING`, tenantHash(tenant))
	return err
}

// ForgetTombstonesBefore deletes the tombstones older than cutoff: by then the stream
// holds no event of the tenant any more.
func (s *Store) ForgetTombstonesBefore(ctx context.Context, cutoff time.Time) error {
	_, err := s.db.Exec(ctx, `DELETE FROM forgotten_tenants WHERE forgotten_at < $1`, cutoff)
	return err
}
