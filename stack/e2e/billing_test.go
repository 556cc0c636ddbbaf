package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/keyhouse/keyhouse/devinfra/testkit"
	"github.com/keyhouse/keyhouse/stack"
	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/webhook"
)

// Hosted billing end to end: Stripe's API is stripe-mock (behind a recorder, so a test
// can see what billing sent), Stripe's events are JSON signed with stripe-go's own test
// helper and the stack's real STRIPE_WEBHOOK_SECRET, sent to POST /v1/webhooks/billing.

const selfHostedBilling = `{"status":"active","plan":null,"cancelAtPeriodEnd":false,"currentPeriodEnd":null,"licensesUsed":null,"licenseLimit":null}`

// stripeCall is one request billing made to the Stripe API.
type stripeCall struct {
	Method, Path string
	Form         url.Values
}

// stripeRecorder proxies to stripe-mock and keeps every request.
type stripeRecorderT struct {
	srv   *httptest.Server
	mu    sync.Mutex
	calls []stripeCall
	// failing answers a path with Stripe's error instead of stripe-mock (stripeFailing).
	failing map[string]stripeFailure
}

// stripeFailure is an error answer of Stripe's API.
type stripeFailure struct {
	status    int
	typ, code string
}

var (
	recorderOnce sync.Once
	recorder     *stripeRecorderT
)

// stripeAPI is the STRIPE_API_BASE of the hosted stacks.
func stripeAPI(t testing.TB) string {
	mock := testkit.StripeMockURL(t)
	recorderOnce.Do(func() {
		target, _ := url.Parse(mock)
		proxy := httputil.NewSingleHostReverseProxy(target)
		recorder = &stripeRecorderT{}
		recorder.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			form, _ := url.ParseQuery(string(body))
			recorder.mu.Lock()
			recorder.calls = append(recorder.calls, stripeCall{Method: r.Method, Path: r.URL.Path, Form: form})
			f, fail := recorder.failing[r.URL.Path]
			recorder.mu.Unlock()
			if fail {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(f.status)
				_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"type": f.typ, "code": f.code, "message": "forced by the e2e test"}})
				return
			}
			r.Body = io.NopCloser(strings.NewReader(string(body)))
			proxy.ServeHTTP(w, r)
		}))
		testkit.AtExit(recorder.srv.Close)
	})
	return recorder.srv.URL
}

// stripeFailing makes Stripe's API answer f for path (every method) until undone, or
// until the test ends.
func stripeFailing(t testing.TB, path string, f stripeFailure) (undo func()) {
	recorder.mu.Lock()
	defer recorder.mu.Unlock()
	if recorder.failing == nil {
		recorder.failing = map[string]stripeFailure{}
	}
	recorder.failing[path] = f
	undo = func() {
		recorder.mu.Lock()
		defer recorder.mu.Unlock()
		delete(recorder.failing, path)
	}
	t.Cleanup(undo)
	return undo
}

// stripeCallsTo returns the calls of method to path.
func stripeCallsTo(method, path string) []stripeCall {
	recorder.mu.Lock()
	defer recorder.mu.Unlock()
	var out []stripeCall
	for _, c := range recorder.calls {
		if c.Method == method && c.Path == path {
			out = append(out, c)
		}
	}
	return out
}

// stripeCalls returns the calls to path whose form field has value.
func stripeCalls(path, field, value string) []stripeCall {
	recorder.mu.Lock()
	defer recorder.mu.Unlock()
	var out []stripeCall
	for _, c := range recorder.calls {
		if c.Path == path && c.Form.Get(field) == value {
			out = append(out, c)
		}
	}
	return out
}

// hostedTenant provisions a tenant and returns its client and tenant id.
func hostedTenant(t testing.TB, s *stack.Stack) (*Client, string) {
	t.Helper()
	n := dbCounter.Add(1)
	resp := admin(t, s).Post("/v1/operator/tenants", map[string]string{"name": fmt.Sprintf("Billing %d", n), "email": fmt.Sprintf("billing%d@example.com", n)}).Expect(t, 200)
	m := resp.JSON(t)
	return newClient(t, s.URL, m["api_key"].(string)), m["tenant_id"].(string)
}

var eventSeq atomic.Int64

// stripeEvent is a Stripe event of the stack's API version around object.
func stripeEvent(typ string, created time.Time, object map[string]any) []byte {
	b, err := json.Marshal(map[string]any{
		"id": fmt.Sprintf("evt_e2e_%d_%d", time.Now().UnixNano(), eventSeq.Add(1)), "object": "event",
		"api_version": stripe.APIVersion, "created": created.Unix(), "livemode": false,
		"pending_webhooks": 1, "type": typ, "data": map[string]any{"object": object},
	})
	if err != nil {
		panic(err)
	}
	return b
}

// sendEvent signs payload with the webhook secret and posts it.
func sendEvent(t testing.TB, s *stack.Stack, payload []byte) *Response {
	t.Helper()
	signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: testWebhookSecret, Timestamp: time.Now()})
	return anon(t, s).Do(http.MethodPost, "/v1/webhooks/billing", payload, "Stripe-Signature", signed.Header)
}

// deliver sends an event and expects Stripe's success answer.
func deliver(t testing.TB, s *stack.Stack, payload []byte) {
	t.Helper()
	sendEvent(t, s, payload).ExpectBody(t, `{"received":true}`)
}

// A customer's subscription, as the tests name its parts.
type sub struct {
	tenant, customer, id string
}

func newSub(tenant string) sub {
	n := eventSeq.Add(1)
	return sub{tenant: tenant, customer: fmt.Sprintf("cus_e2e_%d", n), id: fmt.Sprintf("sub_e2e_%d", n)}
}

func (s sub) checkoutCompleted(at time.Time) []byte {
	return s.checkout(at, "paid")
}

// checkout is checkout.session.completed with Stripe's payment_status (paid, unpaid: a
// payment still processing; no_payment_required: a trial).
func (s sub) checkout(at time.Time, payment string) []byte {
	return stripeEvent("checkout.session.completed", at, map[string]any{
		"id": "cs_" + s.id, "object": "checkout.session", "mode": "subscription", "status": "complete",
		"payment_status": payment, "client_reference_id": s.tenant, "customer": s.customer, "subscription": s.id,
	})
}

// object is the subscription object; fields override the defaults (active, renewing).
func (s sub) object(periodEnd time.Time, fields ...any) map[string]any {
	o := map[string]any{
		"id": s.id, "object": "subscription", "customer": s.customer, "status": "active",
		"cancel_at_period_end": false, "current_period_end": periodEnd.Unix(),
		"metadata": map[string]string{"tenant_id": s.tenant},
	}
	for i := 0; i+1 < len(fields); i += 2 {
		o[fields[i].(string)] = fields[i+1]
	}
	return o
}

func (s sub) event(typ string, at, periodEnd time.Time, fields ...any) []byte {
	return stripeEvent("customer.subscription."+typ, at, s.object(periodEnd, fields...))
}

func (s sub) paymentFailed(at time.Time) []byte {
	return stripeEvent("invoice.payment_failed", at, map[string]any{
		"id": "in_" + s.id + fmt.Sprint(at.Unix()), "object": "invoice", "customer": s.customer, "subscription": s.id,
	})
}

// firstPaymentFailed is the failure of the subscription's first invoice (billing_reason
// subscription_create): the subscription stays incomplete.
func (s sub) firstPaymentFailed(at time.Time) []byte {
	return stripeEvent("invoice.payment_failed", at, map[string]any{
		"id": "in_" + s.id + "_first", "object": "invoice", "customer": s.customer, "subscription": s.id,
		"billing_reason": "subscription_create",
	})
}

// neverPaid is the life of a subscription whose first payment never succeeded, as Stripe
// sends it: Checkout completed with the payment still processing, the subscription created
// incomplete, its first invoice failed, then Stripe's expiry 23 hours later (the update,
// then the deletion).
func (s sub) neverPaid(t0 time.Time) [][]byte {
	period := t0.Add(30 * 24 * time.Hour)
	expired := t0.Add(23 * time.Hour)
	return [][]byte{
		s.checkout(t0, "unpaid"),
		s.event("created", t0, period, "status", "incomplete"),
		s.firstPaymentFailed(t0.Add(time.Second)),
		s.event("updated", expired, period, "status", "incomplete_expired"),
		s.event("deleted", expired, period, "status", "incomplete_expired"),
	}
}

// billingStatus returns the status body.
func billingStatus(t testing.TB, c *Client) string {
	t.Helper()
	return string(c.Get("/v1/billing/status").Expect(t, 200).Body)
}

func statusBody(status, plan string, cancel bool, periodEnd *time.Time, used, limit int) string {
	p, end := "null", "null"
	if plan != "" {
		p = `"` + plan + `"`
	}
	if periodEnd != nil {
		end = `"` + periodEnd.UTC().Format(time.RFC3339) + `"`
	}
	return fmt.Sprintf(`{"status":"%s","plan":%s,"cancelAtPeriodEnd":%t,"currentPeriodEnd":%s,"licensesUsed":%d,"licenseLimit":%d}`,
		status, p, cancel, end, used, limit)
}

// upgrade makes the tenant Pro the way Stripe does after a paid checkout.
func upgrade(t testing.TB, s *stack.Stack, tenant string) sub {
	t.Helper()
	su := newSub(tenant)
	now := time.Now()
	deliver(t, s, su.checkoutCompleted(now))
	deliver(t, s, su.event("created", now, now.Add(30*24*time.Hour)))
	return su
}

func TestBillingStatusSelfHostedIsTheFixedDefault(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a := admin(t, s)
	a.Get("/v1/billing/status").ExpectBody(t, selfHostedBilling)
	a.Post("/v1/billing/checkout", map[string]string{"plan": "pro"}).
		ExpectError(t, 400, "Billing is only available for hosted deployments")
	anon(t, s).Get("/v1/billing/status").ExpectError(t, 403, "Unauthorized")
}

func TestBillingStatusOfANewTenantIsFreeAndCountsActiveLicenses(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	c, _ := hostedTenant(t, s)
	c.Get("/v1/billing/status").ExpectBody(t, statusBody("active", "", false, nil, 0, 5))
	p := product("billing-used")
	k1 := issueLicense(t, c, lic(p))
	issueLicense(t, c, lic(p))
	issueLicense(t, c, lic(p, "expires_at", "2020-01-01T00:00:00Z")) // expired: holds no quota
	if got, want := billingStatus(t, c), statusBody("active", "", false, nil, 2, 5); got != want {
		t.Fatalf("status %s, want %s", got, want)
	}
	c.Post("/v1/revoke-license", map[string]any{"key": k1, "revoked": true}).Expect(t, 200)
	c.Get("/v1/billing/status").ExpectBody(t, statusBody("active", "", false, nil, 1, 5))
	admin(t, s).Get("/v1/billing/status").ExpectError(t, 403, "Unauthorized")
}

func TestBillingCheckoutCreatesAStripeSessionAndChangesNothing(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	c, tenant := hostedTenant(t, s)
	before := billingStatus(t, c)

	url := c.Post("/v1/billing/checkout", map[string]string{"plan": "pro"}).Expect(t, 200).JSON(t)["url"].(string)
	if !strings.HasPrefix(url, "https://checkout.stripe.com/") {
		t.Fatalf("checkout url %q", url)
	}
	c.Post("/v1/billing/checkout", map[string]string{"plan": "pro", "interval": "annual"}).Expect(t, 200)
	calls := stripeCalls("/v1/checkout/sessions", "client_reference_id", tenant)
	if len(calls) != 2 {
		t.Fatalf("%d checkout sessions for the tenant, want 2", len(calls))
	}
	// Stripe sends the person back to the console's Billing page, which says what happened.
	billingPage := s.Env("PUBLIC_BASE_URL") + "/console/billing"
	for i, want := range []string{testPriceMonthly, testPriceAnnual} {
		f := calls[i].Form
		if f.Get("mode") != "subscription" || f.Get("line_items[0][price]") != want || f.Get("subscription_data[metadata][tenant_id]") != tenant ||
			f.Get("success_url") != billingPage+"?notice=checkout-paid" || f.Get("cancel_url") != billingPage+"?notice=checkout-canceled" {
			t.Fatalf("checkout session %d sent %v", i, f)
		}
	}
	if got := billingStatus(t, c); got != before {
		t.Fatalf("checkout changed the status: %s, was %s", got, before)
	}

	// Validation names the field; free without a paid subscription has nothing to manage.
	c.Post("/v1/billing/checkout", map[string]string{}).ExpectError(t, 400, "plan must be free or pro")
	c.Post("/v1/billing/checkout", map[string]string{"plan": "enterprise"}).ExpectError(t, 400, "plan must be free or pro")
	c.Post("/v1/billing/checkout", map[string]string{"plan": "pro", "interval": "weekly"}).ExpectError(t, 400, "interval must be monthly or annual")
	c.Post("/v1/billing/checkout", map[string]string{"plan": "free"}).
		ExpectError(t, 400, "plan free: the account holds no paid subscription to cancel")

	// Subscribed: free (and pro again) answer the subscription-management page of the
	// customer recorded at checkout, never a second subscription.
	su := upgrade(t, s, tenant)
	portal := c.Post("/v1/billing/checkout", map[string]string{"plan": "free"}).Expect(t, 200).JSON(t)["url"].(string)
	if portal == "" || strings.HasPrefix(portal, "https://checkout.stripe.com/") {
		t.Fatalf("portal url %q", portal)
	}
	c.Post("/v1/billing/checkout", map[string]string{"plan": "pro"}).Expect(t, 200)
	portals := stripeCalls("/v1/billing_portal/sessions", "customer", su.customer)
	if len(portals) != 2 || portals[0].Form.Get("return_url") != billingPage {
		t.Fatalf("portal sessions for the customer: %+v, want 2 returning to %s", portals, billingPage)
	}
	if n := len(stripeCalls("/v1/checkout/sessions", "client_reference_id", tenant)); n != 2 {
		t.Fatalf("%d checkout sessions after subscribing, want still 2", n)
	}
}

func TestBillingWebhookRefusesBadMissingAndStaleSignatures(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	c, tenant := hostedTenant(t, s)
	payload := newSub(tenant).checkoutCompleted(time.Now())
	post := func(body []byte, headers ...string) *Response {
		return anon(t, s).Do(http.MethodPost, "/v1/webhooks/billing", body, headers...)
	}
	sign := func(body []byte, secret string, at time.Time) string {
		return webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: secret, Timestamp: at}).Header
	}
	post(payload).ExpectError(t, 400, "Invalid signature")
	post(payload, "Stripe-Signature", sign(payload, "whsec_someone_else", time.Now())).ExpectError(t, 400, "Invalid signature")
	post(payload, "Stripe-Signature", sign(payload, testWebhookSecret, time.Now().Add(-301*time.Second))).ExpectError(t, 400, "Invalid signature")
	post(payload, "Stripe-Signature", "t=1,v1=00").ExpectError(t, 400, "Invalid signature")
	tampered := []byte(strings.Replace(string(payload), `"paid"`, `"unpaid"`, 1))
	post(tampered, "Stripe-Signature", sign(payload, testWebhookSecret, time.Now())).ExpectError(t, 400, "Invalid signature")
	c.Get("/v1/billing/status").ExpectBody(t, statusBody("active", "", false, nil, 0, 5))

	// Within the tolerance it is accepted; an event type billing does not handle too.
	post(payload, "Stripe-Signature", sign(payload, testWebhookSecret, time.Now().Add(-200*time.Second))).ExpectBody(t, `{"received":true}`)
	deliver(t, s, stripeEvent("customer.created", time.Now(), map[string]any{"id": "cus_x", "object": "customer"}))
	c.Get("/v1/billing/status").ExpectBody(t, statusBody("active", "pro", false, nil, 0, 1000))
}

// Every event of addendum §3 moves the state; past_due blocks writes and not reads.
func TestBillingWebhookEventsMoveThePlan(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	c, tenant := hostedTenant(t, s)
	su := newSub(tenant)
	t0 := time.Now().Add(-time.Hour).Truncate(time.Second)
	period := t0.Add(30 * 24 * time.Hour)
	p := product("billing-life")
	key := issueLicense(t, c, lic(p, "limits", map[string]any{"users": 100}))
	revoked := issueLicense(t, c, lic(p))
	c.Post("/v1/revoke-license", map[string]any{"key": revoked, "revoked": true}).Expect(t, 200)
	registerRelease(t, c, rel(p, "1.0.0"))
	tok := seat(t, anon(t, s), key, "laptop")

	deliver(t, s, su.checkoutCompleted(t0))
	c.Get("/v1/billing/status").ExpectBody(t, statusBody("active", "pro", false, nil, 1, 1000))
	deliver(t, s, su.event("created", t0.Add(time.Second), period))
	c.Get("/v1/billing/status").ExpectBody(t, statusBody("active", "pro", false, nil, 1, 1000))

	// Canceled at period end: still Pro, the period end shown.
	deliver(t, s, su.event("updated", t0.Add(2*time.Second), period, "cancel_at_period_end", true))
	c.Get("/v1/billing/status").ExpectBody(t, statusBody("active", "pro", true, &period, 1, 1000))
	deliver(t, s, su.event("updated", t0.Add(3*time.Second), period))
	c.Get("/v1/billing/status").ExpectBody(t, statusBody("active", "pro", false, nil, 1, 1000))

	// A failed payment: past_due. Writes refused, reads keep working.
	failed := su.paymentFailed(t0.Add(4 * time.Second))
	deliver(t, s, failed)
	c.Get("/v1/billing/status").ExpectBody(t, statusBody("past_due", "pro", false, nil, 1, 1000))
	c.Post("/v1/issue-license", lic(p)).ExpectError(t, 403, "Subscription is not active")
	c.Post("/v1/register-release", rel(p, "1.1.0")).ExpectError(t, 403, "Subscription is not active")
	c.Post("/v1/revoke-license", map[string]any{"key": revoked, "revoked": false}).ExpectError(t, 403, "Subscription is not active")
	pub := anon(t, s)
	if pub.Post("/v1/verify-license", map[string]string{"key": key}).Expect(t, 200).JSON(t)["valid"] != true {
		t.Fatal("verify-license failed while past_due")
	}
	pub.Post("/v1/validate-license", map[string]string{"key": key, "instance_id": "laptop"}).ExpectBody(t, `{"valid":true}`)
	trackUsage(pub, key, tok, "users").Expect(t, 200)
	if v := update(t, pub, check(key, p, "0.9.0")); v != "1.0.0" {
		t.Fatalf("check-update offered %q while past_due", v)
	}
	// Replaying the failure changes nothing; paying (Stripe's update to active) restores.
	deliver(t, s, failed)
	deliver(t, s, su.event("updated", t0.Add(5*time.Second), period))
	c.Get("/v1/billing/status").ExpectBody(t, statusBody("active", "pro", false, nil, 1, 1000))
	issueLicense(t, c, lic(p))

	// Deleted: canceled, on Free's limits and "not active" (addendum §7): writes refused
	// as for past_due, reads keep working.
	deliver(t, s, su.event("deleted", t0.Add(6*time.Second), period, "status", "canceled"))
	c.Get("/v1/billing/status").ExpectBody(t, statusBody("canceled", "free", false, nil, 2, 5))
	c.Post("/v1/issue-license", lic(p)).ExpectError(t, 403, "Subscription is not active")
	c.Post("/v1/register-release", rel(p, "1.1.0")).ExpectError(t, 403, "Subscription is not active")
	c.Post("/v1/revoke-license", map[string]any{"key": revoked, "revoked": false}).ExpectError(t, 403, "Subscription is not active")
	if pub.Post("/v1/verify-license", map[string]string{"key": key}).Expect(t, 200).JSON(t)["valid"] != true {
		t.Fatal("verify-license failed while canceled")
	}
	// No event about the ended subscription revives it, however late its time.
	deliver(t, s, su.event("updated", t0.Add(7*time.Second), period))
	deliver(t, s, su.paymentFailed(t0.Add(8*time.Second)))
	c.Get("/v1/billing/status").ExpectBody(t, statusBody("canceled", "free", false, nil, 2, 5))
}

// The same events, delivered in any order and any number of times, leave one state.
func TestBillingEventsInAnyOrderLeaveTheSameState(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	t0 := time.Now().Add(-time.Hour).Truncate(time.Second)
	period := t0.Add(30 * 24 * time.Hour)
	history := func(su sub) [][]byte {
		return [][]byte{
			su.checkoutCompleted(t0),
			su.event("created", t0, period),
			su.paymentFailed(t0.Add(time.Second)),
			su.event("updated", t0.Add(time.Second), period, "status", "past_due"),
			su.event("updated", t0.Add(2*time.Second), period),
			su.event("updated", t0.Add(3*time.Second), period, "cancel_at_period_end", true),
		}
	}
	want := statusBody("active", "pro", true, &period, 0, 1000)
	orders := [][]int{{0, 1, 2, 3, 4, 5}, {5, 4, 3, 2, 1, 0}, {2, 5, 0, 3, 1, 4}, {1, 3, 5, 0, 2, 4}}
	for i, order := range orders {
		c, tenant := hostedTenant(t, s)
		events := history(newSub(tenant))
		for _, j := range order {
			deliver(t, s, events[j])
		}
		if got := billingStatus(t, c); got != want {
			t.Fatalf("order %d %v: %s, want %s", i, order, got, want)
		}
		for _, e := range events { // replays
			deliver(t, s, e)
		}
		if got := billingStatus(t, c); got != want {
			t.Fatalf("order %d replayed: %s, want %s", i, got, want)
		}
	}

	// An event naming only the customer, before the checkout that ties the customer to
	// the tenant, waits for it.
	c, tenant := hostedTenant(t, s)
	su := newSub(tenant)
	deliver(t, s, stripeEvent("invoice.payment_failed", t0.Add(time.Minute), map[string]any{
		"id": "in_orphan", "object": "invoice", "customer": su.customer, "subscription": su.id}))
	c.Get("/v1/billing/status").ExpectBody(t, statusBody("active", "", false, nil, 0, 5))
	deliver(t, s, su.checkoutCompleted(t0))
	c.Get("/v1/billing/status").ExpectBody(t, statusBody("past_due", "pro", false, nil, 0, 1000))
}

// api.md: a subscription canceled mid-period keeps its plan until currentPeriodEnd,
// then reverts to Free, whether or not Stripe's deletion has arrived yet.
func TestCancelAtPeriodEndRevertsToFreeWhenThePeriodEnds(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	c, tenant := hostedTenant(t, s)
	su := newSub(tenant)
	start := time.Now().Add(-31 * 24 * time.Hour).Truncate(time.Second)
	ended := time.Now().Add(-time.Minute).Truncate(time.Second)
	deliver(t, s, su.checkoutCompleted(start))
	deliver(t, s, su.event("updated", start.Add(time.Hour), ended, "cancel_at_period_end", true))
	c.Get("/v1/billing/status").ExpectBody(t, statusBody("canceled", "free", false, nil, 0, 5))
	c.Post("/v1/issue-license", lic(product("billing-ended"))).ExpectError(t, 403, "Subscription is not active")

	// Subscribing again makes it active.
	next := newSub(tenant)
	deliver(t, s, next.checkoutCompleted(time.Now().Truncate(time.Second)))
	c.Get("/v1/billing/status").ExpectBody(t, statusBody("active", "pro", false, nil, 0, 1000))
	issueLicense(t, c, lic(product("billing-ended")))
}

// Pro allows a sixth license and up to 1,000 active ones, concurrently issued: the quota
// lock of the Free test holds on Pro. Downgrading revokes nothing.
func TestProQuotaIs1000AndHoldsUnderConcurrency(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	c, tenant := hostedTenant(t, s)
	p := product("billing-pro")
	var keys []string
	for range 5 {
		keys = append(keys, issueLicense(t, c, lic(p)))
	}
	c.Post("/v1/issue-license", lic(p)).ExpectError(t, 403, "License issuance quota exceeded")
	su := upgrade(t, s, tenant)
	issueLicense(t, c, lic(p)) // the sixth

	// 6 issued + 989 seeded = 995 active: 12 concurrent issuances, exactly 5 succeed.
	seedLicenses(t, s, tenant, p, 989)
	c.Get("/v1/billing/status").ExpectBody(t, statusBody("active", "pro", false, nil, 995, 1000))
	statuses := make([]*Response, 12)
	var wg sync.WaitGroup
	for i := range statuses {
		wg.Add(1)
		go func() { defer wg.Done(); statuses[i] = c.Post("/v1/issue-license", lic(p)) }()
	}
	wg.Wait()
	ok := 0
	for _, r := range statuses {
		if r.Status == 200 {
			ok++
			continue
		}
		r.ExpectError(t, 403, "License issuance quota exceeded")
	}
	if ok != 5 {
		t.Fatalf("%d of 12 concurrent issuances succeeded at 995/1000, want 5", ok)
	}
	c.Get("/v1/billing/status").ExpectBody(t, statusBody("active", "pro", false, nil, 1000, 1000))
	c.Post("/v1/issue-license", lic(p)).ExpectError(t, 403, "License issuance quota exceeded") // the 1,001st

	// Reactivation takes the same lock: at 999, two concurrent reactivations, one wins.
	for _, k := range keys[:2] {
		c.Post("/v1/revoke-license", map[string]any{"key": k, "revoked": true}).Expect(t, 200)
	}
	issueLicense(t, c, lic(p))
	var react [2]int
	for i := range react {
		wg.Add(1)
		go func() {
			defer wg.Done()
			react[i] = c.Post("/v1/revoke-license", map[string]any{"key": keys[i], "revoked": false}).Status
		}()
	}
	wg.Wait()
	if react != [2]int{200, 403} && react != [2]int{403, 200} {
		t.Fatalf("concurrent reactivations at 999/1000: %v", react)
	}

	// Pro ends: nothing is revoked; issuance refused, canceled being "not active".
	deliver(t, s, su.event("deleted", time.Now().Add(time.Minute), time.Now(), "status", "canceled"))
	c.Get("/v1/billing/status").ExpectBody(t, statusBody("canceled", "free", false, nil, 1000, 5))
	c.Post("/v1/issue-license", lic(p)).ExpectError(t, 403, "Subscription is not active")
	if list := c.Get("/v1/list-licenses?status=active&limit=1").Expect(t, 200).JSON(t); list["total"] != 1000.0 {
		t.Fatalf("active licenses after the downgrade: %v", list["total"])
	}
}

// seedLicenses inserts n active licenses straight into licensing's table (issuing a
// thousand through the REST edge would only test the rate limiter).
func seedLicenses(t testing.TB, s *stack.Stack, tenant, productID string, n int) {
	t.Helper()
	db := dbConn(t, s)
	_, err := db.Exec(t.Context(), `INSERT INTO licensing.licenses (key_hash, key, tenant_id, tier, product_id, issued_to)
		SELECT sha256(convert_to('seed-' || $1 || '-' || g, 'UTF8')), 'SEED-' || $1 || '-' || g, $1, 'pro', $2, 'seed'
		FROM generate_series(1, $3::int) g`, tenant, productID, n)
	if err != nil {
		t.Fatal(err)
	}
}

func dbConn(t testing.TB, s *stack.Stack) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), s.Env("DATABASE_URL"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// Licensing asks billing on every issuance, so an upgrade is in force on every licensing
// replica the moment the webhook answered: no cache to wait out.
func TestTwoLicensingReplicasSeeAnUpgradeAtOnce(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	second := secondGateway(t, s, "licensing", "LICENSING_ADDR")
	c1, tenant := hostedTenant(t, s)
	c2 := newClient(t, second, c1.Token)
	p := product("billing-replicas")
	for i := range 5 {
		issueLicense(t, []*Client{c1, c2}[i%2], lic(p))
	}
	c1.Post("/v1/issue-license", lic(p)).ExpectError(t, 403, "License issuance quota exceeded")
	c2.Post("/v1/issue-license", lic(p)).ExpectError(t, 403, "License issuance quota exceeded")
	su := upgrade(t, s, tenant)
	issueLicense(t, c1, lic(p))
	issueLicense(t, c2, lic(p))
	deliver(t, s, su.paymentFailed(time.Now().Add(time.Minute)))
	c1.Post("/v1/issue-license", lic(p)).ExpectError(t, 403, "Subscription is not active")
	c2.Post("/v1/issue-license", lic(p)).ExpectError(t, 403, "Subscription is not active")
}

// Without STRIPE_SECRET_KEY, checkout is a clear 503 and the rest keeps working.
func TestBillingWithoutStripeConfigurationIs503(t *testing.T) {
	t.Parallel()
	s := startStack(t, map[string]string{"MULTI_TENANT": "true"})
	t.Cleanup(s.Stop)
	c, _ := hostedTenant(t, s)
	c.Post("/v1/billing/checkout", map[string]string{"plan": "pro"}).
		ExpectError(t, 503, "Billing is not configured on this server (STRIPE_SECRET_KEY)")
	c.Post("/v1/billing/checkout", map[string]string{"plan": "gold"}).ExpectError(t, 400, "plan must be free or pro")
	sendEvent(t, s, stripeEvent("customer.created", time.Now(), map[string]any{"id": "cus_x"})).
		ExpectError(t, 503, "Billing webhooks are not configured on this server (STRIPE_WEBHOOK_SECRET)")
	c.Get("/v1/billing/status").ExpectBody(t, statusBody("active", "", false, nil, 0, 5))
}

// terms posts update-license-terms for key with fields.
func terms(c *Client, key string, fields ...any) *Response {
	body := map[string]any{"key": key}
	for i := 0; i+1 < len(fields); i += 2 {
		body[fields[i].(string)] = fields[i+1]
	}
	return c.Post("/v1/admin/update-license-terms", body)
}

// An expired license holds no quota; update-license-terms that makes it unexpired again
// (a revival) is reactivation's twin: room in the quota and an active subscription, or
// 403. Updates that revive nothing are never refused. Licenses imported already expired
// are no way around it.
func TestRevivingAnExpiredLicenseHoldsTheQuotaAndNeedsAnActiveSubscription(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	c, tenant := hostedTenant(t, s)
	p := product("billing-revive")
	past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	earlier := time.Now().Add(-48 * time.Hour).UTC().Format(time.RFC3339)
	future := time.Now().Add(365 * 24 * time.Hour).UTC().Format(time.RFC3339)
	var expired []string
	for range 7 {
		expired = append(expired, issueLicense(t, c, lic(p, "expires_at", past)))
	}
	imported := "REVIVE-" + p
	c.Post("/v1/licenses/import", map[string]any{"licenses": []map[string]any{
		{"key": imported, "tier": "pro", "product_id": p, "issued_to": "x@example.com", "expires_at": past}}}).Expect(t, 200)
	c.Get("/v1/billing/status").ExpectBody(t, statusBody("active", "", false, nil, 0, 5))

	// Free: five revivals fit, perpetual or dated; the sixth does not, nor an issuance.
	for i, k := range expired[:5] {
		var to any = future
		if i%2 == 0 {
			to = nil
		}
		terms(c, k, "expires_at", to).Expect(t, 200)
	}
	c.Get("/v1/billing/status").ExpectBody(t, statusBody("active", "", false, nil, 5, 5))
	terms(c, expired[5], "expires_at", nil).ExpectError(t, 403, "License issuance quota exceeded")
	terms(c, imported, "expires_at", future).ExpectError(t, 403, "License issuance quota exceeded")
	c.Post("/v1/issue-license", lic(p)).ExpectError(t, 403, "License issuance quota exceeded")
	anon(t, s).Post("/v1/verify-license", map[string]string{"key": expired[5]}).Expect(t, 403)

	// Updates that revive nothing, at the full quota: allowed.
	terms(c, expired[5], "expires_at", earlier, "max_activations", 3).Expect(t, 200) // expired kept expired
	terms(c, expired[0], "max_activations", 9).Expect(t, 200)                        // an active license's cap
	terms(c, expired[1], "expires_at", time.Now().Add(2*365*24*time.Hour).UTC().Format(time.RFC3339)).Expect(t, 200)
	c.Get("/v1/billing/status").ExpectBody(t, statusBody("active", "", false, nil, 5, 5))

	// Pro: room again. Past due: a revival is refused as issuance is; other updates are not.
	su := upgrade(t, s, tenant)
	terms(c, expired[5], "expires_at", nil).Expect(t, 200)
	deliver(t, s, su.paymentFailed(time.Now().Add(time.Minute)))
	terms(c, expired[6], "expires_at", nil).ExpectError(t, 403, "Subscription is not active")
	terms(c, imported, "expires_at", future).ExpectError(t, 403, "Subscription is not active")
	terms(c, expired[0], "max_activations", 2).Expect(t, 200)
	terms(c, expired[6], "expires_at", earlier).Expect(t, 200)
	// Canceled: the same.
	deliver(t, s, su.event("deleted", time.Now().Add(2*time.Minute), time.Now(), "status", "canceled"))
	terms(c, expired[6], "expires_at", future).ExpectError(t, 403, "Subscription is not active")
	c.Get("/v1/billing/status").ExpectBody(t, statusBody("canceled", "free", false, nil, 6, 5))
}

// Revivals racing each other and issuances around the Free limit, through two licensing
// replicas: the quota lock holds across them, so exactly the room left is granted.
func TestConcurrentRevivalsAcrossTwoReplicasNeverPassTheQuota(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	second := secondGateway(t, s, "licensing", "LICENSING_ADDR")
	past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	future := time.Now().Add(365 * 24 * time.Hour).UTC().Format(time.RFC3339)
	for round := range 3 {
		c1, _ := hostedTenant(t, s)
		c2 := newClient(t, second, c1.Token)
		p := product("billing-revive-race")
		for range round + 1 {
			issueLicense(t, c1, lic(p))
		}
		var expired []string
		for range 8 {
			expired = append(expired, issueLicense(t, c1, lic(p, "expires_at", past)))
		}
		room := 5 - (round + 1)
		res := make([]*Response, len(expired)+2)
		var wg sync.WaitGroup
		for i := range res {
			c := []*Client{c1, c2}[i%2]
			wg.Add(1)
			go func() {
				defer wg.Done()
				switch {
				case i >= len(expired):
					res[i] = c.Post("/v1/issue-license", lic(p))
				case i%3 == 0:
					res[i] = terms(c, expired[i], "expires_at", future)
				default:
					res[i] = terms(c, expired[i], "expires_at", nil)
				}
			}()
		}
		wg.Wait()
		ok := 0
		for _, r := range res {
			if r.Status == 200 {
				ok++
				continue
			}
			r.ExpectError(t, 403, "License issuance quota exceeded")
		}
		if ok != room {
			t.Fatalf("round %d: %d of %d concurrent revivals and issuances granted with room for %d", round, ok, len(res), room)
		}
		c1.Get("/v1/billing/status").ExpectBody(t, statusBody("active", "", false, nil, 5, 5))
	}
}

// Stripe often sends customer.subscription.created before checkout.session.completed.
// The tenant is Pro from the first, and checkout must already answer the Billing Portal
// of the subscription's customer: a second subscription is never sold.
func TestSubscriptionCreatedBeforeCheckoutSellsNoSecondSubscription(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	c, tenant := hostedTenant(t, s)
	su := newSub(tenant)
	now := time.Now().Truncate(time.Second)
	deliver(t, s, su.event("created", now, now.Add(30*24*time.Hour)))
	c.Get("/v1/billing/status").ExpectBody(t, statusBody("active", "pro", false, nil, 0, 1000))
	for _, want := range []string{"pro", "free"} {
		url := c.Post("/v1/billing/checkout", map[string]string{"plan": want}).Expect(t, 200).JSON(t)["url"].(string)
		if strings.HasPrefix(url, "https://checkout.stripe.com/") {
			t.Fatalf("plan %s: a Pro tenant was sold a second subscription: %s", want, url)
		}
	}
	if n := len(stripeCalls("/v1/billing_portal/sessions", "customer", su.customer)); n != 2 {
		t.Fatalf("%d portal sessions for the subscription's customer, want 2", n)
	}
	if n := len(stripeCalls("/v1/checkout/sessions", "client_reference_id", tenant)); n != 0 {
		t.Fatalf("%d checkout sessions", n)
	}
	// The checkout arriving late changes nothing.
	deliver(t, s, su.checkoutCompleted(now))
	c.Get("/v1/billing/status").ExpectBody(t, statusBody("active", "pro", false, nil, 0, 1000))
}

// An old subscription canceled at period end whose period ran out (its deletion not yet
// arrived) is ended, not the Pro it was: the new subscription that failed its payment is
// what the tenant holds, past_due, and checkout answers its Billing Portal.
func TestAnOldSubscriptionPastItsEndNeverHidesTheNewPastDueOne(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	c, tenant := hostedTenant(t, s)
	a := newSub(tenant)
	start := time.Now().Add(-31 * 24 * time.Hour).Truncate(time.Second)
	ended := time.Now().Add(-time.Minute).Truncate(time.Second)
	deliver(t, s, a.checkoutCompleted(start))
	deliver(t, s, a.event("updated", start.Add(time.Hour), ended, "cancel_at_period_end", true))
	b := sub{tenant: tenant, customer: a.customer, id: a.id + "_b"}
	now := time.Now().Truncate(time.Second)
	deliver(t, s, b.checkoutCompleted(now))
	deliver(t, s, b.event("created", now, now.Add(30*24*time.Hour)))
	c.Get("/v1/billing/status").ExpectBody(t, statusBody("active", "pro", false, nil, 0, 1000))
	deliver(t, s, b.paymentFailed(now.Add(time.Second)))
	c.Get("/v1/billing/status").ExpectBody(t, statusBody("past_due", "pro", false, nil, 0, 1000))
	c.Post("/v1/issue-license", lic(product("billing-old-sub"))).ExpectError(t, 403, "Subscription is not active")
	url := c.Post("/v1/billing/checkout", map[string]string{"plan": "pro"}).Expect(t, 200).JSON(t)["url"].(string)
	if strings.HasPrefix(url, "https://checkout.stripe.com/") {
		t.Fatalf("holding a past-due subscription, checkout sold a new one: %s", url)
	}
	// The old one's deletion arriving changes nothing.
	deliver(t, s, a.event("deleted", now.Add(2*time.Second), ended, "status", "canceled"))
	c.Get("/v1/billing/status").ExpectBody(t, statusBody("past_due", "pro", false, nil, 0, 1000))
}

// Stripe's cancel_at (a set cancellation date, cancel_at_period_end false) is a
// cancellation: Pro, cancelAtPeriodEnd true and the date as currentPeriodEnd until then,
// Free (canceled) from then on, deletion or not.
func TestCancelAtEndsProAtThatDate(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	c, tenant := hostedTenant(t, s)
	su := newSub(tenant)
	t0 := time.Now().Add(-time.Hour).Truncate(time.Second)
	period := t0.Add(30 * 24 * time.Hour)
	cancelAt := time.Now().Add(10 * 24 * time.Hour).Truncate(time.Second)
	deliver(t, s, su.checkoutCompleted(t0))
	deliver(t, s, su.event("updated", t0.Add(time.Second), period, "cancel_at", cancelAt.Unix(), "canceled_at", t0.Unix()))
	c.Get("/v1/billing/status").ExpectBody(t, statusBody("active", "pro", true, &cancelAt, 0, 1000))
	// Taken back: renewing again.
	deliver(t, s, su.event("updated", t0.Add(2*time.Second), period, "cancel_at", nil, "canceled_at", nil))
	c.Get("/v1/billing/status").ExpectBody(t, statusBody("active", "pro", false, nil, 0, 1000))
	// A date that has passed, Stripe's deletion not yet arrived: Free.
	deliver(t, s, su.event("updated", t0.Add(3*time.Second), period, "cancel_at", time.Now().Add(-time.Minute).Unix(), "canceled_at", t0.Unix()))
	c.Get("/v1/billing/status").ExpectBody(t, statusBody("canceled", "free", false, nil, 0, 5))
	c.Post("/v1/issue-license", lic(product("billing-cancel-at"))).ExpectError(t, 403, "Subscription is not active")
}

// Deleting a paying tenant cancels its live subscriptions in Stripe first, so its
// customer is never charged for an account that is gone. If Stripe fails, nothing is
// deleted (503) and a retry completes it; a subscription Stripe says is already gone
// counts as canceled.
func TestDeletingAPayingTenantCancelsItsSubscriptionsInStripe(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	a := admin(t, s)
	c, tenant := hostedTenant(t, s)
	su := upgrade(t, s, tenant)
	old := sub{tenant: tenant, customer: su.customer, id: su.id + "_old"} // canceled in Stripe, its deletion not yet here
	deliver(t, s, old.checkoutCompleted(time.Now().Add(-time.Hour)))
	stripeFailing(t, "/v1/subscriptions/"+old.id, stripeFailure{404, "invalid_request_error", "resource_missing"})
	undo := stripeFailing(t, "/v1/subscriptions/"+su.id, stripeFailure{400, "invalid_request_error", "forced"})

	a.Delete("/v1/operator/tenants/"+tenant, nil).ExpectError(t, 503, "Payment provider unavailable, retry")
	a.Get("/v1/operator/tenants/"+tenant).Expect(t, 200)
	c.Get("/v1/billing/status").ExpectBody(t, statusBody("active", "pro", false, nil, 0, 1000))
	issueLicense(t, c, lic(product("billing-delete")))

	undo()
	a.Delete("/v1/operator/tenants/"+tenant, nil).ExpectBody(t, fmt.Sprintf(`{"tenant_id":"%s","deleted":true}`, tenant))
	cancels := stripeCallsTo(http.MethodDelete, "/v1/subscriptions/"+su.id)
	if len(cancels) < 2 || cancels[len(cancels)-1].Form.Get("cancellation_details[comment]") == "" {
		t.Fatalf("cancellations of the live subscription: %+v", cancels)
	}
	if len(stripeCallsTo(http.MethodDelete, "/v1/subscriptions/"+old.id)) == 0 {
		t.Fatal("the older subscription was not canceled")
	}
	c.Get("/v1/billing/status").ExpectError(t, 403, "Unauthorized")
	a.Get("/v1/operator/tenants/"+tenant).ExpectError(t, 404, "Tenant not found")

	// A tenant that never subscribed has nothing to cancel.
	_, free := hostedTenant(t, s)
	a.Delete("/v1/operator/tenants/"+free, nil).Expect(t, 200)
}

// A subscription whose first payment never succeeded (a payment that failed, a 3-D Secure
// check abandoned; Stripe expires it after 23 hours) is no paid subscription that ended:
// the tenant is what it was without it. One that never subscribed is on Free and active at
// every step, in any delivery order, replayed, and issues within Free's quota; one whose
// paid subscription ended stays canceled.
func TestASubscriptionThatNeverPaidBlocksNobody(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	t0 := time.Now().Add(-24 * time.Hour).Truncate(time.Second)
	free := statusBody("active", "", false, nil, 0, 5)
	for i, order := range [][]int{{0, 1, 2, 3, 4}, {4, 3, 2, 1, 0}, {3, 0, 4, 2, 1}} {
		c, tenant := hostedTenant(t, s)
		su := newSub(tenant)
		events := su.neverPaid(t0)
		for _, j := range order {
			deliver(t, s, events[j])
			if got := billingStatus(t, c); got != free {
				t.Fatalf("order %d %v, after event %d: %s, want %s", i, order, j, got, free)
			}
		}
		for _, e := range events { // replays
			deliver(t, s, e)
		}
		c.Get("/v1/billing/status").ExpectBody(t, free)
		if i > 0 {
			continue
		}
		// Free's quota, as before the attempt: five licenses, not a sixth.
		p := product("billing-never-paid")
		for range 5 {
			issueLicense(t, c, lic(p))
		}
		c.Post("/v1/issue-license", lic(p)).ExpectError(t, 403, "License issuance quota exceeded")
		// Subscribing again is a new checkout (no paid subscription to manage), for the same
		// Stripe customer.
		url := c.Post("/v1/billing/checkout", map[string]string{"plan": "pro"}).Expect(t, 200).JSON(t)["url"].(string)
		if !strings.HasPrefix(url, "https://checkout.stripe.com/") {
			t.Fatalf("checkout after an attempt that never paid: %q", url)
		}
		if n := len(stripeCalls("/v1/checkout/sessions", "customer", su.customer)); n != 1 {
			t.Fatalf("%d checkout sessions for the attempt's customer, want 1", n)
		}
	}

	// Paid once, canceled, then an attempt that never paid: canceled, as before it.
	c, tenant := hostedTenant(t, s)
	paid := newSub(tenant)
	deliver(t, s, paid.checkoutCompleted(t0.Add(-time.Hour)))
	deliver(t, s, paid.event("deleted", t0.Add(-time.Minute), t0, "status", "canceled"))
	canceled := statusBody("canceled", "free", false, nil, 0, 5)
	c.Get("/v1/billing/status").ExpectBody(t, canceled)
	again := sub{tenant: tenant, customer: paid.customer, id: paid.id + "_again"}
	for _, e := range again.neverPaid(t0) {
		deliver(t, s, e)
		c.Get("/v1/billing/status").ExpectBody(t, canceled)
	}
	c.Post("/v1/issue-license", lic(product("billing-never-paid-again"))).ExpectError(t, 403, "Subscription is not active")
}

// api.md's status says past_due for every subscription the tenant holds that collects no
// money; the console's Billing page says which it is. A paused subscription (what a trial
// that ends without a payment method becomes) is not "the last payment failed".
func TestConsoleBillingPageSaysWhyASubscriptionIsNotActive(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	c, tenant := hostedTenant(t, s)
	su := newSub(tenant)
	t0 := time.Now().Add(-time.Hour).Truncate(time.Second)
	period := t0.Add(30 * 24 * time.Hour)
	deliver(t, s, su.checkout(t0, "no_payment_required"))
	deliver(t, s, su.event("created", t0, period, "status", "trialing"))
	deliver(t, s, su.event("updated", t0.Add(time.Minute), period, "status", "paused"))
	pastDue := statusBody("past_due", "pro", false, nil, 0, 1000)
	c.Get("/v1/billing/status").ExpectBody(t, pastDue)
	c.Post("/v1/issue-license", lic(product("console-paused"))).ExpectError(t, 403, "Subscription is not active")

	web := newWebClient(t, s)
	web.signIn(c.Token)
	const failed = "The last payment failed."
	plan := func() string {
		t.Helper()
		return section(web.get("/console/billing").expect(t, 200).Body, "plan-title")
	}
	for _, step := range []struct {
		events      [][]byte
		badge, says string
	}{
		{nil, "paused", "The Pro subscription is paused, and bills nothing until it is resumed"},
		// Resumed, then its payment failed; then Stripe gave up retrying.
		{[][]byte{su.event("updated", t0.Add(2*time.Minute), period), su.paymentFailed(t0.Add(3 * time.Minute))},
			"past due", failed + " Update the payment method to keep issuing licenses."},
		{[][]byte{su.event("updated", t0.Add(4*time.Minute), period, "status", "unpaid")},
			"unpaid", "Stripe has stopped retrying them: the subscription is unpaid"},
	} {
		for _, e := range step.events {
			deliver(t, s, e)
		}
		c.Get("/v1/billing/status").ExpectBody(t, pastDue)
		card := plan()
		if !strings.Contains(card, `<span class="badge expired">`+step.badge+`</span>`) || !strings.Contains(card, step.says) {
			t.Fatalf("the Billing page lacks the badge %q or %q:\n%s", step.badge, step.says, card)
		}
		if step.badge != "past due" && strings.Contains(card, failed) {
			t.Fatalf("the Billing page says a payment failed for a %s subscription:\n%s", step.badge, card)
		}
	}
}
