package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/keyhouse/keyhouse/pkg/tenantpurge"
)

func tenantHash(tenant string) string {
	sum := sha256.Sum256([]byte(tenant))
	return hex.EncodeToString(sum[:])
}

// tenantLock is the advisory lock between a tenant's purge (exclusive) and the storing of
// its events (shared): an event is stored either before the purge, which deletes it, or
// after, when the tombstone drops it.
const tenantLock = `hashtextextended('events.tenant:' || $1, 0)`

// Forgotten takes the tenant's shared lock and reports whether the tenant was deleted:
// its events are then dropped, not stored.
func Forgotten(ctx context.Context, tx pgx.Tx, tenant string) (bool, error) {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock_shared(`+tenantLock+`)`, tenant); err != nil {
		return false, err
	}
	var gone bool
	err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM forgotten_tenants WHERE tenant_sha256 = $1)`, tenantHash(tenant)).Scan(&gone)
	return gone, err
}

// ForgetTenant deletes every row of the tenant (its log, webhook endpoints, deliveries,
// outbox) and leaves the tombstone that drops its late events.
func ForgetTenant(ctx context.Context, tx pgx.Tx, tenant string) error {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(`+tenantLock+`)`, tenant); err != nil {
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
