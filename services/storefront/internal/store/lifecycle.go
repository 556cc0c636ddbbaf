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

// finalLifecycle are the lifecycle outcomes a redelivery of the same event leaves alone.
var finalLifecycle = map[string]bool{
	OutcomeExpirySet: true, OutcomeRenewed: true, OutcomeCanceled: true, OutcomeRevokedRefund: true,
	OutcomeRevokedDispute: true, OutcomeReactivated: true, OutcomeKept: true, OutcomeIgnored: true,
}

// Terms is a purchase's state after the sale: the mapping's terms copied when the license
// request was built (nil before), what the money says (PaidUntil, Refunded, Disputes,
// WonDisputes), and what the storefront has done to the license (ExpiryApplied,
// RevokedApplied, RevokedElsewhere).
//
// What the money says is kept as facts that each event only adds to (the latest paid
// period end, a refund in full seen, the disputes seen and those won), never as a single
// reason that a later event overwrites: the same events in any order, any number of
// times, leave the same Terms.
type Terms struct {
	Mode      *string
	GraceDays *int32
	OnRefund  *string
	PaidUntil *time.Time
	// PaidUntilBy is the delivery whose invoice set PaidUntil: a retry of that delivery
	// is still its renewal, another invoice for the same period (a proration) is not.
	PaidUntilBy   *int32
	ExpiryApplied *time.Time
	// Refunded: a charge of the purchase was refunded in full.
	Refunded bool
	// Disputes are the ids of every dispute seen (opened or closed), WonDisputes those
	// closed as won; the others are open or lost.
	Disputes    []string
	WonDisputes []string
	// RevokedApplied: the storefront holds the license revoked. RevokedElsewhere: when it
	// came to revoke, the license was already revoked (by the vendor, with revoke-license),
	// so the revoke is not the storefront's and it never reactivates the license.
	RevokedApplied   bool
	RevokedElsewhere bool
}

const termsCols = `mode, grace_days, on_refund, paid_until, paid_until_delivery, expiry_applied, refunded, disputes,
	won_disputes, revoked_applied, revoked_elsewhere`

// scanTerms lists the destinations of termsCols.
func (t *Terms) scanTerms() []any {
	return []any{&t.Mode, &t.GraceDays, &t.OnRefund, &t.PaidUntil, &t.PaidUntilBy, &t.ExpiryApplied, &t.Refunded,
		&t.Disputes, &t.WonDisputes, &t.RevokedApplied, &t.RevokedElsewhere}
}

// SaveTerms writes the session's Terms (under its lock, so no update is lost).
func (x *Session) SaveTerms(ctx context.Context, t *Terms) error {
	_, err := x.conn.Exec(ctx, `UPDATE fulfillments SET mode = $3, grace_days = $4, on_refund = $5, paid_until = $6,
		paid_until_delivery = $7, expiry_applied = $8, refunded = $9, disputes = $10, won_disputes = $11,
		revoked_applied = $12, revoked_elsewhere = $13, updated_at = now()
		WHERE tenant_id = $1 AND checkout_session_id = $2`, x.tenant, x.session,
		t.Mode, t.GraceDays, t.OnRefund, t.PaidUntil, t.PaidUntilBy, t.ExpiryApplied, t.Refunded, nonNil(t.Disputes),
		nonNil(t.WonDisputes), t.RevokedApplied, t.RevokedElsewhere)
	return err
}

// nonNil is s, or an empty slice for the NOT NULL array columns.
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
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
