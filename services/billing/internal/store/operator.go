package store

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/events"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
	"github.com/keyhouse/keyhouse/pkg/tenantpurge"
)

// OperatorTenant is a tenant as the hosted operator lists it (the plan and licenses come
// from elsewhere: Plan, and licensing's count).
type OperatorTenant struct {
	Tenant
	SuspendedAt *time.Time
}

const operatorTenantColumns = `tenant_id, name, email, created_at, suspended_at`

func scanOperatorTenant(r pgx.Row) (OperatorTenant, error) {
	var t OperatorTenant
	err := r.Scan(&t.ID, &t.Name, &t.Email, &t.CreatedAt, &t.SuspendedAt)
	return t, err
}

// ListTenants returns up to limit tenants after the tenant id after ("" from the start),
// oldest first (created_at, then id), and whether more follow; email, when not empty,
// keeps only the tenant of that email (compared case-insensitively, as the unique index
// tenants_email_unique compares them, which serves the lookup). A cursor naming no tenant
// is a 400 naming the parameter.
func (s *Store) ListTenants(ctx context.Context, email, after string, limit int) (tenants []OperatorTenant, hasMore bool, err error) {
	query := `SELECT ` + operatorTenantColumns + ` FROM tenants
		WHERE ($2 = '' OR lower(email) = lower($2)) ORDER BY created_at, tenant_id LIMIT $1`
	args := []any{limit + 1, email}
	if after != "" {
		var exists bool
		if err := s.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM tenants WHERE tenant_id = $1)`, after).Scan(&exists); err != nil {
			return nil, false, err
		}
		if !exists {
			return nil, false, apierr.Invalid("starting_after names no tenant")
		}
		query = `SELECT ` + operatorTenantColumns + ` FROM tenants
			WHERE ($2 = '' OR lower(email) = lower($2))
				AND (created_at, tenant_id) > (SELECT created_at, tenant_id FROM tenants WHERE tenant_id = $3)
			ORDER BY created_at, tenant_id LIMIT $1`
		args = append(args, after)
	}
	rows, err := s.db.Query(ctx, query, args...)
	if err != nil {
		return nil, false, err
	}
	tenants, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (OperatorTenant, error) { return scanOperatorTenant(r) })
	if err != nil {
		return nil, false, err
	}
	if len(tenants) > limit {
		return tenants[:limit], true, nil
	}
	return tenants, false, nil
}

// OperatorTenantByID returns one tenant, or ErrTenantNotFound.
func (s *Store) OperatorTenantByID(ctx context.Context, id string) (OperatorTenant, error) {
	t, err := scanOperatorTenant(s.db.QueryRow(ctx, `SELECT `+operatorTenantColumns+` FROM tenants WHERE tenant_id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return t, ErrTenantNotFound
	}
	return t, err
}

// SetSuspended suspends (or resumes) a tenant. Its credentials are refused from the next
// call of any service on, as every service resolves them here; suspending a suspended
// tenant keeps the first suspended_at.
func (s *Store) SetSuspended(ctx context.Context, id string, suspended bool) (OperatorTenant, error) {
	set := `suspended_at = NULL`
	if suspended {
		set = `suspended_at = coalesce(suspended_at, now())`
	}
	t, err := scanOperatorTenant(s.db.QueryRow(ctx, `UPDATE tenants SET `+set+` WHERE tenant_id = $1 RETURNING `+operatorTenantColumns, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return t, ErrTenantNotFound
	}
	return t, err
}

// LiveSubscriptions lists the tenant's Stripe subscriptions that have not ended (as far as
// Stripe's events told): those the customer may still be charged for.
func (s *Store) LiveSubscriptions(ctx context.Context, tenant string) ([]string, error) {
	return liveSubscriptions(ctx, s.db, tenant)
}

func liveSubscriptions(ctx context.Context, q pgxx.Querier, tenant string) ([]string, error) {
	rows, err := q.Query(ctx, `SELECT subscription_id FROM subscriptions WHERE tenant_id = $1 AND NOT ended
		ORDER BY subscription_id`, tenant)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// ErrSubscribedMeanwhile: a subscription of the tenant that the deletion did not cancel
// arrived while it ran (a checkout completed); nothing was deleted, and a retry cancels it
// too.
var ErrSubscribedMeanwhile = apierr.Retry("A subscription of the tenant arrived during the deletion; nothing was deleted, retry")

// DeleteTenant deletes a hosted tenant: its row (its key and plan with it) and every
// other row of it in this schema, then emits tenant.deleted in the same transaction, so
// every other service forgets it too (pkg/tenantpurge), even one that is down now. Its
// credentials are refused from the commit on. An unknown tenant is ErrTenantNotFound.
// canceled are the subscriptions the caller canceled in Stripe first: a live one not
// among them (it arrived since) refuses the deletion with ErrSubscribedMeanwhile, so a
// deleted tenant's customer is never left paying. The tenant's row is locked first: an
// event inserting a subscription of it waits for this transaction (its foreign key).
func (s *Store) DeleteTenant(ctx context.Context, id string, canceled []string) error {
	return s.spine.InTx(ctx, s.db, func(ctx context.Context, tx pgx.Tx) error {
		var found string
		err := tx.QueryRow(ctx, `SELECT tenant_id FROM tenants WHERE tenant_id = $1 FOR UPDATE`, id).Scan(&found)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrTenantNotFound
		}
		if err != nil {
			return err
		}
		live, err := liveSubscriptions(ctx, tx, id)
		if err != nil {
			return err
		}
		for _, sub := range live {
			if !slices.Contains(canceled, sub) {
				return ErrSubscribedMeanwhile
			}
		}
		tag, err := tx.Exec(ctx, `DELETE FROM tenants WHERE tenant_id = $1`, id)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return ErrTenantNotFound
		}
		// Before the emit: the purge also takes the tenant's unsent outbox rows, which
		// would only tell a log that is about to be deleted.
		if _, err := tenantpurge.Purge(ctx, tx, id); err != nil {
			return err
		}
		return events.Emit(ctx, tx, events.TenantDeleted(id))
	})
}
