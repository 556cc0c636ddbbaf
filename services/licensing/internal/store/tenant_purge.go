package store

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/keyhouse/keyhouse/pkg/events"
	eventsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/events/v1"
)

// StaleOnTenantPurge is what a deleted tenant's purge (pkg/tenantpurge) makes stale here:
// each of its licenses, as the license.deleted it is not emitted as (no one is left to be
// told), so the license caches of every process drop them.
func StaleOnTenantPurge(ctx context.Context, tx pgx.Tx, tenant string) ([]*eventsv1.Event, error) {
	rows, err := tx.Query(ctx, `SELECT key, product_id FROM licenses WHERE tenant_id = $1`, tenant)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (*eventsv1.Event, error) {
		var key, product string
		err := r.Scan(&key, &product)
		return events.LicenseDeleted(tenant, key, product), err
	})
}
