package store

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/keyhouse/keyhouse/pkg/events"
	"github.com/keyhouse/keyhouse/pkg/tenantpurge"
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

// RetiredOwner is the owner a deleted tenant's product claims keep (RetireProducts): no
// tenant id is ever this, so every tenant is refused the product, as for one another
// tenant owns. It names the tenant as its tombstone does (the SHA-256 of its id).
func RetiredOwner(tenant string) string { return "forgotten:" + tenantpurge.TenantHash(tenant) }

// RetireProducts keeps a deleted tenant's products claimed by no tenant (tenantpurge.Retire),
// before the purge would delete their rows. A product id is what an installed app checks
// a license or a release manifest against, under the installation's signing key, which
// every tenant's licenses share: freed, the first tenant to claim a deleted tenant's
// product could issue licenses and sign releases that the deleted tenant's apps, still
// installed, accept.
func RetireProducts(ctx context.Context, tx pgx.Tx, tenant string) error {
	_, err := tx.Exec(ctx, `UPDATE products SET tenant_id = $2 WHERE tenant_id = $1`, tenant, RetiredOwner(tenant))
	return err
}
