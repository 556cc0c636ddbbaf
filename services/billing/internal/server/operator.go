package server

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/paging"
	accountsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/accounts/v1"
	"github.com/keyhouse/keyhouse/services/billing/internal/payments"
	"github.com/keyhouse/keyhouse/services/billing/internal/store"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Operator implements OperatorService: the hosted operator's list, view, suspension and
// deletion of tenants (admin key; the interceptor checks it).
type Operator struct {
	accountsv1.UnimplementedOperatorServiceServer
	store       *store.Store
	usage       Usage
	multiTenant bool
	// stripe cancels a deleted tenant's subscriptions; nil: STRIPE_SECRET_KEY is not set.
	stripe *payments.Stripe
	log    *slog.Logger
	now    func() time.Time
}

// NewOperator returns the operator service; usage counts each tenant's active licenses,
// stripe (nil when not configured) cancels a deleted tenant's subscriptions.
func NewOperator(s *store.Store, usage Usage, multiTenant bool, stripe *payments.Stripe, log *slog.Logger) *Operator {
	return &Operator{store: s, usage: usage, multiTenant: multiTenant, stripe: stripe, log: log, now: time.Now}
}

var errTenantsHostedOnly = apierr.Invalid("Tenant management is only available for hosted deployments")

// ListTenants is GET /v1/operator/tenants.
func (o *Operator) ListTenants(ctx context.Context, req *accountsv1.ListTenantsRequest) (*accountsv1.ListTenantsResponse, error) {
	if !o.multiTenant {
		return nil, errTenantsHostedOnly
	}
	limit, _, err := paging.Parse(req.GetLimit(), "")
	if err != nil {
		return nil, err
	}
	tenants, more, err := o.store.ListTenants(ctx, strings.TrimSpace(req.GetEmail()), req.GetStartingAfter(), limit)
	if err != nil {
		return nil, err
	}
	described, err := o.describeAll(ctx, tenants)
	if err != nil {
		return nil, err
	}
	return &accountsv1.ListTenantsResponse{Tenants: described, HasMore: more}, nil
}

// describeConcurrency is how many tenants of a page are described at once: each costs a
// plan query and a call to licensing, which one after another made a page of 1,000 take
// most of a second.
const describeConcurrency = 8

// describeAll describes tenants in their order, describeConcurrency at a time; the first
// error fails the list (and stops the describes still to come).
func (o *Operator) describeAll(ctx context.Context, tenants []store.OperatorTenant) ([]*accountsv1.OperatorTenant, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	out := make([]*accountsv1.OperatorTenant, len(tenants))
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	turns := make(chan struct{}, describeConcurrency)
	for i, t := range tenants {
		turns <- struct{}{}
		wg.Go(func() {
			defer func() { <-turns }()
			m, err := o.describe(ctx, t)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && first == nil {
				first = err
				cancel()
			}
			out[i] = m
		})
	}
	wg.Wait()
	if first != nil {
		return nil, first
	}
	return out, nil
}

// GetTenant is GET /v1/operator/tenants/{id}.
func (o *Operator) GetTenant(ctx context.Context, req *accountsv1.GetTenantRequest) (*accountsv1.GetTenantResponse, error) {
	if !o.multiTenant {
		return nil, errTenantsHostedOnly
	}
	t, err := o.store.OperatorTenantByID(ctx, req.GetId())
	if err != nil {
		return nil, err
	}
	m, err := o.describe(ctx, t)
	return &accountsv1.GetTenantResponse{Tenant: m}, err
}

// SuspendTenant is POST /v1/operator/tenants/{id}/suspend.
func (o *Operator) SuspendTenant(ctx context.Context, req *accountsv1.SuspendTenantRequest) (*accountsv1.SuspendTenantResponse, error) {
	m, err := o.setSuspended(ctx, req.GetId(), true)
	return &accountsv1.SuspendTenantResponse{Tenant: m}, err
}

// ResumeTenant is POST /v1/operator/tenants/{id}/resume.
func (o *Operator) ResumeTenant(ctx context.Context, req *accountsv1.ResumeTenantRequest) (*accountsv1.ResumeTenantResponse, error) {
	m, err := o.setSuspended(ctx, req.GetId(), false)
	return &accountsv1.ResumeTenantResponse{Tenant: m}, err
}

func (o *Operator) setSuspended(ctx context.Context, id string, suspended bool) (*accountsv1.OperatorTenant, error) {
	if !o.multiTenant {
		return nil, errTenantsHostedOnly
	}
	t, err := o.store.SetSuspended(ctx, id, suspended)
	if err != nil {
		return nil, err
	}
	action := "resume"
	if suspended {
		action = "suspend"
	}
	logOperatorAction(ctx, o.log, action, id)
	return o.describe(ctx, t)
}

// logOperatorAction is the audit record of an operator's change to a tenant: one INFO
// line per create, suspend, resume and delete that went through, with what and which
// tenant (the line's time says when). It names no email and no credential.
func logOperatorAction(ctx context.Context, log *slog.Logger, action, tenant string) {
	log.InfoContext(ctx, "operator action", "action", action, "tenant_id", tenant)
}

// describe adds the plan in force and the active-license count to a tenant row.
func (o *Operator) describe(ctx context.Context, t store.OperatorTenant) (*accountsv1.OperatorTenant, error) {
	st, err := o.store.Plan(ctx, t.ID, o.now())
	if err != nil {
		return nil, err
	}
	used, err := o.usage.CountActive(ctx, t.ID)
	if err != nil {
		return nil, err
	}
	m := &accountsv1.OperatorTenant{
		TenantId: t.ID, Name: t.Name, Email: t.Email, Status: "active",
		SubscriptionStatus: st.Status, LicensesUsed: int32(used),
		CreatedAt: timestamppb.New(t.CreatedAt), SuspendedAt: optionalTime(t.SuspendedAt),
	}
	if t.SuspendedAt != nil {
		m.Status = "suspended"
	}
	if st.Plan != "" {
		m.Plan = wrapperspb.String(st.Plan)
	}
	return m, nil
}

// errCannotCancel: the tenant still pays for a subscription and this server cannot cancel
// it (no STRIPE_SECRET_KEY).
var errCannotCancel = apierr.Conflict("The tenant holds a live Stripe subscription and STRIPE_SECRET_KEY is not set: cancel it in Stripe first")

// DeleteTenant is DELETE /v1/operator/tenants/{id}. The tenant's live subscriptions are
// canceled in Stripe first, so its customer is never charged for an account that no
// longer exists; if Stripe refuses or does not answer, nothing is deleted (503, retry:
// what Stripe did cancel stays canceled, and canceling it again is harmless).
func (o *Operator) DeleteTenant(ctx context.Context, req *accountsv1.DeleteTenantRequest) (*accountsv1.DeleteTenantResponse, error) {
	if !o.multiTenant {
		return nil, errTenantsHostedOnly
	}
	if _, err := o.store.OperatorTenantByID(ctx, req.GetId()); err != nil {
		return nil, err
	}
	live, err := o.store.LiveSubscriptions(ctx, req.GetId())
	if err != nil {
		return nil, err
	}
	if len(live) > 0 && o.stripe == nil {
		return nil, errCannotCancel
	}
	for _, sub := range live {
		if err := o.stripe.CancelSubscription(ctx, sub); err != nil {
			o.log.ErrorContext(ctx, "tenant not deleted: stripe did not cancel its subscription", "subscription", sub, "error", err.Error())
			return nil, errStripe
		}
		o.log.InfoContext(ctx, "subscription canceled for the tenant's deletion", "subscription", sub)
	}
	if err := o.store.DeleteTenant(ctx, req.GetId(), live); err != nil {
		return nil, err
	}
	logOperatorAction(ctx, o.log, "delete", req.GetId())
	return &accountsv1.DeleteTenantResponse{TenantId: req.GetId(), Deleted: true}, nil
}
