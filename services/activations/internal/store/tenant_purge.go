package store

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/keyhouse/keyhouse/pkg/events"
	eventsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/events/v1"
)

// StaleOnTenantPurge is what a deleted tenant's purge (pkg/tenantpurge) makes stale here:
// the seats of each of its licenses, as the seat.deactivated they are not emitted as (no
// one is left to be told), so cached validations of them go stale.
func StaleOnTenantPurge(ctx context.Context, tx pgx.Tx, tenant string) ([]*eventsv1.Event, error) {
	rows, err := tx.Query(ctx, `SELECT DISTINCT license_key FROM seats WHERE tenant_id = $1`, tenant)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (*eventsv1.Event, error) {
		var key string
		err := r.Scan(&key)
		return events.SeatDeactivated(tenant, key, "", "", events.ReasonLicenseDeleted), err
	})
}
