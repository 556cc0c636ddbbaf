package fulfill

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/events"
	"github.com/keyhouse/keyhouse/pkg/idempotency"
	"github.com/keyhouse/keyhouse/pkg/mail"
	"github.com/keyhouse/keyhouse/services/storefront/internal/store"
)

// Resend limits: a support desk resending a lost key needs one or two; more, within a
// day, would be mailing the buyer rather than helping.
const (
	MaxResends   = 5
	resendWindow = 24 * time.Hour
)

// Resent is what a resend did.
type Resent struct {
	DeliveryID        int32
	CheckoutSessionID string
	EmailStatus       string
	// SentTo is the address on record, masked (mail.Mask).
	SentTo string
	SentAt time.Time
	// ResendsInWindow counts this purchase's resends in the last resendWindow, this one
	// included.
	ResendsInWindow int
}

// The refusals of Resend (addendum §4). None names the address, the key or the link.
var (
	ErrDeliveryNotFound   = apierr.NotFound("Delivery not found")
	errNothingToResend    = apierr.Conflict("No license was issued for this delivery's purchase; there is no email to resend")
	errNoAddressOnRecord  = apierr.Conflict("No buyer address is on record for this purchase")
	errAddressUnreadable  = apierr.Conflict("The buyer address on record cannot be read: the signing keyring was replaced since the purchase")
	errResendDeliveryFail = apierr.Unavailable("Email delivery failed, retry")
)

// Resend sends the buyer email of delivery deliveryID's purchase again, now, to the
// address the buyer gave at checkout (kept sealed; never one supplied by the caller), and
// records it; answer turns what it did into the stored answer of idemKey (pkg/idempotency:
// a retry with the same key and requestHash gets that answer back and sends nothing).
//
// It holds the purchase's lock, like fulfillment, so a resend and the worker never send
// the purchase's email at once on any replica, and the per-purchase limit (MaxResends in
// resendWindow) is counted and recorded under it. The Idempotency-Key record and the
// resend's are written in one transaction on the lock's connection: a resend uses one
// connection, so resends queued on one purchase cannot exhaust the pool. An email the
// worker has not sent yet (pending, or failed and retrying) is sent by the resend and
// recorded sent, so the worker sends no second one.
func (w *Worker) Resend(ctx context.Context, tenant string, deliveryID int32, idemKey string, requestHash []byte,
	answer func(*Resent) ([]byte, error)) ([]byte, error) {
	ctx = events.OutgoingActor(ctx, events.ActorStorefront)
	d, err := w.Store.Delivery(ctx, tenant, deliveryID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, ErrDeliveryNotFound
	}
	if err != nil {
		return nil, err
	}
	if d.CheckoutSessionID == "" {
		return nil, errNothingToResend
	}
	x, err := w.Store.TryLockSession(ctx, tenant, d.CheckoutSessionID)
	if err != nil {
		return nil, err
	}
	defer x.Unlock()
	resp, _, err := idempotency.Do(ctx, x, tenant, idemKey, requestHash, func(tx pgx.Tx) ([]byte, error) {
		r, err := w.resend(ctx, x, tx, d)
		if err != nil {
			return nil, err
		}
		return answer(r)
	})
	return resp, err
}

// resend is Resend under the lock, in tx.
func (w *Worker) resend(ctx context.Context, x *store.Session, tx pgx.Tx, d *store.Delivery) (*Resent, error) {
	f, err := x.Fulfillment(ctx)
	if err != nil {
		return nil, err
	}
	switch {
	case f.LicenseKey == nil || f.Request == nil:
		return nil, errNothingToResend
	case len(f.BuyerEmailSealed) == 0:
		return nil, errNoAddressOnRecord
	}
	to, err := w.openEmail(ctx, f.BuyerEmailSealed)
	if err != nil {
		return nil, err
	}
	if to == "" {
		return nil, errAddressUnreadable
	}
	rcpt, err := mail.ParseRecipient(to)
	if err != nil {
		return nil, apierr.Conflict("The buyer address on record cannot be mailed: %s", recipientReason(err))
	}
	n, oldest, err := x.Resends(ctx, tx, w.now().Add(-resendWindow))
	if err != nil {
		return nil, err
	}
	if n >= MaxResends {
		return nil, apierr.TooMany("This purchase's email was resent %d times in the last 24 hours; retry after %s",
			MaxResends, oldest.Add(resendWindow).UTC().Format(time.RFC3339))
	}
	log := w.Log.With("tenant_id", d.TenantID, "delivery_id", d.ID, "action", "resend-email")
	msg, err := w.buyerMessage(ctx, f, d.TenantID, to, log)
	if err != nil {
		return nil, err
	}
	if err := w.Mail.Send(ctx, msg); err != nil {
		log.Warn("buyer email resend failed", "error", err.Error())
		if errors.Is(err, mail.ErrSMTPUTF8Unsupported) {
			return nil, apierr.Conflict("The buyer address on record cannot be mailed: %s", "its local part is not ASCII and the mail server does not offer SMTPUTF8")
		}
		return nil, errResendDeliveryFail
	}
	status := w.sentStatus()
	sentAt, err := x.EmailResent(ctx, tx, d.ID, status)
	if err != nil {
		return nil, fmt.Errorf("record the resend: %w", err)
	}
	log.Info("buyer email resent", "email_status", status)
	return &Resent{DeliveryID: d.ID, CheckoutSessionID: d.CheckoutSessionID, EmailStatus: status,
		SentTo: mail.Mask(rcpt.Address), SentAt: sentAt, ResendsInWindow: n + 1}, nil
}
