package store

import (
	"context"
	"time"
)

// ForgetTombstonesBefore deletes the tombstones (pkg/tenantpurge) older than cutoff: by
// then the stream holds no event of the tenant any more, so none can reach the log.
func (s *Store) ForgetTombstonesBefore(ctx context.Context, cutoff time.Time) error {
	_, err := s.db.Exec(ctx, `DELETE FROM forgotten_tenants WHERE forgotten_at < $1`, cutoff)
	return err
}
