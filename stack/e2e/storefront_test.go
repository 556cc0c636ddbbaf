package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/devinfra/mailtest"
	"github.com/keyhouse/keyhouse/devinfra/testkit"
	"github.com/keyhouse/keyhouse/stack"
	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/webhook"
)

// The storefront tests drive the whole path a sale takes: a Stripe-signed event on the
// callback, the outbox, JetStream, the fulfillment worker, licensing, and a real SMTP
// server whose received messages the tests read.

var (
	sfOnce  sync.Once
	sfStack *stack.Stack
	sfSink  *mailtest.Server
)

// storefrontStack is a hosted stack of its own whose buyer email goes to an SMTP sink.
func storefrontStack(t *testing.T) (*stack.Stack, *mailtest.Server) {
	t.Helper()
	// Before the Once: a test skipped under -short inside it would leave it done and empty.
	testkit.Integration(t)
	sfOnce.Do(func() {
		sink, err := mailtest.Start()
		if err != nil {
			t.Fatal(err)
		}
		sfSink = sink
		sfStack = startStack(t, map[string]string{
			"MULTI_TENANT": "true", "EMAIL_PROVIDER": "smtp", "SMTP_URL": sink.URL(),
			"EMAIL_FROM": "Keyhouse Shop <shop@example.com>", "EMAIL_REPLY_TO": "support@example.com",
			"PUBLIC_BASE_URL": "https://licenses.example.com",
		})
		testkit.AtExit(sfStack.Stop)
		testkit.AtExit(sink.Stop)
	})
	if sfStack == nil {
		t.Fatal("storefront stack did not start")
	}
	return sfStack, sfSink
}

var sfCounter atomic.Int64

func uniq(prefix string) string {
	return fmt.Sprintf("%s%d%d", prefix, time.Now().UnixNano(), sfCounter.Add(1))
}

// shop is one vendor's storefront setup: an active Stripe webhook and its secret.
type shop struct {
	t       *testing.T
	c       *Client
	webhook map[string]any
	secret  string
}

// connectShop connects a Stripe webhook for c and saves its signing secret.
func connectShop(t *testing.T, c *Client) *shop {
	t.Helper()
	w := c.Post("/v1/storefront/webhooks", map[string]string{"provider": "stripe"}).Expect(t, 200).JSON(t)
	if w["state"] != "pending" {
		t.Fatalf("connect: %v", w)
	}
	secret := "whsec_" + uniq("test")
	id := w["webhook_id"].(string)
	active := c.Post("/v1/storefront/webhooks/"+id+"/secret", map[string]string{"signing_secret": secret}).Expect(t, 200).JSON(t)
	if active["state"] != "active" {
		t.Fatalf("save secret: %v", active)
	}
	return &shop{t: t, c: c, webhook: active, secret: secret}
}

func (s *shop) id() string { return s.webhook["webhook_id"].(string) }

// session is a Checkout Session as Stripe sends it in events.
type session struct {
	ID, PaymentLink, ServiceRef, Email, PaymentStatus, Customer string
}

func newSession(link, email string) session {
	return session{ID: uniq("cs_test_"), PaymentLink: link, Email: email, PaymentStatus: "paid", Customer: uniq("cus_")}
}

// event is a Stripe event payload of type typ for s.
func event(eventID, typ string, s session) []byte {
	obj := map[string]any{
		"id": s.ID, "object": "checkout.session", "mode": "payment", "status": "complete",
		"payment_status": s.PaymentStatus, "created": time.Now().Unix(), "livemode": false,
		"metadata": map[string]any{},
	}
	if s.PaymentLink != "" {
		obj["payment_link"] = s.PaymentLink
	}
	if s.ServiceRef != "" {
		obj["metadata"] = map[string]any{"service_ref": s.ServiceRef}
	}
	if s.Customer != "" {
		obj["customer"] = s.Customer
	}
	if s.Email != "" {
		obj["customer_details"] = map[string]any{"email": s.Email, "name": "Jane Buyer"}
	}
	b, _ := json.Marshal(map[string]any{
		"id": eventID, "object": "event", "api_version": stripe.APIVersion, "created": time.Now().Unix(),
		"type": typ, "livemode": false, "pending_webhooks": 1, "data": map[string]any{"object": obj},
	})
	return b
}

// deliver posts payload to the shop's callback signed with its secret, as Stripe does.
func (s *shop) deliver(payload []byte) *Response {
	s.t.Helper()
	signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: s.secret})
	return anon(s.t, stackOf(s.c)).Do(http.MethodPost, "/v1/webhooks/storefront/"+s.id(), payload, "Stripe-Signature", signed.Header)
}

func stackOf(c *Client) *stack.Stack { return &stack.Stack{URL: c.Base} }

// mapping creates a mapping and returns it.
func (s *shop) mapping(body map[string]any) map[string]any {
	s.t.Helper()
	return s.c.Post("/v1/storefront/mappings", body).Expect(s.t, 200).JSON(s.t)
}

// deliveries lists deliveries (query is the raw query string).
func (s *shop) deliveries(query string) ([]map[string]any, int) {
	s.t.Helper()
	var out struct {
		Deliveries []map[string]any `json:"deliveries"`
		Total      int              `json:"total"`
	}
	resp := s.c.Get("/v1/storefront/deliveries?"+query).Expect(s.t, 200)
	if err := json.Unmarshal(resp.Body, &out); err != nil {
		s.t.Fatal(err)
	}
	return out.Deliveries, out.Total
}

// delivery returns the delivery of an event id, nil when none.
func (s *shop) delivery(eventID string) map[string]any {
	s.t.Helper()
	ds, _ := s.deliveries("limit=1000")
	for _, d := range ds {
		if d["event_id"] == eventID {
			return d
		}
	}
	return nil
}

// await polls the event's delivery until ok accepts it. The wait is generous: this is
// about what happens, not how fast (make bench measures that). The polls slow down (200 ms
// to 2 s): each counts against the client's Admin-Info budget (300 per 15 minutes), which
// a fulfillment retried with backoff on a loaded machine must not exhaust.
func (s *shop) await(eventID string, ok func(map[string]any) bool) map[string]any {
	s.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	var last map[string]any
	for pause := 200 * time.Millisecond; time.Now().Before(deadline); pause = min(pause*3/2, 2*time.Second) {
		if last = s.delivery(eventID); last != nil && ok(last) {
			return last
		}
		time.Sleep(pause)
	}
	s.t.Fatalf("delivery of %s never reached the expected state; last: %v", eventID, last)
	return nil
}

func outcome(o string, email ...string) func(map[string]any) bool {
	return func(d map[string]any) bool {
		if d["outcome"] != o {
			return false
		}
		return len(email) == 0 || d["email_status"] == email[0]
	}
}

// licensesOf counts the tenant's licenses of a product.
func licensesOf(t *testing.T, c *Client, product string) []map[string]any {
	t.Helper()
	var out struct {
		Licenses []map[string]any `json:"licenses"`
	}
	resp := c.Get("/v1/list-licenses?limit=1000&product_id="+url.QueryEscape(product)).Expect(t, 200)
	if err := json.Unmarshal(resp.Body, &out); err != nil {
		t.Fatal(err)
	}
	return out.Licenses
}

// awaitMail waits until the sink holds n messages for rcpt, then returns them.
func awaitMail(t *testing.T, sink *mailtest.Server, rcpt string, n int) []mailtest.Received {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if got := sink.To(rcpt); len(got) >= n {
			for _, m := range got {
				census.notePage(nil, m.Body) // the portal link
			}
			return got
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s received %d messages, want %d", rcpt, len(sink.To(rcpt)), n)
	return nil
}

// A signed checkout.session.completed becomes a license with the mapping's terms and an
// email carrying its key, received by a real SMTP server.
func TestStorefrontFullFlow(t *testing.T) {
	t.Parallel()
	s, sink := storefrontStack(t)
	sh := connectShop(t, newTenant(t, s))
	if got := sh.webhook["callback_url"]; got != "https://licenses.example.com/v1/webhooks/storefront/"+sh.id() {
		t.Fatalf("callback_url %v", got)
	}
	product, link := product("sf-app"), uniq("plink_")
	sh.mapping(map[string]any{"payment_link": link, "product_id": product, "tier": "pro", "seats": 3,
		"limits": map[string]any{"projects": 10}, "duration_days": 365})

	buyer := uniq("buyer") + "@example.com"
	sess := newSession(link, buyer)
	evID := uniq("evt_")
	sh.deliver(event(evID, "checkout.session.completed", sess)).ExpectBody(t, `{"received":true}`)

	d := sh.await(evID, outcome("issued", "sent"))
	key, _ := d["license_key"].(string)
	if key == "" || d["checkout_session_id"] != sess.ID || d["event_type"] != "checkout.session.completed" || d["error"] != nil {
		t.Fatalf("delivery %v", d)
	}
	wantKeys := "id,event_id,event_type,checkout_session_id,outcome,email_status,license_key,error,created_at,updated_at"
	if got := sh.firstDeliveryKeys(); got != wantKeys {
		t.Fatalf("delivery fields %s, want %s", got, wantKeys)
	}

	lic := sh.c.Get("/v1/admin/license/"+key).Expect(t, 200).JSON(t)
	if lic["product_id"] != product || lic["tier"] != "pro" || lic["max_activations"] != float64(3) ||
		lic["status"] != "active" || lic["issued_to"] != sess.Customer {
		t.Fatalf("license %v", lic)
	}
	if lim, _ := lic["limits"].(map[string]any); lim["projects"] != float64(10) {
		t.Fatalf("limits %v", lic["limits"])
	}
	exp, err := time.Parse(time.RFC3339, lic["expires_at"].(string))
	if err != nil || exp.Sub(time.Now()) < 364*24*time.Hour || exp.Sub(time.Now()) > 366*24*time.Hour {
		t.Fatalf("expires_at %v, want about a year from now", lic["expires_at"])
	}

	msgs := awaitMail(t, sink, buyer, 1)
	m := msgs[0]
	if m.From != "shop@example.com" || !regexp.MustCompile(`^"Tenant \d+" <shop@example\.com>$`).MatchString(m.HeaderText("From")) || !strings.Contains(m.Subject, product) ||
		!strings.Contains(m.Body, "License key: "+key) || !strings.Contains(m.Body, "Tier:        pro") ||
		!strings.Contains(m.Body, "Expires:     "+exp.UTC().Format("2006-01-02")) {
		t.Fatalf("email %+v", m)
	}
	// Hosted, a tenant without mail settings answers to its own name and address, not to
	// the operator's EMAIL_REPLY_TO.
	if rt := m.HeaderText("Reply-To"); !regexp.MustCompile(`^<owner\d+@example\.com>$`).MatchString(rt) {
		t.Fatalf("Reply-To %q, want the tenant's address", rt)
	}
	// The portal is on by default: the email links the license's portal page, built from
	// PUBLIC_BASE_URL, and the link opens it.
	const portalBase = "https://licenses.example.com/portal/"
	i := strings.Index(m.Body, portalBase)
	if i < 0 {
		t.Fatalf("no portal link in the email:\n%s", m.Body)
	}
	token := strings.Fields(m.Body[i+len(portalBase):])[0]
	page := anon(t, s).Get("/portal/"+token).Expect(t, 200)
	if !strings.Contains(string(page.Body), product) {
		t.Fatalf("portal page does not show the product: %.300s", page.Body)
	}
	// Another tenant sees none of it (invariant 1).
	other := newTenant(t, s)
	other.Get("/v1/storefront/deliveries").ExpectBody(t, `{"deliveries":[],"total":0}`)
	other.Get("/v1/admin/license/"+key).ExpectError(t, 404, "License key not found")
	// The buyer's address is used for the send and stored nowhere a vendor can read.
	for _, path := range []string{"/v1/storefront/deliveries", "/v1/admin/license/" + key, "/v1/list-licenses?limit=1000"} {
		if body := sh.c.Get(path).Expect(t, 200).Body; strings.Contains(string(body), buyer) {
			t.Fatalf("%s shows the buyer address: %s", path, body)
		}
	}
}

// firstDeliveryKeys returns the field names of the newest delivery, in body order.
func (s *shop) firstDeliveryKeys() string {
	s.t.Helper()
	var out struct {
		Deliveries []json.RawMessage `json:"deliveries"`
	}
	if err := json.Unmarshal(newClient(s.t, s.c.Base, s.c.Token).Get("/v1/storefront/deliveries?limit=1").Expect(s.t, 200).Body, &out); err != nil || len(out.Deliveries) == 0 {
		s.t.Fatalf("no delivery: %v", err)
	}
	return strings.Join((&Response{Body: out.Deliveries[0]}).Keys(s.t), ",")
}

// A replay, 20 concurrent copies of the same event, and a new event id for the same
// checkout session give one license and one email (invariant 5).
func TestStorefrontDuplicatesIssueOnce(t *testing.T) {
	t.Parallel()
	s, sink := storefrontStack(t)
	sh := connectShop(t, newTenant(t, s))
	product, ref := product("sf-dup"), uniq("ref-")
	sh.mapping(map[string]any{"service_ref": ref, "product_id": product, "tier": "enterprise"})

	buyer := uniq("dup") + "@example.com"
	sess := newSession("", buyer)
	sess.ServiceRef = ref
	evID := uniq("evt_")
	payload := event(evID, "checkout.session.completed", sess)

	var wg sync.WaitGroup
	statuses := make([]int, 20)
	for i := range statuses {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i] = sh.deliver(payload).Status
		}()
	}
	wg.Wait()
	for i, st := range statuses {
		if st != 200 {
			t.Fatalf("copy %d answered %d", i, st)
		}
	}
	first := sh.await(evID, outcome("issued", "sent"))

	// Stripe's retry of the same event, and a second event id for the same session.
	sh.deliver(payload).Expect(t, 200)
	ev2 := uniq("evt_")
	sh.deliver(event(ev2, "checkout.session.completed", sess)).Expect(t, 200)
	// The second event sends nothing: its email_status is the purchase's email, sent.
	second := sh.await(ev2, outcome("issued", "sent"))
	if second["license_key"] != first["license_key"] {
		t.Fatalf("second event got %v, first %v", second["license_key"], first["license_key"])
	}
	// Whatever is still in flight settles; then exactly one license and one email.
	time.Sleep(2 * time.Second)
	if n := len(licensesOf(t, sh.c, product)); n != 1 {
		t.Fatalf("%d licenses for one checkout session, want 1", n)
	}
	if n := len(sink.To(buyer)); n != 1 {
		t.Fatalf("%d emails for one checkout session, want 1", n)
	}
	ds, total := sh.deliveries("")
	if total != 2 || len(ds) != 2 || ds[0]["event_id"] != ev2 || ds[1]["event_id"] != evID {
		t.Fatalf("deliveries (newest first) %v total %d", ds, total)
	}
}

// A Free tenant holding 5 active licenses gets over_quota: licensing's refusal, the
// same quota as every issuance.
func TestStorefrontOverQuota(t *testing.T) {
	t.Parallel()
	s, sink := storefrontStack(t)
	c := newTenant(t, s)
	sh := connectShop(t, c)
	product, link := product("sf-quota"), uniq("plink_")
	sh.mapping(map[string]any{"payment_link": link, "product_id": product, "tier": "pro"})
	for i := range 5 {
		issueLicense(t, c, map[string]any{"tier": "free", "product_id": product, "issued_to": fmt.Sprint("seed", i)})
	}
	buyer := uniq("quota") + "@example.com"
	evID := uniq("evt_")
	sh.deliver(event(evID, "checkout.session.completed", newSession(link, buyer))).Expect(t, 200)
	d := sh.await(evID, outcome("over_quota"))
	if d["error"] != "License issuance quota exceeded" || d["license_key"] != nil || d["email_status"] != nil {
		t.Fatalf("delivery %v", d)
	}
	if n := len(licensesOf(t, c, product)); n != 5 {
		t.Fatalf("%d licenses, want the 5 seeded", n)
	}
	if n := len(sink.To(buyer)); n != 0 {
		t.Fatalf("over quota sent %d emails", n)
	}
	if ds, total := sh.deliveries("outcome=over_quota"); total != 1 || len(ds) != 1 {
		t.Fatalf("outcome filter: %v %d", ds, total)
	}
}

// A session no mapping matches is recorded unmapped; after the vendor adds the mapping,
// Stripe's redelivery of the event issues.
func TestStorefrontUnmappedThenMapped(t *testing.T) {
	t.Parallel()
	s, sink := storefrontStack(t)
	sh := connectShop(t, newTenant(t, s))
	link := uniq("plink_")
	buyer := uniq("unmapped") + "@example.com"
	evID := uniq("evt_")
	payload := event(evID, "checkout.session.completed", newSession(link, buyer))
	sh.deliver(payload).Expect(t, 200)
	d := sh.await(evID, outcome("unmapped"))
	if d["error"] != "No mapping for payment link "+link || d["license_key"] != nil {
		t.Fatalf("delivery %v", d)
	}
	product := product("sf-late")
	sh.mapping(map[string]any{"payment_link": link, "product_id": product, "tier": "pro"})
	sh.deliver(payload).Expect(t, 200)
	sh.await(evID, outcome("issued", "sent"))
	awaitMail(t, sink, buyer, 1)
	if n := len(licensesOf(t, sh.c, product)); n != 1 {
		t.Fatalf("%d licenses", n)
	}
}

// An unpaid session waits (awaiting_payment) until async_payment_succeeded issues; a
// failed delayed payment closes the wait without a license.
func TestStorefrontDelayedPayment(t *testing.T) {
	t.Parallel()
	s, sink := storefrontStack(t)
	sh := connectShop(t, newTenant(t, s))
	product, link := product("sf-async"), uniq("plink_")
	sh.mapping(map[string]any{"payment_link": link, "product_id": product, "tier": "pro"})

	buyer := uniq("async") + "@example.com"
	sess := newSession(link, buyer)
	sess.PaymentStatus = "unpaid"
	completed := uniq("evt_")
	sh.deliver(event(completed, "checkout.session.completed", sess)).Expect(t, 200)
	d := sh.await(completed, outcome("awaiting_payment"))
	if d["license_key"] != nil || len(licensesOf(t, sh.c, product)) != 0 {
		t.Fatalf("issued before payment: %v", d)
	}
	sess.PaymentStatus = "paid"
	succeeded := uniq("evt_")
	sh.deliver(event(succeeded, "checkout.session.async_payment_succeeded", sess)).Expect(t, 200)
	d2 := sh.await(succeeded, outcome("issued", "sent"))
	// The waiting delivery is resolved with the same license.
	d1 := sh.await(completed, outcome("issued"))
	if d1["license_key"] != d2["license_key"] {
		t.Fatalf("awaiting delivery %v, succeeded %v", d1, d2)
	}
	awaitMail(t, sink, buyer, 1)
	if n := len(licensesOf(t, sh.c, product)); n != 1 {
		t.Fatalf("%d licenses", n)
	}

	// Another buyer's delayed payment fails.
	other := newSession(link, uniq("failed")+"@example.com")
	other.PaymentStatus = "unpaid"
	c2 := uniq("evt_")
	sh.deliver(event(c2, "checkout.session.completed", other)).Expect(t, 200)
	sh.await(c2, outcome("awaiting_payment"))
	f := uniq("evt_")
	sh.deliver(event(f, "checkout.session.async_payment_failed", other)).Expect(t, 200)
	sh.await(f, outcome("error"))
	closed := sh.await(c2, outcome("error"))
	if closed["error"] != "The delayed payment failed; no license was issued" {
		t.Fatalf("closed delivery %v", closed)
	}
	if n := len(licensesOf(t, sh.c, product)); n != 1 {
		t.Fatalf("%d licenses after a failed payment, want 1", n)
	}
}

// Webhook lifecycle and the callback's answers: pending 400, bad signature 400, another
// tenant's id 404, disabled 404, one active per provider 409, the secret never shown.
func TestStorefrontWebhooks(t *testing.T) {
	t.Parallel()
	s, _ := storefrontStack(t)
	a, b := newTenant(t, s), newTenant(t, s)
	pending := a.Post("/v1/storefront/webhooks", map[string]string{"provider": "stripe"}).Expect(t, 200)
	if got := strings.Join(pending.Keys(t), ","); got != "webhook_id,provider,state,callback_url,created_at" {
		t.Fatalf("webhook fields %s", got)
	}
	id := pending.JSON(t)["webhook_id"].(string)
	payload := event(uniq("evt_"), "checkout.session.completed", newSession(uniq("plink_"), "x@example.com"))
	signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: "whsec_whatever"})
	cb := "/v1/webhooks/storefront/" + id
	anon(t, s).Do(http.MethodPost, cb, payload, "Stripe-Signature", signed.Header).ExpectError(t, 400, "Webhook is not active")

	// Another tenant can neither see nor use a's webhook.
	b.Post("/v1/storefront/webhooks/"+id+"/secret", map[string]string{"signing_secret": "whsec_abcdefghij"}).ExpectError(t, 404, "Webhook not found")
	b.Post("/v1/storefront/webhooks/"+id+"/disable", nil).ExpectError(t, 404, "Webhook not found")
	if body := string(b.Get("/v1/storefront/webhooks").Expect(t, 200).Body); body != `{"webhooks":[]}` {
		t.Fatalf("b lists %s", body)
	}

	a.Post("/v1/storefront/webhooks/"+id+"/secret", map[string]string{"signing_secret": "sk_live_nope"}).Expect(t, 400)
	a.Post("/v1/storefront/webhooks/"+id+"/secret", map[string]string{}).ExpectError(t, 400, "signing_secret is required")
	secret := "whsec_" + uniq("s")
	active := a.Post("/v1/storefront/webhooks/"+id+"/secret", map[string]string{"signing_secret": secret}).Expect(t, 200)
	if strings.Contains(string(active.Body), secret) || active.JSON(t)["state"] != "active" {
		t.Fatalf("save secret answered %s", active.Body)
	}
	if body := a.Get("/v1/storefront/webhooks").Expect(t, 200).Body; strings.Contains(string(body), secret) {
		t.Fatalf("list shows the secret: %s", body)
	}
	a.Post("/v1/storefront/webhooks", map[string]string{"provider": "stripe"}).Expect(t, 409)
	a.Post("/v1/storefront/webhooks", map[string]string{"provider": "paddle"}).Expect(t, 400)

	// Signatures: wrong secret, tampered body, missing header, stale timestamp.
	anon(t, s).Do(http.MethodPost, cb, payload, "Stripe-Signature", signed.Header).ExpectError(t, 400, "Invalid signature")
	good := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: secret})
	tampered := append([]byte(nil), payload...)
	tampered[len(tampered)-2] = ' '
	anon(t, s).Do(http.MethodPost, cb, tampered, "Stripe-Signature", good.Header).ExpectError(t, 400, "Invalid signature")
	anon(t, s).Do(http.MethodPost, cb, payload).ExpectError(t, 400, "Invalid signature")
	old := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: secret, Timestamp: time.Now().Add(-10 * time.Minute)})
	anon(t, s).Do(http.MethodPost, cb, payload, "Stripe-Signature", old.Header).ExpectError(t, 400, "Invalid signature")
	// Signed, but another event type: acknowledged and recorded as ignored (so the vendor
	// sees Stripe sends it), nothing else.
	other, _ := json.Marshal(map[string]any{"id": uniq("evt_"), "object": "event", "type": "customer.created", "data": map[string]any{"object": map[string]any{"id": "cus_1"}}})
	ok := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: other, Secret: secret})
	anon(t, s).Do(http.MethodPost, cb, other, "Stripe-Signature", ok.Header).ExpectBody(t, `{"received":true}`)
	if ds, total := (&shop{t: t, c: a}).deliveries(""); total != 1 || ds[0]["outcome"] != "ignored" {
		t.Fatalf("another event type recorded as %v (%d deliveries), want one ignored", ds, total)
	}

	anon(t, s).Do(http.MethodPost, "/v1/webhooks/storefront/wh_unknown", payload, "Stripe-Signature", good.Header).ExpectError(t, 404, "Webhook not found")
	anon(t, s).Do(http.MethodPost, "/v1/webhooks/storefront/wh_00000000000000000000000000", payload, "Stripe-Signature", good.Header).ExpectError(t, 404, "Webhook not found")

	disabled := a.Post("/v1/storefront/webhooks/"+id+"/disable", nil).Expect(t, 200).JSON(t)
	if disabled["state"] != "disabled" {
		t.Fatalf("disable: %v", disabled)
	}
	anon(t, s).Do(http.MethodPost, cb, payload, "Stripe-Signature", good.Header).ExpectError(t, 404, "Webhook not found")
	a.Post("/v1/storefront/webhooks/"+id+"/disable", nil).Expect(t, 409)
	a.Post("/v1/storefront/webhooks/"+id+"/secret", map[string]string{"signing_secret": secret}).Expect(t, 409)
	// With the old one disabled, a new webhook may be connected.
	a.Post("/v1/storefront/webhooks", map[string]string{"provider": "stripe"}).Expect(t, 200)

	// The routes need the tenant's credential; the admin key is not one in hosted mode.
	anon(t, s).Get("/v1/storefront/webhooks").ExpectError(t, 403, "Unauthorized")
	admin(t, s).Get("/v1/storefront/webhooks").ExpectError(t, 403, "Unauthorized")
}

// Mappings: exactly one of payment_link and service_ref, required fields, allowlisted
// limits, hosted product ownership, list, delete, no edit.
func TestStorefrontMappings(t *testing.T) {
	t.Parallel()
	s, _ := storefrontStack(t)
	a, b := newTenant(t, s), newTenant(t, s)
	product, link := product("sf-map"), uniq("plink_")
	for _, tc := range []struct {
		body map[string]any
		err  string
	}{
		{map[string]any{"product_id": product, "tier": "pro"}, "payment_link or service_ref is required"},
		{map[string]any{"payment_link": link, "service_ref": "x", "product_id": product, "tier": "pro"}, "give exactly one of payment_link and service_ref"},
		{map[string]any{"payment_link": link, "tier": "pro"}, "product_id is required"},
		{map[string]any{"payment_link": link, "product_id": product}, "tier is required"},
		{map[string]any{"payment_link": "https://buy.stripe.com/x", "product_id": product, "tier": "pro"}, "payment_link must be a Stripe payment link id (plink_…)"},
		{map[string]any{"payment_link": link, "product_id": product, "tier": "pro", "limits": map[string]any{"storage": 5}}, "Unknown limit key: storage"},
		{map[string]any{"payment_link": link, "product_id": product, "tier": "pro", "seats": 0}, "seats must be a positive integer"},
		{map[string]any{"payment_link": link, "product_id": product, "tier": "pro", "seats": "3"}, "seats must be a positive integer"},
		{map[string]any{"payment_link": link, "product_id": product, "tier": "pro", "duration_days": 1.5}, "duration_days must be a positive integer (at most 36600) or null for a perpetual license"},
		{map[string]any{"payment_link": link, "product_id": "_service_x", "tier": "pro"}, "product_id uses a reserved prefix"},
	} {
		a.Post("/v1/storefront/mappings", tc.body).ExpectError(t, 400, tc.err)
	}
	created := a.Post("/v1/storefront/mappings", map[string]any{"payment_link": link, "product_id": product, "tier": "pro"}).Expect(t, 200)
	if got := strings.Join(created.Keys(t), ","); got != "id,payment_link,service_ref,product_id,tier,seats,limits,duration_days,created_at,renewal_grace_days,on_refund" {
		t.Fatalf("mapping fields %s", got)
	}
	m := created.JSON(t)
	if m["seats"] != float64(1) || m["duration_days"] != nil || m["service_ref"] != nil || m["payment_link"] != link {
		t.Fatalf("defaults %v", m)
	}
	a.Post("/v1/storefront/mappings", map[string]any{"payment_link": link, "product_id": product, "tier": "free"}).Expect(t, 409)
	// A refused mapping claims nothing: the product it named stays free for b.
	free := product + "-free"
	a.Post("/v1/storefront/mappings", map[string]any{"payment_link": link, "product_id": free, "tier": "pro"}).Expect(t, 409)
	issueLicense(t, b, lic(free))
	// b may not sell a's product (ownership as in issue-license), but may map its own.
	b.Post("/v1/storefront/mappings", map[string]any{"payment_link": link, "product_id": product, "tier": "pro"}).ExpectError(t, 403, "product_id is owned by a different tenant")
	b.Post("/v1/storefront/mappings", map[string]any{"payment_link": link, "product_id": product + "-b", "tier": "pro"}).Expect(t, 200)

	id := fmt.Sprint(m["id"])
	b.Delete("/v1/storefront/mappings/"+id, nil).ExpectError(t, 404, "Mapping not found")
	list := a.Get("/v1/storefront/mappings").Expect(t, 200).JSON(t)["mappings"].([]any)
	if len(list) != 1 {
		t.Fatalf("a has %d mappings", len(list))
	}
	// A signed id is not a number (as "nope" is not): it names no mapping.
	a.Delete("/v1/storefront/mappings/+"+id, nil).ExpectError(t, 404, "Mapping not found")
	a.Delete("/v1/storefront/mappings/"+id, nil).ExpectBody(t, fmt.Sprintf(`{"id":%s,"deleted":true}`, id))
	a.Delete("/v1/storefront/mappings/"+id, nil).ExpectError(t, 404, "Mapping not found")
	a.Delete("/v1/storefront/mappings/nope", nil).ExpectError(t, 404, "Mapping not found")
	if body := string(a.Get("/v1/storefront/mappings").Expect(t, 200).Body); body != `{"mappings":[]}` {
		t.Fatalf("after delete %s", body)
	}
	// Deliveries list parameters.
	a.Get("/v1/storefront/deliveries?outcome=shipped").Expect(t, 400)
	a.Get("/v1/storefront/deliveries?limit=0").Expect(t, 400)
	a.Get("/v1/storefront/deliveries?offset=-1").Expect(t, 400)
}
