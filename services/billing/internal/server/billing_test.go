package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/devinfra/testkit"
	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
	accountsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/accounts/v1"
	billingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/billing/v1"
	"github.com/keyhouse/keyhouse/services/billing/internal/store"
	"github.com/stripe/stripe-go/v76/webhook"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
)

const testSecret = "whsec_server_test"

type fixedUsage int

func (u fixedUsage) CountActive(context.Context, string) (int, error) { return int(u), nil }

// newBilling returns both services on one database: Billing without Stripe's API (nil
// payments: checkout answers 503) and with the webhook secret.
func newBilling(t *testing.T) (*Billing, *Server) {
	t.Helper()
	pool, err := pgxx.Open(context.Background(), testkit.DatabaseURL(t, schema), "billing")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	st := store.New(pool, nil)
	b := NewBilling(BillingConfig{MultiTenant: true, WebhookSecret: testSecret, Usage: fixedUsage(3),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}, st)
	return b, New(st, nil, true, slog.New(slog.DiscardHandler))
}

var evtSeq atomic.Int64

func signed(t *testing.T, typ string, at time.Time, object map[string]any) *billingv1.HandleStripeEventRequest {
	t.Helper()
	payload, err := json.Marshal(map[string]any{"id": fmt.Sprintf("evt_srv_%d", evtSeq.Add(1)), "object": "event",
		"type": typ, "created": at.Unix(), "data": map[string]any{"object": object}})
	if err != nil {
		t.Fatal(err)
	}
	sp := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: testSecret})
	return &billingv1.HandleStripeEventRequest{Payload: payload, Signature: sp.Header}
}

// The entitlements licensing reads follow the webhook's events at once: Pro 1,000, then
// past_due (issuance refused), then paid again, then ended (Free, may issue within 5).
func TestEntitlementsFollowTheBillingEvents(t *testing.T) {
	t.Parallel()
	b, s := newBilling(t)
	acct := createTenant(t, s)
	ctx := tenantCall(acct.GetTenantId(), acct.GetApiKey())
	ten := acct.GetTenantId()
	entitlements := func() string {
		t.Helper()
		e, err := s.GetEntitlements(ctx, &accountsv1.GetEntitlementsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("%s %d %t", e.GetPlan(), e.GetLicenseLimit(), e.GetSubscriptionActive())
	}
	deliver := func(req *billingv1.HandleStripeEventRequest) {
		t.Helper()
		if resp, err := b.HandleStripeEvent(context.Background(), req); err != nil || !resp.GetReceived() {
			t.Fatalf("%v %v", resp, err)
		}
	}
	t0 := time.Now().Add(-time.Hour)
	sub := func(status string) map[string]any {
		return map[string]any{"id": "sub_s", "customer": "cus_s", "status": status, "metadata": map[string]string{"tenant_id": ten}}
	}
	for _, step := range []struct {
		typ    string
		object map[string]any
		want   string
	}{
		{"checkout.session.completed", map[string]any{"mode": "subscription", "status": "complete", "payment_status": "paid",
			"client_reference_id": ten, "customer": "cus_s", "subscription": "sub_s"}, "pro 1000 true"},
		{"invoice.payment_failed", map[string]any{"customer": "cus_s", "subscription": "sub_s"}, "pro 1000 false"},
		{"customer.subscription.updated", sub("active"), "pro 1000 true"},
		{"customer.subscription.deleted", sub("canceled"), "free 5 false"},
	} {
		t0 = t0.Add(time.Second)
		deliver(signed(t, step.typ, t0, step.object))
		if got := entitlements(); got != step.want {
			t.Fatalf("after %s: %s, want %s", step.typ, got, step.want)
		}
	}
	status, err := b.GetBillingStatus(ctx, &billingv1.GetBillingStatusRequest{})
	if err != nil || status.GetStatus() != "canceled" || status.GetPlan().GetValue() != "free" ||
		status.GetLicensesUsed().GetValue() != 3 || status.GetLicenseLimit().GetValue() != 5 {
		t.Fatalf("status %v, %v", status, err)
	}
}

// The console's details carry GET /v1/billing/status's record unchanged and say why it is
// past_due: a failed payment, Stripe's unpaid, or Stripe's paused.
func TestBillingDetailsSayWhyASubscriptionIsPastDue(t *testing.T) {
	t.Parallel()
	b, s := newBilling(t)
	console := NewBillingConsole(b)
	acct := createTenant(t, s)
	ctx := tenantCall(acct.GetTenantId(), acct.GetApiKey())
	ten := acct.GetTenantId()
	t0 := time.Now().Add(-time.Hour)
	sub := func(status string) map[string]any {
		return map[string]any{"id": "sub_d", "customer": "cus_d", "status": status, "metadata": map[string]string{"tenant_id": ten}}
	}
	for i, step := range []struct {
		typ    string
		object map[string]any
		status string
		want   billingv1.PastDueReason
	}{
		{"checkout.session.completed", map[string]any{"mode": "subscription", "status": "complete", "payment_status": "no_payment_required",
			"client_reference_id": ten, "customer": "cus_d", "subscription": "sub_d"}, "active", billingv1.PastDueReason_PAST_DUE_REASON_UNSPECIFIED},
		{"customer.subscription.updated", sub("paused"), "past_due", billingv1.PastDueReason_PAST_DUE_REASON_PAUSED},
		{"customer.subscription.updated", sub("active"), "active", billingv1.PastDueReason_PAST_DUE_REASON_UNSPECIFIED},
		{"invoice.payment_failed", map[string]any{"customer": "cus_d", "subscription": "sub_d"}, "past_due", billingv1.PastDueReason_PAST_DUE_REASON_PAYMENT_FAILED},
		{"customer.subscription.updated", sub("past_due"), "past_due", billingv1.PastDueReason_PAST_DUE_REASON_PAYMENT_FAILED},
		{"customer.subscription.updated", sub("unpaid"), "past_due", billingv1.PastDueReason_PAST_DUE_REASON_UNPAID},
	} {
		if _, err := b.HandleStripeEvent(context.Background(), signed(t, step.typ, t0.Add(time.Duration(i)*time.Second), step.object)); err != nil {
			t.Fatal(err)
		}
		details, err := console.GetBillingDetails(ctx, &billingv1.GetBillingDetailsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		status, err := b.GetBillingStatus(ctx, &billingv1.GetBillingStatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(details.GetStatus(), status) || status.GetStatus() != step.status || details.GetPastDueReason() != step.want {
			t.Fatalf("step %d (%s): details %v, status %v; want %s, %s", i, step.typ, details, status, step.status, step.want)
		}
	}
}

func TestWebhookRefusesWhatStripeDidNotSign(t *testing.T) {
	t.Parallel()
	b, _ := newBilling(t)
	good := signed(t, "customer.subscription.updated", time.Now(), map[string]any{"id": "sub_x"})
	for name, req := range map[string]*billingv1.HandleStripeEventRequest{
		"missing":  {Payload: good.Payload},
		"garbage":  {Payload: good.Payload, Signature: "nonsense"},
		"tampered": {Payload: append([]byte(" "), good.Payload...), Signature: good.Signature},
		"stale": {Payload: good.Payload, Signature: webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{
			Payload: good.Payload, Secret: testSecret, Timestamp: time.Now().Add(-WebhookTolerance - time.Second)}).Header},
		"other secret": {Payload: good.Payload, Signature: webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{
			Payload: good.Payload, Secret: "whsec_other"}).Header},
	} {
		_, err := b.HandleStripeEvent(context.Background(), req)
		if !isErr(err, codes.InvalidArgument, "Invalid signature") {
			t.Errorf("%s: %v", name, err)
		}
	}
	unconfigured := NewBilling(BillingConfig{MultiTenant: true, Log: b.cfg.Log}, b.store)
	if _, err := unconfigured.HandleStripeEvent(context.Background(), good); !isErr(err, codes.Unavailable, errWebhookDisabled.Message) {
		t.Fatalf("no secret: %v", err)
	}
}

// A body Stripe's signature covers but billing cannot accept says what is wrong with it,
// never "Invalid signature" (which means a wrong secret) and never a 500 (a NUL in the
// customer used to reach Postgres: SQLSTATE 22021). A signature from the future is a bad
// signature.
func TestWebhookRefusesSignedEventsItCannotAccept(t *testing.T) {
	t.Parallel()
	b, _ := newBilling(t)
	sign := func(payload string, at time.Time) *billingv1.HandleStripeEventRequest {
		sp := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: []byte(payload), Secret: testSecret, Timestamp: at})
		return &billingv1.HandleStripeEventRequest{Payload: []byte(payload), Signature: sp.Header}
	}
	event := func(id, customer string, created int64, tenant ...string) string {
		obj := map[string]any{"id": "sub_bad", "customer": customer, "status": "active"}
		if len(tenant) > 0 {
			obj["metadata"] = map[string]string{"tenant_id": tenant[0]}
		}
		b, _ := json.Marshal(map[string]any{"id": id, "object": "event", "type": "customer.subscription.updated", "created": created,
			"data": map[string]any{"object": obj}})
		return string(b)
	}
	now := time.Now()
	for name, tc := range map[string]struct {
		req  *billingv1.HandleStripeEventRequest
		want string
	}{
		"not JSON":                  {sign("{not json", now), "Invalid payload: not a Stripe event"},
		"JSON, not an event":        {sign(`{"hello":"world"}`, now), "Invalid payload: not a Stripe event"},
		"invalid UTF-8":             {sign(strings.Replace(event("evt_utf8", "cus_1", now.Unix()), "cus_1", "cus_\xff\xfe", 1), now), "Invalid payload: not valid UTF-8"},
		"NUL in the tenant id":      {sign(event("evt_nul", "cus_1", now.Unix(), "ten_\x00"), now), "Invalid payload: the tenant id (client_reference_id or metadata.tenant_id) must be at most 255 printable ASCII characters without spaces"},
		"customer over 255":         {sign(event("evt_long", "cus_"+strings.Repeat("a", 300), now.Unix()), now), "Invalid payload: data.object.customer must be at most 255 printable ASCII characters without spaces"},
		"empty event id":            {sign(event("", "cus_1", now.Unix()), now), "Invalid payload: id is required"},
		"created in the future":     {sign(event("evt_future", "cus_1", now.Add(time.Hour).Unix()), now), "Invalid payload: created is in the future"},
		"signature from the future": {sign(event("evt_sigfuture", "cus_1", now.Unix()), now.Add(time.Hour)), "Invalid signature"},
	} {
		_, err := b.HandleStripeEvent(context.Background(), tc.req)
		if !isErr(err, codes.InvalidArgument, tc.want) {
			t.Errorf("%s: %v, want 400 %q", name, err, tc.want)
		}
	}
}

func isErr(err error, code codes.Code, msg string) bool {
	return err != nil && err.Error() == msg && apierr.Is(err, code)
}

func TestCheckoutValidatesBeforeNeedingStripe(t *testing.T) {
	t.Parallel()
	b, s := newBilling(t)
	acct := createTenant(t, s)
	ctx := tenantCall(acct.GetTenantId(), acct.GetApiKey())
	for _, tc := range []struct {
		plan, interval string
		code           codes.Code
		msg            string
	}{
		{"", "", codes.InvalidArgument, "plan must be free or pro"},
		{"Pro", "", codes.InvalidArgument, "plan must be free or pro"},
		{"pro", "yearly", codes.InvalidArgument, "interval must be monthly or annual"},
		{"pro", "", codes.Unavailable, errNotConfigured.Message},
		{"free", "annual", codes.Unavailable, errNotConfigured.Message},
	} {
		_, err := b.CreateCheckout(ctx, &billingv1.CreateCheckoutRequest{Plan: tc.plan, Interval: tc.interval})
		if !isErr(err, tc.code, tc.msg) {
			t.Errorf("%q/%q: %v, want %v %q", tc.plan, tc.interval, err, tc.code, tc.msg)
		}
	}
	self := NewBilling(BillingConfig{Log: b.cfg.Log}, b.store)
	if _, err := self.CreateCheckout(ctx, &billingv1.CreateCheckoutRequest{Plan: "pro"}); !isErr(err, codes.InvalidArgument, errHostedOnly.Message) {
		t.Fatalf("self-hosted: %v", err)
	}
	st, err := self.GetBillingStatus(ctx, &billingv1.GetBillingStatusRequest{})
	if err != nil || st != selfHostedStatus {
		t.Fatalf("self-hosted status %v %v", st, err)
	}
}

// Without STRIPE_SECRET_KEY, a tenant that still pays for a subscription is not deleted:
// nothing could cancel it, and its customer would go on being charged. Once Stripe's
// deletion of the subscription has arrived, the tenant is deleted.
func TestDeletingAPayingTenantWithoutStripeIsRefused(t *testing.T) {
	b, srv := newBilling(t)
	ctx := context.Background()
	created, err := srv.CreateTenant(ctx, &accountsv1.CreateTenantRequest{Name: "Paying", Email: "paying@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	ten := created.GetTenantId()
	now := time.Now().Truncate(time.Second)
	if _, err := b.HandleStripeEvent(ctx, signed(t, "checkout.session.completed", now, map[string]any{"mode": "subscription",
		"status": "complete", "payment_status": "paid", "client_reference_id": ten, "customer": "cus_op", "subscription": "sub_op"})); err != nil {
		t.Fatal(err)
	}
	op := NewOperator(b.store, fixedUsage(0), true, nil, b.cfg.Log)
	_, err = op.DeleteTenant(ctx, &accountsv1.DeleteTenantRequest{Id: ten})
	if !isErr(err, codes.AlreadyExists, errCannotCancel.Message) {
		t.Fatalf("delete of a paying tenant without Stripe: %v", err)
	}
	if _, err := op.GetTenant(ctx, &accountsv1.GetTenantRequest{Id: ten}); err != nil {
		t.Fatalf("the refused deletion deleted the tenant: %v", err)
	}
	if _, err := b.HandleStripeEvent(ctx, signed(t, "customer.subscription.deleted", now.Add(time.Second), map[string]any{
		"id": "sub_op", "customer": "cus_op", "status": "canceled", "metadata": map[string]string{"tenant_id": ten}})); err != nil {
		t.Fatal(err)
	}
	if _, err := op.DeleteTenant(ctx, &accountsv1.DeleteTenantRequest{Id: ten}); err != nil {
		t.Fatalf("a tenant whose subscription ended: %v", err)
	}
}
