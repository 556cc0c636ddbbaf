// Package payments is billing's one door to the Stripe API (stripe-go/v76): Checkout
// Sessions for the Pro plan, Billing Portal sessions for a subscription's management, and
// the cancellation of a deleted tenant's subscriptions.
// Webhook verification is not here: it needs only the signing secret (server package).
package payments

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/keyhouse/keyhouse/pkg/config"
	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/client"
)

// Stripe creates the sessions. A nil *Stripe means billing is not configured.
type Stripe struct {
	api *client.API
	// prices maps an interval ("monthly", "annual") to its Stripe price id.
	prices map[string]string
	// returnURL is where Stripe sends the customer back: the console's Billing page
	// (PUBLIC_BASE_URL), which shows the plan the checkout or the portal changed.
	returnURL string
}

// ErrNoPrice says the interval has no configured price.
var ErrNoPrice = errors.New("no Stripe price configured for this interval")

// New returns the client, or nil when STRIPE_SECRET_KEY is not set.
func New(cfg *config.Config, log *slog.Logger) *Stripe {
	key := cfg.StripeSecretKey.Reveal()
	if key == "" {
		return nil
	}
	bc := &stripe.BackendConfig{LeveledLogger: leveled{log}, MaxNetworkRetries: stripe.Int64(2)}
	if cfg.StripeAPIBase != "" {
		bc.URL = stripe.String(cfg.StripeAPIBase)
	}
	backends := &stripe.Backends{
		API:     stripe.GetBackendWithConfig(stripe.APIBackend, bc),
		Connect: stripe.GetBackendWithConfig(stripe.ConnectBackend, bc),
		Uploads: stripe.GetBackendWithConfig(stripe.UploadsBackend, bc),
	}
	prices := map[string]string{}
	if cfg.StripePriceProMonthly != "" {
		prices["monthly"] = cfg.StripePriceProMonthly
	}
	if cfg.StripePriceProAnnual != "" {
		prices["annual"] = cfg.StripePriceProAnnual
	}
	return &Stripe{api: client.New(key, backends), prices: prices, returnURL: cfg.PublicBaseURL + "/console/billing"}
}

// Checkout is what a Pro checkout session is made of.
type Checkout struct {
	Tenant, Email, Interval string
	// Customer is the tenant's Stripe customer from an earlier checkout ("" = Stripe
	// creates one from Email).
	Customer string
}

// CheckoutURL creates a Checkout Session in subscription mode for the Pro price of the
// interval and returns its URL. client_reference_id and the subscription's metadata
// carry the tenant, so the webhook finds the tenant whatever the order of its events.
func (s *Stripe) CheckoutURL(ctx context.Context, c Checkout) (string, error) {
	price, ok := s.prices[c.Interval]
	if !ok {
		return "", ErrNoPrice
	}
	p := &stripe.CheckoutSessionParams{
		Mode:              stripe.String(string(stripe.CheckoutSessionModeSubscription)),
		ClientReferenceID: stripe.String(c.Tenant),
		LineItems:         []*stripe.CheckoutSessionLineItemParams{{Price: stripe.String(price), Quantity: stripe.Int64(1)}},
		SuccessURL:        stripe.String(s.returnURL + "?notice=checkout-paid"),
		CancelURL:         stripe.String(s.returnURL + "?notice=checkout-canceled"),
		SubscriptionData: &stripe.CheckoutSessionSubscriptionDataParams{
			Metadata: map[string]string{"tenant_id": c.Tenant},
		},
	}
	p.Context = ctx
	p.AddMetadata("tenant_id", c.Tenant)
	if c.Customer != "" {
		p.Customer = stripe.String(c.Customer)
	} else if c.Email != "" {
		p.CustomerEmail = stripe.String(c.Email)
	}
	sess, err := s.api.CheckoutSessions.New(p)
	if err != nil {
		return "", fmt.Errorf("stripe checkout session: %w", err)
	}
	return sess.URL, nil
}

// PortalURL creates a Billing Portal session for the customer (cancel, switch interval,
// update the card) and returns its URL.
func (s *Stripe) PortalURL(ctx context.Context, customer string) (string, error) {
	p := &stripe.BillingPortalSessionParams{Customer: stripe.String(customer), ReturnURL: stripe.String(s.returnURL)}
	p.Context = ctx
	sess, err := s.api.BillingPortalSessions.New(p)
	if err != nil {
		return "", fmt.Errorf("stripe billing portal session: %w", err)
	}
	return sess.URL, nil
}

// CancelSubscription cancels a subscription at once (DELETE /v1/subscriptions/{id}): the
// customer is not charged for it again. Nothing is prorated or invoiced: a refund, if one
// is owed, is the operator's call in Stripe's dashboard. A subscription Stripe no longer
// has as cancelable (already canceled: Stripe answers it is missing) is done.
func (s *Stripe) CancelSubscription(ctx context.Context, id string) error {
	p := &stripe.SubscriptionCancelParams{CancellationDetails: &stripe.SubscriptionCancelCancellationDetailsParams{
		Comment: stripe.String("Keyhouse: the tenant was deleted by the operator"),
	}}
	p.Context = ctx
	_, err := s.api.Subscriptions.Cancel(id, p)
	var se *stripe.Error
	if errors.As(err, &se) && (se.Code == stripe.ErrorCodeResourceMissing || se.HTTPStatusCode == http.StatusNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("stripe cancel subscription %s: %w", id, err)
	}
	return nil
}

// leveled sends stripe-go's own log lines to slog. stripe-go logs methods and paths,
// never the secret key.
type leveled struct{ log *slog.Logger }

func (l leveled) Debugf(format string, v ...any) {
	l.log.Debug(fmt.Sprintf(format, v...), "component", "stripe")
}
func (l leveled) Infof(format string, v ...any) {
	l.log.Debug(fmt.Sprintf(format, v...), "component", "stripe")
}
func (l leveled) Warnf(format string, v ...any) {
	l.log.Warn(fmt.Sprintf(format, v...), "component", "stripe")
}
func (l leveled) Errorf(format string, v ...any) {
	l.log.Error(fmt.Sprintf(format, v...), "component", "stripe")
}
