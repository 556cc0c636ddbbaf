package fulfill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/services/storefront/internal/store"
	"github.com/keyhouse/keyhouse/services/storefront/internal/stripeevent"
	"google.golang.org/grpc/codes"
)

// How licenses follow the money after the sale. Each lifecycle event, under its
// session's lock, first records what the money now says (record: facts that only grow),
// then brings the license in line with it (sync), then records its own outcome.
// Recording the wanted state before acting makes the end state independent of the order
// and number of deliveries: a late older invoice cannot move the expiry back, a duplicate
// changes nothing, a won dispute cannot forget a refund or another dispute, and an event
// held until its checkout is fulfilled is applied then.

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
	if d.EventType == stripeevent.ChargeRefunded && !det.FullRefund() {
		return x.SetOutcome(ctx, d.ID, store.OutcomeIgnored, f.LicenseKey, nil, ptr("A partial refund: the license stays as it is"))
	}
	record(t, d.ID, d.EventType, det)
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

// record adds what one event says about the money to t. Every change is a fact that
// only grows (the latest paid period end, a refund in full seen, a dispute seen, a
// dispute won), so the same events recorded in any order, any number of times, leave the
// same t (PaidUntilBy, which only names the outcome, aside).
func record(t *store.Terms, deliveryID int32, eventType string, det stripeevent.Detail) {
	switch eventType {
	case stripeevent.InvoicePaid:
		if det.PeriodEnd != nil && (t.PaidUntil == nil || det.PeriodEnd.After(*t.PaidUntil)) {
			t.PaidUntil, t.PaidUntilBy = det.PeriodEnd, &deliveryID
		}
	case stripeevent.ChargeRefunded:
		if det.FullRefund() {
			t.Refunded = true
		}
	case stripeevent.DisputeCreated:
		t.Disputes = addID(t.Disputes, det.DisputeID)
	case stripeevent.DisputeClosed:
		// A dispute closed without its opening event seen counts the same: lost is lost.
		t.Disputes = addID(t.Disputes, det.DisputeID)
		if det.DisputeStatus == stripeevent.DisputeWon {
			t.WonDisputes = addID(t.WonDisputes, det.DisputeID)
		}
	}
}

// addID adds id to the sorted set ids.
func addID(ids []string, id string) []string {
	if id == "" || slices.Contains(ids, id) {
		return ids
	}
	ids = append(ids, id)
	slices.Sort(ids)
	return ids
}

// openDisputes are the disputes seen and not won: open, or closed as anything but won.
func openDisputes(t *store.Terms) []string {
	var open []string
	for _, id := range t.Disputes {
		if !slices.Contains(t.WonDisputes, id) {
			open = append(open, id)
		}
	}
	return open
}

// moneySaysRevoked: the purchase was refunded in full or has a dispute not won.
func moneySaysRevoked(t *store.Terms) bool { return t.Refunded || len(openDisputes(t)) > 0 }

func keeps(t *store.Terms) bool { return t.OnRefund != nil && *t.OnRefund == store.OnRefundKeep }

// wantRevoked is what the license should be, from t alone.
func wantRevoked(t *store.Terms) bool { return moneySaysRevoked(t) && !keeps(t) }

const msgRevokedElsewhere = "The license was already revoked outside the storefront: it stays revoked, and the storefront will not reactivate it"

// lifecycleOutcome names what an applied event did, from the purchase's state after it
// (so a retry of the same delivery names it the same).
func lifecycleOutcome(d *store.Delivery, det stripeevent.Detail, t *store.Terms) (string, *string) {
	elsewhere := t.RevokedApplied && t.RevokedElsewhere
	switch d.EventType {
	case stripeevent.InvoicePaid:
		if det.PeriodEnd == nil || det.PeriodEnd.Before(*t.PaidUntil) {
			return store.OutcomeIgnored, ptr("An older invoice: the expiry stays at the latest paid period")
		}
		if t.PaidUntilBy != nil && *t.PaidUntilBy != d.ID {
			return store.OutcomeIgnored, ptr("The invoice pays within a period already paid (a change of plan, say): the expiry stays at the latest paid period")
		}
		if det.First {
			return store.OutcomeExpirySet, nil
		}
		return store.OutcomeRenewed, nil
	case stripeevent.SubscriptionDeleted:
		return store.OutcomeCanceled, ptr("The subscription ended: the license expires at the end of what was paid")
	case stripeevent.ChargeRefunded:
		switch {
		case keeps(t):
			return store.OutcomeKept, ptr("Refunded in full; the mapping keeps the license (on_refund keep)")
		case elsewhere:
			return store.OutcomeIgnored, ptr(msgRevokedElsewhere)
		}
		return store.OutcomeRevokedRefund, nil
	case stripeevent.DisputeCreated:
		switch {
		case slices.Contains(t.WonDisputes, det.DisputeID):
			return store.OutcomeIgnored, ptr("This dispute was already closed as won")
		case keeps(t):
			return store.OutcomeKept, ptr("Disputed; the mapping keeps the license (on_refund keep)")
		case elsewhere:
			return store.OutcomeIgnored, ptr(msgRevokedElsewhere)
		}
		return store.OutcomeRevokedDispute, nil
	case stripeevent.DisputeClosed:
		if det.DisputeStatus != stripeevent.DisputeWon {
			switch {
			case keeps(t):
				return store.OutcomeIgnored, ptr(fmt.Sprintf("The dispute closed as %s; the mapping keeps the license (on_refund keep)", det.DisputeStatus))
			case elsewhere:
				return store.OutcomeIgnored, ptr(msgRevokedElsewhere)
			}
			return store.OutcomeIgnored, ptr(fmt.Sprintf("The dispute closed as %s: the license stays revoked", det.DisputeStatus))
		}
		switch {
		case keeps(t):
			return store.OutcomeIgnored, ptr("The dispute was won; the mapping keeps the license (on_refund keep), so it was not revoked")
		case t.Refunded:
			return store.OutcomeIgnored, ptr("The dispute was won, but the purchase was refunded in full: the license stays revoked")
		case len(openDisputes(t)) > 0:
			return store.OutcomeIgnored, ptr(fmt.Sprintf("The dispute was won, but dispute %s is open or lost: the license stays revoked",
				strings.Join(openDisputes(t), ", ")))
		case t.RevokedElsewhere:
			return store.OutcomeIgnored, ptr("The dispute was won, but the license was revoked outside the storefront: it stays revoked")
		}
		return store.OutcomeReactivated, nil
	case stripeevent.InvoicePaymentPaid:
		return store.OutcomeIgnored, ptr("The invoice's payment is now linked to its purchase (for its refunds and disputes); the license stays as it is")
	}
	return store.OutcomeIgnored, nil
}

// sync brings the license in line with the purchase's Terms and records what licensing
// accepted. A refusal (quota on reactivation, an expired license) is returned as an
// outcome with licensing's message; licensing not answering is an error (retried).
//
// The storefront reactivates only a license it revoked itself. When it comes to revoke
// and licensing answers that the license is revoked already, the vendor revoked it (a
// leaked key, say): the storefront notes it (RevokedElsewhere) and leaves the license
// revoked when the money later says active. A crash after licensing took the
// storefront's own revoke and before it was recorded looks the same on the retry; the
// license then stays revoked for the vendor to reactivate, never the other way round.
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
	want := wantRevoked(t)
	if want == t.RevokedApplied {
		return "", nil, nil
	}
	elsewhere := false
	if want || !t.RevokedElsewhere {
		err := w.Licensing.SetRevoked(ctx, f.TenantID, key, want)
		var ae *apierr.Error
		if errors.As(err, &ae) && ae.Code == codes.AlreadyExists {
			// Already in that state: revoked by the vendor, or reactivated by the vendor.
			err, elsewhere = nil, want
		}
		if err != nil {
			return refusal(err)
		}
	}
	t.RevokedApplied = want
	if want {
		t.RevokedElsewhere = elsewhere
	}
	if err := x.SaveTerms(ctx, t); err != nil {
		return "", nil, err
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
