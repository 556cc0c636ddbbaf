package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/keyhouse/keyhouse/pkg/events"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
	"github.com/keyhouse/keyhouse/pkg/tenantpurge"
	"github.com/keyhouse/keyhouse/services/billing/internal/plan"
	"github.com/stripe/stripe-go/v76"
)

// Plan is the tenant's plan in force at now, as its subscriptions leave it (plan.Tenant,
// the period-end rule included).
//
// A tenant this installation does not have (deleted, or a name an internal caller made
// up) is ErrTenantNotFound, not the Free plan: every issuance, reactivation and release
// registration asks this first (billingclient.ActivePlan), so none writes for it. The
// existence and the subscriptions are read in one round trip.
func (s *Store) Plan(ctx context.Context, tenant string, now time.Time) (plan.State, error) {
	var (
		exists bool
		subs   []plan.Sub
		b      pgx.Batch
	)
	b.Queue(`SELECT EXISTS (SELECT 1 FROM tenants WHERE tenant_id = $1)`, tenant).QueryRow(func(row pgx.Row) error {
		return row.Scan(&exists)
	})
	b.Queue(subscriptionsSQL, tenant).Query(func(rows pgx.Rows) (err error) {
		subs, err = pgx.CollectRows(rows, scanSub)
		return err
	})
	if err := s.db.SendBatch(ctx, &b).Close(); err != nil {
		return plan.State{}, err
	}
	if !exists {
		return plan.State{}, ErrTenantNotFound
	}
	return plan.Tenant(subs, now), nil
}

// subscriptionColumns are what scanSub reads.
const subscriptionColumns = `subscription_id, snapshot_plan, snapshot_status, snapshot_reason, cancel_at_period_end,
		current_period_end, snapshot_at, snapshot_rank, failed_at, failed_rank, ended, never_paid`

const subscriptionsSQL = `SELECT ` + subscriptionColumns + ` FROM subscriptions WHERE tenant_id = $1`

func subscriptions(ctx context.Context, q pgxx.Querier, tenant string) ([]plan.Sub, error) {
	rows, err := q.Query(ctx, subscriptionsSQL, tenant)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanSub)
}

func scanSub(row pgx.CollectableRow) (plan.Sub, error) {
	var (
		s                  plan.Sub
		p, st, reason      *string
		snapAt, failAt     *time.Time
		snapRank, failRank *int
		cancel             bool
		periodEnd          *time.Time
	)
	if err := row.Scan(&s.ID, &p, &st, &reason, &cancel, &periodEnd, &snapAt, &snapRank, &failAt, &failRank, &s.Ended, &s.NeverPaid); err != nil {
		return s, err
	}
	if snapAt != nil && p != nil && st != nil && snapRank != nil {
		s.HasSnapshot = true
		s.Snapshot = plan.State{Plan: *p, Status: *st, CancelAtPeriodEnd: cancel, CurrentPeriodEnd: periodEnd}
		if reason != nil {
			s.Snapshot.Reason = *reason
		}
		s.SnapshotOrder = plan.Order{At: snapAt.UTC(), Rank: *snapRank}
	}
	if failAt != nil && failRank != nil {
		s.HasFailed, s.FailedOrder = true, plan.Order{At: failAt.UTC(), Rank: *failRank}
	}
	return s, nil
}

// Customer is the Stripe customer last tied to the tenant ("" if none): by its checkout,
// or by the first event that named one of its subscriptions, whichever came first.
func (s *Store) Customer(ctx context.Context, tenant string) (string, error) {
	var id string
	err := s.db.QueryRow(ctx, `SELECT customer_id FROM stripe_customers WHERE tenant_id = $1
		ORDER BY created_at DESC LIMIT 1`, tenant).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	return id, err
}

// ErrTenantNotFound answers for a tenant id this installation does not have (activations
// asks before making a tenant's first lease key on a public read; issuance asks through
// Plan): the one "Tenant not found" of every service.
var ErrTenantNotFound = tenantpurge.ErrTenantNotFound

// TenantEmail is the email the tenant was created with (checkout pre-fills it).
func (s *Store) TenantEmail(ctx context.Context, tenant string) (string, error) {
	email, _, err := s.TenantContact(ctx, tenant)
	return email, err
}

// TenantContact is the email and name the tenant was created with (the storefront's buyer
// emails answer to them by default).
func (s *Store) TenantContact(ctx context.Context, tenant string) (email, name string, err error) {
	err = s.db.QueryRow(ctx, `SELECT email, name FROM tenants WHERE tenant_id = $1`, tenant).Scan(&email, &name)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", "", ErrTenantNotFound
	}
	return email, name, err
}

// Outcome says what Record did with an event.
type Outcome string

// Outcomes of Record.
const (
	Applied   Outcome = "applied"   // recorded, and the tenant's subscription moved
	Unchanged Outcome = "unchanged" // recorded; older than what is known, or nothing to change
	Duplicate Outcome = "duplicate" // seen before (by event id): nothing done
	Parked    Outcome = "parked"    // no tenant yet: kept until its customer's checkout arrives
	NoTenant  Outcome = "no_tenant" // names no tenant this installation has: recorded, ignored
)

// Record applies one verified billing event, once per event id, in one transaction: a
// crash leaves either all of it or nothing (and Stripe delivers again). raw is the
// event's JSON, kept only while the event is parked.
//
// A move of the tenant's plan or status (plan.Moved, at now) is billing.plan_changed, with
// the state in force after it.
func (s *Store) Record(ctx context.Context, raw []byte, c plan.Change, now time.Time) (Outcome, error) {
	var out Outcome
	err := s.spine.InTx(ctx, s.db, func(ctx context.Context, tx pgx.Tx) error {
		var err error
		out, err = record(ctx, tx, raw, c, now)
		return err
	})
	return out, err
}

// planMoved emits billing.plan_changed when the tenant's plan or status moved from the
// subscriptions before.
func planMoved(ctx context.Context, tx pgx.Tx, tenant string, before []plan.Sub, now time.Time) error {
	subs, err := subscriptions(ctx, tx, tenant)
	if err != nil {
		return err
	}
	if !plan.Moved(before, subs, now) {
		return nil
	}
	after := plan.Tenant(subs, now)
	var p *string
	if after.Plan != "" {
		p = &after.Plan
	}
	status := after.Status
	if status == "" {
		status = plan.Active
	}
	return events.Emit(ctx, tx, events.BillingPlanChanged(tenant, p, status))
}

func record(ctx context.Context, tx pgx.Tx, raw []byte, c plan.Change, now time.Time) (Outcome, error) {
	if c.Customer != "" {
		// One customer's events one at a time, so an event parked for a customer is
		// never missed by the checkout that ties the customer to a tenant.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(7317002, hashtext($1))`, c.Customer); err != nil {
			return "", err
		}
	}
	tag, err := tx.Exec(ctx, `INSERT INTO stripe_events (event_id, type, created, customer_id)
		VALUES ($1, $2, $3, NULLIF($4, '')) ON CONFLICT (event_id) DO NOTHING`,
		c.EventID, string(c.Type), c.Order.At, c.Customer)
	if err != nil {
		return "", err
	}
	if tag.RowsAffected() == 0 {
		return Duplicate, nil
	}
	tenant, err := resolveTenant(ctx, tx, c)
	if err != nil {
		return "", err
	}
	if tenant == "" {
		if c.Customer == "" || c.Link {
			return NoTenant, nil
		}
		_, err := tx.Exec(ctx, `UPDATE stripe_events SET payload = $2 WHERE event_id = $1`, c.EventID, raw)
		return Parked, err
	}
	if _, err := tx.Exec(ctx, `UPDATE stripe_events SET tenant_id = $2 WHERE event_id = $1`, c.EventID, tenant); err != nil {
		return "", err
	}
	before, err := subscriptions(ctx, tx, tenant)
	if err != nil {
		return "", err
	}
	out, err := applyToSubscription(ctx, tx, tenant, c)
	if err != nil {
		return out, err
	}
	// The customer is the tenant's from the first event that ties them, whatever the
	// order: the checkout (client_reference_id), or an event about a subscription of the
	// tenant (found by the subscription, or named by its metadata.tenant_id), since a
	// subscription's customer is the one who pays for it. Checkout reuses the customer
	// and, while the tenant holds a paid subscription, answers its Billing Portal; events
	// that named only the customer, parked so far, apply now.
	if c.Customer != "" && (c.Link || (c.Subscription != "" && out != NoTenant)) {
		tag, err := tx.Exec(ctx, `INSERT INTO stripe_customers (customer_id, tenant_id) VALUES ($1, $2)
			ON CONFLICT (customer_id) DO NOTHING`, c.Customer, tenant)
		if err != nil {
			return "", err
		}
		if tag.RowsAffected() == 1 {
			parked, err := unpark(ctx, tx, tenant, c.Customer)
			if err != nil {
				return "", err
			}
			if parked && out == Unchanged {
				out = Applied
			}
		}
	}
	return out, planMoved(ctx, tx, tenant, before, now)
}

// resolveTenant finds the tenant an event is about: the subscription's tenant once known,
// the customer's tenant recorded at checkout, else the tenant the event names
// (client_reference_id or metadata.tenant_id) if it exists.
func resolveTenant(ctx context.Context, tx pgx.Tx, c plan.Change) (string, error) {
	var tenant string
	if !c.Link {
		err := tx.QueryRow(ctx, `SELECT tenant_id FROM subscriptions WHERE subscription_id = $1
			UNION ALL SELECT tenant_id FROM stripe_customers WHERE customer_id = $2 LIMIT 1`,
			c.Subscription, c.Customer).Scan(&tenant)
		if err == nil {
			return tenant, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return "", err
		}
	}
	if c.Tenant == "" {
		return "", nil
	}
	err := tx.QueryRow(ctx, `SELECT tenant_id FROM tenants WHERE tenant_id = $1`, c.Tenant).Scan(&tenant)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	return tenant, err
}

// applyToSubscription merges the event into its subscription's row.
func applyToSubscription(ctx context.Context, tx pgx.Tx, tenant string, c plan.Change) (Outcome, error) {
	if c.Subscription == "" || c.Kind == plan.Ignore {
		return Unchanged, nil
	}
	if _, err := tx.Exec(ctx, `INSERT INTO subscriptions (subscription_id, tenant_id) VALUES ($1, $2)
		ON CONFLICT (subscription_id) DO NOTHING`, c.Subscription, tenant); err != nil {
		return "", err
	}
	rows, err := tx.Query(ctx, `SELECT `+subscriptionColumns+`
		FROM subscriptions WHERE subscription_id = $1 AND tenant_id = $2 FOR UPDATE`, c.Subscription, tenant)
	if err != nil {
		return "", err
	}
	subs, err := pgx.CollectRows(rows, scanSub)
	if err != nil {
		return "", err
	}
	if len(subs) != 1 {
		// The subscription belongs to another tenant: never move it.
		return NoTenant, nil
	}
	next, changed := subs[0].Merge(c)
	if !changed {
		return Unchanged, nil
	}
	var p, st, reason *string
	var snapAt, failAt, periodEnd *time.Time
	var snapRank, failRank *int
	if next.HasSnapshot {
		p, st, periodEnd = &next.Snapshot.Plan, &next.Snapshot.Status, next.Snapshot.CurrentPeriodEnd
		snapAt, snapRank = &next.SnapshotOrder.At, &next.SnapshotOrder.Rank
		if next.Snapshot.Reason != "" {
			reason = &next.Snapshot.Reason
		}
	}
	if next.HasFailed {
		failAt, failRank = &next.FailedOrder.At, &next.FailedOrder.Rank
	}
	_, err = tx.Exec(ctx, `UPDATE subscriptions SET snapshot_plan = $2, snapshot_status = $3, snapshot_reason = $4,
		cancel_at_period_end = $5, current_period_end = $6, snapshot_at = $7, snapshot_rank = $8,
		failed_at = $9, failed_rank = $10, ended = $11, never_paid = $12, updated_at = now() WHERE subscription_id = $1`,
		next.ID, p, st, reason, next.HasSnapshot && next.Snapshot.CancelAtPeriodEnd, periodEnd, snapAt, snapRank,
		failAt, failRank, next.Ended, next.NeverPaid)
	if err != nil {
		return "", err
	}
	return Applied, nil
}

// unpark applies the events that waited for this customer's tenant, oldest first.
func unpark(ctx context.Context, tx pgx.Tx, tenant, customer string) (bool, error) {
	rows, err := tx.Query(ctx, `SELECT event_id, payload FROM stripe_events
		WHERE customer_id = $1 AND payload IS NOT NULL ORDER BY created, event_id`, customer)
	if err != nil {
		return false, err
	}
	type parkedEvent struct {
		ID      string
		Payload []byte
	}
	waiting, err := pgx.CollectRows(rows, pgx.RowToStructByPos[parkedEvent])
	if err != nil {
		return false, err
	}
	applied := false
	for _, p := range waiting {
		var e stripe.Event
		if err := json.Unmarshal(p.Payload, &e); err != nil {
			return false, fmt.Errorf("parked event %s: %w", p.ID, err)
		}
		c, err := plan.Read(e)
		if err != nil {
			return false, fmt.Errorf("parked event %s: %w", p.ID, err)
		}
		out, err := applyToSubscription(ctx, tx, tenant, c)
		if err != nil {
			return false, err
		}
		applied = applied || out == Applied
		if _, err := tx.Exec(ctx, `UPDATE stripe_events SET payload = NULL, tenant_id = $2 WHERE event_id = $1`, p.ID, tenant); err != nil {
			return false, err
		}
	}
	return applied, nil
}
