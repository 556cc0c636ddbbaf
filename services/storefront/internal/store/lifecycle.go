package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// Outcomes of the events that follow a purchase (docs/storefront.md, lifecycle table).
const (
	// OutcomeHeld: the event names a purchase whose checkout has not been seen (or not
	// fulfilled) yet; it is applied when the checkout is.
	OutcomeHeld           = "held"
	OutcomeExpirySet      = "expiry_set"
	OutcomeRenewed        = "renewed"
	OutcomeCanceled       = "canceled"
	OutcomeRevokedRefund  = "revoked_refund"
	OutcomeRevokedDispute = "revoked_dispute"
	OutcomeReactivated    = "reactivated"
	// OutcomeKept: a full refund or a dispute on a mapping with on_refund "keep".
	OutcomeKept    = "kept"
	OutcomeIgnored = "ignored"
)

// What a mapping's on_refund says.
const (
	OnRefundRevoke = "revoke"
	OnRefundKeep   = "keep"
)

// Why a license should be revoked (Terms.RevokedFor).
const (
	RevokedForRefund  = "refund"
	RevokedForDispute = "dispute"
)

// finalLifecycle are the lifecycle outcomes a redelivery of the same event leaves alone.
var finalLifecycle = map[string]bool{
	OutcomeExpirySet: true, OutcomeRenewed: true, OutcomeCanceled: true, OutcomeRevokedRefund: true,
	OutcomeRevokedDispute: true, OutcomeReactivated: true, OutcomeKept: true, OutcomeIgnored: true,
}

// Terms is a purchase's state after the sale: the mapping's terms copied when the license
// request was built (nil before), what the money says the license should be (PaidUntil,
// RevokedFor, WonDisputes), and what licensing has been told (ExpiryApplied,
// RevokedApplied).
type Terms struct {
	Mode           *string
	GraceDays      *int32
	OnRefund       *string
	PaidUntil      *time.Time
	ExpiryApplied  *time.Time
	RevokedFor     *string
	RevokedApplied bool
	WonDisputes    []string
}

const termsCols = `mode, grace_days, on_refund, paid_until, expiry_applied, revoked_for, revoked_applied, won_disputes`

// SaveTerms writes the session's Terms (under its lock, so no update is lost).
func (x *Session) SaveTerms(ctx context.Context, t *Terms) error {
	won := t.WonDisputes
	if won == nil {
		won = []string{}
	}
	_, err := x.conn.Exec(ctx, `UPDATE fulfillments SET mode = $3, grace_days = $4, on_refund = $5, paid_until = $6,
		expiry_applied = $7, revoked_for = $8, revoked_applied = $9, won_disputes = $10, updated_at = now()
		WHERE tenant_id = $1 AND checkout_session_id = $2`, x.tenant, x.session,
		t.Mode, t.GraceDays, t.OnRefund, t.PaidUntil, t.ExpiryApplied, t.RevokedFor, t.RevokedApplied, won)
	return err
}

// HeldDeliveries lists the session's lifecycle deliveries still held, in the order they
// were received.
func (x *Session) HeldDeliveries(ctx context.Context) ([]*Delivery, error) {
	rows, err := x.conn.Query(ctx, `SELECT `+deliveryCols+` FROM deliveries
		WHERE tenant_id = $1 AND checkout_session_id = $2 AND outcome = 'held' ORDER BY id`, x.tenant, x.session)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*Delivery
	for rows.Next() {
		d, err := scanDelivery(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// linkPurchase ties Stripe ids to checkout sessions, inside RecordEvent's transaction.
// A checkout event links its session's ids; a lifecycle event finds its session through
// any of its ids (and then links the rest: an invoice's charge, say) or is held. Either
// way the held events whose ids are now linked are adopted: they get the session and go
// to the worker (returned). One lock per tenant orders these transactions, so an event
// and the checkout it waits for never miss each other however they interleave.
func linkPurchase(ctx context.Context, tx pgx.Tx, d *Delivery) ([]*Delivery, error) {
	if len(d.Refs) == 0 {
		return nil, nil
	}
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('storefront-refs:' || $1, 0))`, d.TenantID); err != nil {
		return nil, err
	}
	if d.CheckoutSessionID == "" {
		err := tx.QueryRow(ctx, `SELECT checkout_session_id FROM purchase_refs WHERE tenant_id = $1 AND ref = ANY($2) LIMIT 1`,
			d.TenantID, d.Refs).Scan(&d.CheckoutSessionID)
		if errors.Is(err, pgx.ErrNoRows) {
			d.Outcome = OutcomeHeld
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
	}
	var adopted []*Delivery
	refs := d.Refs
	for len(refs) > 0 {
		if _, err := tx.Exec(ctx, `INSERT INTO purchase_refs (tenant_id, ref, checkout_session_id)
			SELECT $1, r, $3 FROM unnest($2::text[]) AS r ON CONFLICT DO NOTHING`, d.TenantID, refs, d.CheckoutSessionID); err != nil {
			return nil, err
		}
		rows, err := tx.Query(ctx, `UPDATE deliveries SET checkout_session_id = $3, outcome = 'processing', updated_at = now()
			WHERE tenant_id = $1 AND checkout_session_id = '' AND refs && $2::text[] RETURNING `+deliveryCols,
			d.TenantID, refs, d.CheckoutSessionID)
		if err != nil {
			return nil, err
		}
		refs = nil
		for rows.Next() {
			a, err := scanDelivery(rows)
			if err != nil {
				rows.Close()
				return nil, err
			}
			adopted = append(adopted, a)
			refs = append(refs, a.Refs...)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return adopted, nil
}

// ClaimVendorAlert marks the delivery's vendor alert as sent; false when it already was
// (another attempt sent it).
func (x *Session) ClaimVendorAlert(ctx context.Context, deliveryID int32, claim bool) (bool, error) {
	tag, err := x.conn.Exec(ctx, `UPDATE deliveries SET vendor_alerted = $3
		WHERE tenant_id = $1 AND id = $2 AND vendor_alerted <> $3`, x.tenant, deliveryID, claim)
	return tag.RowsAffected() == 1, err
}
