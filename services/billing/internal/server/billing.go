package server

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"time"
	"unicode/utf8"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/auth"
	"github.com/keyhouse/keyhouse/pkg/events"
	"github.com/keyhouse/keyhouse/pkg/input"
	"github.com/keyhouse/keyhouse/pkg/stripeinput"
	billingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/billing/v1"
	"github.com/keyhouse/keyhouse/services/billing/internal/payments"
	"github.com/keyhouse/keyhouse/services/billing/internal/plan"
	"github.com/keyhouse/keyhouse/services/billing/internal/store"
	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/webhook"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// WebhookTolerance is how old a Stripe-Signature timestamp may be (addendum §3).
const WebhookTolerance = 300 * time.Second

// Usage counts a tenant's active licenses, the number the quota is enforced against
// (the licensing service).
type Usage interface {
	CountActive(ctx context.Context, tenant string) (int, error)
}

// BillingConfig is what the billing handlers need besides the store.
type BillingConfig struct {
	MultiTenant bool
	// Stripe is nil when STRIPE_SECRET_KEY is not set: checkout answers 503.
	Stripe *payments.Stripe
	// WebhookSecret is STRIPE_WEBHOOK_SECRET; empty: the webhook answers 503.
	WebhookSecret string
	Usage         Usage
	Log           *slog.Logger
}

// Billing implements BillingService.
type Billing struct {
	billingv1.UnimplementedBillingServiceServer
	cfg   BillingConfig
	store *store.Store
	now   func() time.Time
}

// NewBilling returns the billing handlers.
func NewBilling(cfg BillingConfig, st *store.Store) *Billing {
	return &Billing{cfg: cfg, store: st, now: time.Now}
}

// Messages of this service.
var (
	errHostedOnly      = apierr.Invalid("Billing is only available for hosted deployments")
	errNotConfigured   = apierr.Unavailable("Billing is not configured on this server (STRIPE_SECRET_KEY)")
	errWebhookDisabled = apierr.Unavailable("Billing webhooks are not configured on this server (STRIPE_WEBHOOK_SECRET)")
	errStripe          = apierr.Unavailable("Payment provider unavailable, retry")
	errBadSignature    = apierr.Invalid("Invalid signature")
	errAlreadyFree     = apierr.Invalid("plan free: the account holds no paid subscription to cancel")
)

// invalidPayload is the answer to a signed event refused by pkg/stripeinput's rules.
func invalidPayload(err error) error {
	var refused *stripeinput.Error
	if errors.As(err, &refused) {
		return apierr.Invalid("Invalid payload: %s", refused.Reason)
	}
	return err
}

// selfHostedStatus is addendum §3's fixed answer on a self-hosted server.
var selfHostedStatus = &billingv1.GetBillingStatusResponse{Status: plan.Active}

// GetBillingStatus is GET /v1/billing/status.
func (b *Billing) GetBillingStatus(ctx context.Context, _ *billingv1.GetBillingStatusRequest) (*billingv1.GetBillingStatusResponse, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	resp, _, err := b.status(ctx, tenant)
	return resp, err
}

// status is the tenant's billing status record and the plan in force now it was made of.
func (b *Billing) status(ctx context.Context, tenant string) (*billingv1.GetBillingStatusResponse, plan.State, error) {
	if !b.cfg.MultiTenant {
		return selfHostedStatus, plan.State{}, nil
	}
	st, err := b.plan(ctx, tenant)
	if err != nil {
		return nil, plan.State{}, err
	}
	used, err := b.cfg.Usage.CountActive(ctx, tenant)
	if err != nil {
		return nil, plan.State{}, err
	}
	resp := &billingv1.GetBillingStatusResponse{
		Status:            st.Status,
		CancelAtPeriodEnd: st.CancelAtPeriodEnd,
		LicensesUsed:      wrapperspb.Int32(int32(used)),
		LicenseLimit:      wrapperspb.Int32(int32(st.LicenseLimit())),
	}
	if st.Plan != "" {
		resp.Plan = wrapperspb.String(st.Plan)
	}
	if end := st.ShownPeriodEnd(); end != nil {
		resp.CurrentPeriodEnd = timestamppb.New(*end)
	}
	return resp, st, nil
}

// pastDueReasons are plan's reasons as BillingConsoleService answers them.
var pastDueReasons = map[string]billingv1.PastDueReason{
	plan.ReasonPaymentFailed: billingv1.PastDueReason_PAST_DUE_REASON_PAYMENT_FAILED,
	plan.ReasonUnpaid:        billingv1.PastDueReason_PAST_DUE_REASON_UNPAID,
	plan.ReasonPaused:        billingv1.PastDueReason_PAST_DUE_REASON_PAUSED,
}

// BillingConsole implements BillingConsoleService: what the console's Billing page needs
// beyond api.md's status record.
type BillingConsole struct {
	billingv1.UnimplementedBillingConsoleServiceServer
	billing *Billing
}

// NewBillingConsole returns the console's billing service, answering from b.
func NewBillingConsole(b *Billing) *BillingConsole { return &BillingConsole{billing: b} }

// GetBillingDetails is the status record of GET /v1/billing/status and, when it says
// past_due, why.
func (c *BillingConsole) GetBillingDetails(ctx context.Context, _ *billingv1.GetBillingDetailsRequest) (*billingv1.GetBillingDetailsResponse, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	resp, st, err := c.billing.status(ctx, tenant)
	if err != nil {
		return nil, err
	}
	out := &billingv1.GetBillingDetailsResponse{Status: resp}
	if st.Status == plan.PastDue {
		out.PastDueReason = pastDueReasons[st.Reason]
	}
	return out, nil
}

// plan is the tenant's plan in force now.
func (b *Billing) plan(ctx context.Context, tenant string) (plan.State, error) {
	return b.store.Plan(ctx, tenant, b.now())
}

// CreateCheckout is POST /v1/billing/checkout. It only creates a Stripe session; the plan
// changes when Stripe's events arrive.
func (b *Billing) CreateCheckout(ctx context.Context, req *billingv1.CreateCheckoutRequest) (*billingv1.CreateCheckoutResponse, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	if !b.cfg.MultiTenant {
		return nil, errHostedOnly
	}
	want := req.GetPlan()
	if want != plan.Free && want != plan.Pro {
		return nil, input.NotOneOf("plan", plan.Free, plan.Pro)
	}
	interval := req.GetInterval()
	if interval == "" {
		interval = "monthly"
	}
	if interval != "monthly" && interval != "annual" {
		return nil, input.NotOneOf("interval", "monthly", "annual")
	}
	if b.cfg.Stripe == nil {
		return nil, errNotConfigured
	}
	st, err := b.plan(ctx, tenant)
	if err != nil {
		return nil, err
	}
	customer, err := b.store.Customer(ctx, tenant)
	if err != nil {
		return nil, err
	}
	var url string
	switch {
	case st.Paid() && customer != "":
		// Cancelling (plan free), switching interval or fixing a failed card happen on
		// the subscription-management page; a second subscription is never sold.
		url, err = b.cfg.Stripe.PortalURL(ctx, customer)
	case want == plan.Free:
		return nil, errAlreadyFree
	default:
		email, eerr := b.store.TenantEmail(ctx, tenant)
		if eerr != nil {
			return nil, eerr
		}
		url, err = b.cfg.Stripe.CheckoutURL(ctx, payments.Checkout{Tenant: tenant, Email: email, Customer: customer, Interval: interval})
	}
	if errors.Is(err, payments.ErrNoPrice) {
		b.cfg.Log.ErrorContext(ctx, "checkout refused: no Stripe price for the interval", "interval", interval)
		return nil, apierr.Unavailable("Billing is not configured for the %s interval", interval)
	}
	if err != nil {
		b.cfg.Log.ErrorContext(ctx, "stripe call failed", "error", err.Error())
		return nil, errStripe
	}
	return &billingv1.CreateCheckoutResponse{Url: url}, nil
}

// HandleStripeEvent is POST /v1/webhooks/billing: Stripe's billing events, verified
// against STRIPE_WEBHOOK_SECRET, applied once per event id.
func (b *Billing) HandleStripeEvent(ctx context.Context, req *billingv1.HandleStripeEventRequest) (*billingv1.HandleStripeEventResponse, error) {
	if b.cfg.WebhookSecret == "" {
		return nil, errWebhookDisabled
	}
	// The signature first, and only the signature answers "Invalid signature" (the
	// runbook reads it as a wrong STRIPE_WEBHOOK_SECRET); a signed body that is not an
	// acceptable event says what is wrong with it.
	payload, now := req.GetPayload(), b.now()
	if webhook.ValidatePayloadWithTolerance(payload, req.GetSignature(), b.cfg.WebhookSecret, WebhookTolerance) != nil ||
		stripeinput.FutureDated(req.GetSignature(), now) {
		return nil, errBadSignature
	}
	var e stripe.Event
	if utf8.Valid(payload) && (json.Unmarshal(payload, &e) != nil || e.Type == "") {
		return nil, apierr.Invalid("Invalid payload: not a Stripe event")
	}
	if err := stripeinput.CheckEnvelope(payload, e.ID, e.Created, now); err != nil {
		return nil, invalidPayload(err)
	}
	c, err := plan.Read(e)
	if err != nil {
		b.cfg.Log.WarnContext(ctx, "billing event unreadable", "event_id", e.ID, "type", string(e.Type), "error", err.Error())
		return nil, apierr.Invalid("Event %s could not be read", e.ID)
	}
	if !plan.Handled(c.Type) {
		return &billingv1.HandleStripeEventResponse{Received: true}, nil
	}
	if err := c.Check(); err != nil {
		return nil, invalidPayload(err)
	}
	// A plan moved by Stripe's event is the system's doing, not the caller's.
	out, err := b.store.Record(events.WithActor(ctx, events.ActorSystem), req.GetPayload(), c, now)
	if err != nil {
		return nil, err
	}
	b.cfg.Log.InfoContext(ctx, "billing event", "event_id", c.EventID, "type", string(c.Type),
		"subscription", c.Subscription, "outcome", string(out))
	return &billingv1.HandleStripeEventResponse{Received: true}, nil
}
