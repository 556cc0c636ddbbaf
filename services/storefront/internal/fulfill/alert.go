package fulfill

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/keyhouse/keyhouse/pkg/billingclient"
	"github.com/keyhouse/keyhouse/pkg/mail"
	"github.com/keyhouse/keyhouse/services/storefront/internal/store"
)

// VendorContacts yields a tenant's name and address (both "" self-hosted, where none
// exist): billingclient.Client in production. The address is where to tell the tenant
// about a purchase that got no license (self-hosted the console's storefront page shows
// it); both are the defaults of its buyer emails' sender name and reply-to.
type VendorContacts interface {
	TenantContact(ctx context.Context, tenant string) (billingclient.Contact, error)
}

// alertVendor mails the tenant, once per delivery, that a buyer paid and got no license
// (over_quota, unmapped) and what to do. The buyer's address is not in it. A failure is
// logged and the claim released, so the next attempt (Stripe's redelivery) tries again;
// it never fails the delivery, whose outcome is recorded already.
func (w *Worker) alertVendor(ctx context.Context, x *store.Session, d *store.Delivery, outcome, reason string, log *slog.Logger) {
	if w.Vendors == nil {
		return
	}
	claimed, err := x.ClaimVendorAlert(ctx, d.ID, true)
	if err != nil || !claimed {
		return
	}
	contact, err := w.Vendors.TenantContact(ctx, d.TenantID)
	to := contact.Email
	if err == nil && to != "" {
		err = w.Mail.Send(ctx, VendorAlert(to, d, outcome, reason))
	}
	if err != nil || to == "" {
		if err != nil {
			log.Warn("vendor alert not sent", "error", err.Error())
		}
		if _, rerr := x.ClaimVendorAlert(ctx, d.ID, false); rerr != nil {
			log.Warn("vendor alert claim not released", "error", rerr.Error())
		}
		return
	}
	log.Info("vendor alerted", "outcome", outcome)
}

// VendorAlert is the email a tenant receives when a paid purchase got no license.
func VendorAlert(to string, d *store.Delivery, outcome, reason string) mail.Message {
	var b strings.Builder
	fmt.Fprintf(&b, "A buyer paid through your Stripe storefront and got no license.\n\n")
	fmt.Fprintf(&b, "Why:              %s\n", reason)
	fmt.Fprintf(&b, "Checkout session: %s\n", d.CheckoutSessionID)
	fmt.Fprintf(&b, "Stripe event:     %s\n\n", d.EventID)
	switch outcome {
	case store.OutcomeOverQuota:
		fmt.Fprintf(&b, "What to do: upgrade your plan (console, Billing), or revoke or delete licenses you no longer need;\n")
	default:
		fmt.Fprintf(&b, "What to do: add a mapping for the payment link or service_ref above (console, Storefront);\n")
	}
	fmt.Fprintf(&b, "then resend the event from the Stripe Dashboard (Developers > Webhooks > your endpoint > the event > Resend).\n")
	fmt.Fprintf(&b, "The license is issued and emailed to the buyer then.\n")
	subject := "A buyer paid and got no license: over your plan's quota"
	if outcome == store.OutcomeUnmapped {
		subject = "A buyer paid and got no license: no mapping matches"
	}
	return mail.Message{To: to, Subject: subject, Text: b.String()}
}
