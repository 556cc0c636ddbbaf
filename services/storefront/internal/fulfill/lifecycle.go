package fulfill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/services/storefront/internal/store"
	"github.com/keyhouse/keyhouse/services/storefront/internal/stripeevent"
	"google.golang.org/grpc/codes"
)

// How licenses follow the money after the sale. Each lifecycle event, under its
// session's lock, first records what the money now says (Terms: the paid period only
// moves forward, a full refund or a dispute marks the purchase, a dispute won clears its
// mark), then brings the license in line with it (sync), then records its own outcome.
// Recording the wanted state before acting makes the end state independent of the order
// and number of deliveries: a late older invoice cannot move the expiry back, a duplicate
// changes nothing, and an event held until its checkout is fulfilled is applied then.

// subscriptionFirstDays is the first expiry of a subscription's license when its mapping
// has no duration_days and the first invoice has not been seen yet.
const subscriptionFirstDays = 31

// lifecycle applies one lifecycle delivery.
func (w *Worker) lifecycle(ctx context.Context, x *store.Session, f *store.Fulfillment, d *store.Delivery, log *slog.Logger) error {
	var det stripeevent.Detail
	if len(d.Detail) > 0 {
		if err := json.Unmarshal(d.Detail, &det); err != nil {
			return x.SetOutcome(ctx, d.ID, store.OutcomeError, nil, nil, ptr("Unreadable event detail"))
		}
	}
	t := &f.Terms
	switch d.EventType {
	case stripeevent.InvoicePaid:
		if det.PeriodEnd != nil && (t.PaidUntil == nil || det.PeriodEnd.After(*t.PaidUntil)) {
			t.PaidUntil = det.PeriodEnd
		}
	case stripeevent.ChargeRefunded:
		if !det.FullRefund() {
			return x.SetOutcome(ctx, d.ID, store.OutcomeIgnored, f.LicenseKey, nil, ptr("A partial refund: the license stays as it is"))
		}
		if t.RevokedFor == nil {
			t.RevokedFor = ptr(store.RevokedForRefund)
		}
	case stripeevent.DisputeCreated:
		if slices.Contains(t.WonDisputes, det.DisputeID) {
			return x.SetOutcome(ctx, d.ID, store.OutcomeIgnored, f.LicenseKey, nil, ptr("This dispute was already closed as won"))
		}
		if t.RevokedFor == nil {
			t.RevokedFor = ptr(store.RevokedForDispute)
		}
	case stripeevent.DisputeClosed:
		if det.DisputeStatus != stripeevent.DisputeWon {
			return x.SetOutcome(ctx, d.ID, store.OutcomeIgnored, f.LicenseKey, nil,
				ptr(fmt.Sprintf("The dispute closed as %s: the license stays as it is", det.DisputeStatus)))
		}
		if !slices.Contains(t.WonDisputes, det.DisputeID) {
			t.WonDisputes = append(t.WonDisputes, det.DisputeID)
		}
		if t.RevokedFor != nil && *t.RevokedFor == store.RevokedForDispute {
			t.RevokedFor = nil
		}
	}
	if err := x.SaveTerms(ctx, t); err != nil {
		return err
	}
	if f.LicenseKey == nil {
		log.Info("lifecycle event held until the checkout is fulfilled")
		return x.SetOutcome(ctx, d.ID, store.OutcomeHeld, nil, nil, ptr("Waiting for the purchase's checkout to be fulfilled"))
	}
	outcome, msg, err := w.sync(ctx, x, f)
	if err != nil {
		return err
	}
	if outcome == "" {
		outcome, msg = lifecycleOutcome(d, det, t)
	}
	log.Info("lifecycle event applied", "outcome", outcome)
	return x.SetOutcome(ctx, d.ID, outcome, f.LicenseKey, nil, msg)
}

// lifecycleOutcome names what an applied event did.
func lifecycleOutcome(d *store.Delivery, det stripeevent.Detail, t *store.Terms) (string, *string) {
	keep := t.OnRefund != nil && *t.OnRefund == store.OnRefundKeep
	switch d.EventType {
	case stripeevent.InvoicePaid:
		if det.PeriodEnd == nil || det.PeriodEnd.Before(*t.PaidUntil) {
			return store.OutcomeIgnored, ptr("An older invoice: the expiry stays at the latest paid period")
		}
		if det.First {
			return store.OutcomeExpirySet, nil
		}
		return store.OutcomeRenewed, nil
	case stripeevent.SubscriptionDeleted:
		return store.OutcomeCanceled, ptr("The subscription ended: the license expires at the end of what was paid")
	case stripeevent.ChargeRefunded:
		if keep {
			return store.OutcomeKept, ptr("Refunded in full; the mapping keeps the license (on_refund keep)")
		}
		return store.OutcomeRevokedRefund, nil
	case stripeevent.DisputeCreated:
		if keep {
			return store.OutcomeKept, ptr("Disputed; the mapping keeps the license (on_refund keep)")
		}
		return store.OutcomeRevokedDispute, nil
	case stripeevent.DisputeClosed:
		if t.RevokedFor != nil {
			return store.OutcomeIgnored, ptr("The dispute was won, but the purchase was refunded: the license stays revoked")
		}
		return store.OutcomeReactivated, nil
	}
	return store.OutcomeIgnored, nil
}

// sync brings the license in line with the purchase's Terms and records what licensing
// accepted. A refusal (quota on reactivation, an expired license) is returned as an
// outcome with licensing's message; licensing not answering is an error (retried).
func (w *Worker) sync(ctx context.Context, x *store.Session, f *store.Fulfillment) (outcome string, msg *string, err error) {
	t := &f.Terms
	key := *f.LicenseKey
	if t.Mode != nil && *t.Mode == stripeevent.ModeSubscription && t.PaidUntil != nil {
		want := t.PaidUntil.Add(time.Duration(deref(t.GraceDays)) * 24 * time.Hour)
		if t.ExpiryApplied == nil || want.After(*t.ExpiryApplied) {
			if err := w.Licensing.SetExpiry(ctx, f.TenantID, key, want); err != nil {
				return refusal(err)
			}
			t.ExpiryApplied = &want
			if err := x.SaveTerms(ctx, t); err != nil {
				return "", nil, err
			}
		}
	}
	wantRevoked := t.RevokedFor != nil && (t.OnRefund == nil || *t.OnRefund != store.OnRefundKeep)
	if wantRevoked != t.RevokedApplied {
		err := w.Licensing.SetRevoked(ctx, f.TenantID, key, wantRevoked)
		var ae *apierr.Error
		if errors.As(err, &ae) && ae.Code == codes.AlreadyExists {
			err = nil // already in that state (the vendor, or an earlier attempt)
		}
		if err != nil {
			return refusal(err)
		}
		t.RevokedApplied = wantRevoked
		if err := x.SaveTerms(ctx, t); err != nil {
			return "", nil, err
		}
	}
	return "", nil, nil
}

// refusal turns licensing's answer into an outcome, or returns the error to retry.
func refusal(err error) (string, *string, error) {
	var ae *apierr.Error
	if !errors.As(err, &ae) || ae.Code == codes.Unavailable {
		return "", nil, err
	}
	if ae.Code == codes.PermissionDenied && ae.Message == "License issuance quota exceeded" {
		return store.OutcomeOverQuota, ptr(ae.Message), nil
	}
	return store.OutcomeError, ptr(ae.Message), nil
}

// catchUp applies, once the session's license exists, the lifecycle events that were
// held waiting for it, in the order they came.
func (w *Worker) catchUp(ctx context.Context, x *store.Session, f *store.Fulfillment, log *slog.Logger) error {
	held, err := x.HeldDeliveries(ctx)
	if err != nil {
		return err
	}
	for _, h := range held {
		if err := w.lifecycle(ctx, x, f, h, log.With("delivery_id", h.ID, "event_type", h.EventType)); err != nil {
			return err
		}
	}
	return nil
}

func deref(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}
