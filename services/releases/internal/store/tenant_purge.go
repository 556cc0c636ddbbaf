package store

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/keyhouse/keyhouse/pkg/events"
	eventsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/events/v1"
)

// StaleOnTenantPurge is what a deleted tenant's purge (pkg/tenantpurge) makes stale here:
// the cached update checks, when it had releases (one release.unpublished, never emitted,
// drops them all).
func StaleOnTenantPurge(ctx context.Context, tx pgx.Tx, tenant string) ([]*eventsv1.Event, error) {
	var any bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM releases WHERE tenant_id = $1)`, tenant).Scan(&any); err != nil || !any {
		return nil, err
	}
	return []*eventsv1.Event{events.ReleaseUnpublished(tenant, 0, "", "", "", "")}, nil
}
