package e2e

import (
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/pkg/webhook"
	stripewebhook "github.com/stripe/stripe-go/v76/webhook"
)

// webhookReceiver is a real HTTP receiver: /hook records deliveries and answers 204, or
// 500 while broken; /control/break and /control/mend switch it (the browser scenario
// breaks it mid-way).
type webhookReceiver struct {
	*httptest.Server
	broken atomic.Bool
	mu     sync.Mutex
	got    []receivedDelivery
}

type receivedDelivery struct {
	header http.Header
	body   []byte
	status int
}

func newWebhookReceiver(t *testing.T) *webhookReceiver {
	rc := &webhookReceiver{}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/control/break":
			rc.broken.Store(true)
			return
		case "/control/mend":
			rc.broken.Store(false)
			return
		}
		body, _ := io.ReadAll(r.Body)
		status := http.StatusNoContent
		if rc.broken.Load() {
			status = http.StatusInternalServerError
		}
		rc.mu.Lock()
		rc.got = append(rc.got, receivedDelivery{r.Header.Clone(), body, status})
		rc.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *webhookReceiver) deliveries() []receivedDelivery {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return slices.Clone(rc.got)
}

// The endpoint routes over REST in hosted mode: private targets refused at creation, the
// 16-endpoint limit, the secret shown only at creation, fields in order, and another
// tenant's endpoint not found.
func TestWebhookEndpointRoutesHosted(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	a, b := newTenant(t, s), newTenant(t, s)
	for _, url := range []string{
		"http://127.0.0.1:9/hook", "http://localhost:9/hook", "http://[::1]:9/hook",
		"http://10.0.0.1/hook", "http://169.254.169.254/latest/meta-data", "http://[fe80::1]/hook",
	} {
		a.Post("/v1/webhook-endpoints", map[string]any{"url": url, "events": []string{"*"}}).
			ExpectError(t, 400, "Webhook URL must resolve to a public address")
	}
	a.Post("/v1/webhook-endpoints", map[string]any{"url": "ftp://192.0.2.10/hook", "events": []string{"*"}}).
		ExpectError(t, 400, "url must be an http:// or https:// URL")
	a.Post("/v1/webhook-endpoints", map[string]any{"url": "https://192.0.2.10/" + strings.Repeat("x", 2048), "events": []string{"*"}}).
		ExpectError(t, 400, "url must be at most 2048 characters")
	a.Post("/v1/webhook-endpoints", map[string]any{"url": "https://192.0.2.10/hook", "events": []string{"license.exploded"}}).
		ExpectError(t, 400, `events[0] must be an event type or a prefix of one ending in "."`)

	// 192.0.2.0/24 is documentation space: public by every rule, and nothing here sends
	// to it (this tenant changes nothing).
	var first map[string]any
	for i := 0; i < 16; i++ {
		r := a.Post("/v1/webhook-endpoints", map[string]any{"url": "https://192.0.2.10/hook", "events": []string{"license."}}).Expect(t, 200)
		if i == 0 {
			first = r.JSON(t)
			if got := strings.Join(r.Keys(t), ","); got != "id,url,events,description,enabled,disabled_reason,created_at,secret" {
				t.Fatalf("endpoint fields %s", got)
			}
		}
	}
	a.Post("/v1/webhook-endpoints", map[string]any{"url": "https://192.0.2.10/hook", "events": []string{"*"}}).
		ExpectError(t, 400, "A tenant may have at most 16 webhook endpoints: delete one first")
	id, secret := first["id"].(string), first["secret"].(string)
	if !strings.HasPrefix(id, "we_") || !strings.HasPrefix(secret, "whsec_") {
		t.Fatalf("created %v", first)
	}
	list := a.Get("/v1/webhook-endpoints").Expect(t, 200)
	if strings.Contains(string(list.Body), secret) || strings.Contains(string(list.Body), `"secret"`) {
		t.Fatal("the list shows a secret")
	}
	b.Get("/v1/webhook-endpoints").ExpectBody(t, `{"endpoints":[]}`)
	b.Get("/v1/webhook-endpoints/"+id+"/deliveries").ExpectError(t, 404, "Webhook endpoint not found")
	b.Post("/v1/webhook-endpoints/"+id+"/update", map[string]any{"enabled": false}).ExpectError(t, 404, "Webhook endpoint not found")
	b.Post("/v1/webhook-endpoints/"+id+"/roll-secret", map[string]any{}).ExpectError(t, 404, "Webhook endpoint not found")
	b.Post("/v1/webhook-endpoints/"+id+"/ping", map[string]any{}).ExpectError(t, 404, "Webhook endpoint not found")
	b.Delete("/v1/webhook-endpoints/"+id, nil).ExpectError(t, 404, "Webhook endpoint not found")
	b.Post("/v1/events/evt_unknown/redeliver", map[string]any{"endpoint_id": id}).ExpectError(t, 404, "Event not found")

	a.Post("/v1/webhook-endpoints/"+id+"/update", map[string]any{"url": "http://169.254.169.254/"}).
		ExpectError(t, 400, "Webhook URL must resolve to a public address")
	a.Post("/v1/webhook-endpoints/"+id+"/roll-secret", map[string]any{"expire_old_after_seconds": 604801}).
		ExpectError(t, 400, "expire_old_after_seconds must be between 0 and 604800")
	rolled := a.Post("/v1/webhook-endpoints/"+id+"/roll-secret", map[string]any{}).Expect(t, 200).JSON(t)
	if s, _ := rolled["secret"].(string); !strings.HasPrefix(s, "whsec_") || s == secret {
		t.Fatalf("rolled %v", rolled)
	}
	a.Get("/v1/webhook-endpoints/"+id+"/deliveries?status=done").ExpectError(t, 400, "status must be pending, succeeded or failed")
	a.Get("/v1/webhook-endpoints/"+id+"/deliveries?starting_after=whd_none").ExpectError(t, 400, "starting_after must be a delivery of this endpoint")
	// A disabled endpoint is a state in the way, a 409 as a disabled storefront webhook's,
	// for a ping and a redelivery alike; enabled again, it takes both.
	key := issueLicense(t, a, lic(product("disabled-endpoint")))
	eventID := eventsOf(t, a, key, 1)[0].ID
	a.Post("/v1/webhook-endpoints/"+id+"/update", map[string]any{"enabled": false}).Expect(t, 200)
	a.Post("/v1/webhook-endpoints/"+id+"/ping", map[string]any{}).ExpectError(t, 409, "Webhook endpoint is disabled")
	a.Post("/v1/events/"+eventID+"/redeliver", map[string]any{"endpoint_id": id}).ExpectError(t, 409, "Webhook endpoint is disabled")
	a.Post("/v1/webhook-endpoints/"+id+"/update", map[string]any{"enabled": true}).Expect(t, 200)
	a.Post("/v1/webhook-endpoints/"+id+"/ping", map[string]any{}).Expect(t, 200)
	a.Post("/v1/events/"+eventID+"/redeliver", map[string]any{"endpoint_id": id}).Expect(t, 200)
	a.Delete("/v1/webhook-endpoints/"+id, nil).ExpectBody(t, `{"id":"`+id+`","deleted":true}`)
}

// Self-hosted, end to end through the whole stack: a change made through the API reaches
// a real receiver, signed; a ping too; the deliveries show their attempts.
func TestWebhookDeliveredEndToEnd(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	adm := admin(t, s)
	rc := newWebhookReceiver(t)
	ep := adm.Post("/v1/webhook-endpoints", map[string]any{"url": rc.URL + "/hook", "events": []string{"license.issued", "license.revoked"}, "description": "e2e"}).Expect(t, 200).JSON(t)
	id, secret := ep["id"].(string), ep["secret"].(string)
	key := issueLicense(t, adm, map[string]any{"tier": "pro", "product_id": product("webhooks"), "issued_to": "webhooks@example.com"})
	ping := adm.Post("/v1/webhook-endpoints/"+id+"/ping", map[string]any{}).Expect(t, 200).JSON(t)
	pingID := ping["event_id"].(string)

	var issued, pinged *receivedDelivery
	eventually(t, "the license.issued and ping deliveries", func() bool {
		issued, pinged = nil, nil
		for _, d := range rc.deliveries() {
			switch {
			case strings.Contains(string(d.body), `"type":"license.issued"`) && strings.Contains(string(d.body), key):
				issued = &d
			case d.header.Get("Keyhouse-Event-Id") == pingID:
				pinged = &d
			}
		}
		return issued != nil && pinged != nil
	})
	for _, d := range []*receivedDelivery{issued, pinged} {
		if err := webhook.Verify(d.header.Get("Keyhouse-Signature"), d.body, []byte(secret), webhook.DefaultTolerance, time.Now()); err != nil {
			t.Fatalf("signature of %s: %v", d.body, err)
		}
		// What webhooks.md tells a stripe-go user: ValidatePayload verifies a delivery,
		// ConstructEvent does not (it reads the body as a Stripe event).
		if err := stripewebhook.ValidatePayload(d.body, d.header.Get("Keyhouse-Signature"), secret); err != nil {
			t.Fatalf("stripe-go ValidatePayload of %s: %v", d.body, err)
		}
		if _, err := stripewebhook.ConstructEvent(d.body, d.header.Get("Keyhouse-Signature"), secret); err == nil {
			t.Fatalf("stripe-go ConstructEvent took %s; webhooks.md says it does not", d.body)
		}
		if d.header.Get("Content-Type") != "application/json" {
			t.Fatalf("content type %q", d.header.Get("Content-Type"))
		}
	}
	if !strings.HasPrefix(string(pinged.body), `{"id":"`+pingID+`","type":"ping","created_at":"`) || !strings.HasSuffix(string(pinged.body), `"data":{}}`) {
		t.Fatalf("ping body %s", pinged.body)
	}
	// Other tests issue licenses on this shared stack too: look for the ping's delivery.
	var d map[string]any
	eventually(t, "the ping's delivery succeeded", func() bool {
		// Each look from an address of its own: waiting must not spend one Admin-Info budget.
		dels, _ := newClient(t, adm.Base, adm.Token).Get("/v1/webhook-endpoints/"+id+"/deliveries?status=succeeded&limit=1000").Expect(t, 200).JSON(t)["deliveries"].([]any)
		for _, x := range dels {
			if m := x.(map[string]any); m["event_id"] == pingID {
				d = m
			}
		}
		return d != nil
	})
	attempts := d["attempts"].([]any)
	a0 := attempts[0].(map[string]any)
	if d["status"] != "succeeded" || d["next_attempt_at"] != nil || a0["status_code"] != 204.0 || a0["error"] != nil {
		t.Fatalf("delivery %v", d)
	}
	adm.Delete("/v1/webhook-endpoints/"+id, nil).Expect(t, 200)
}

// The Webhooks page as a person uses it: create an endpoint and see its secret once, ping
// it and watch the delivery succeed, break the receiver and see the failed attempt, mend
// it, learn that a ping cannot be redelivered, and ping again.
func TestConsoleWebhooksInTheBrowser(t *testing.T) {
	s := selfHosted(t)
	rc := newWebhookReceiver(t)
	key := issueLicense(t, admin(t, s), map[string]any{"tier": "pro", "product_id": product("webhooks-console"), "issued_to": "console@example.com"})
	out := browse(t, "webhooks", map[string]any{"base": s.URL, "key": s.AdminKey, "ip": browserIP(t, s), "receiver": rc.URL + "/hook", "control": rc.URL + "/control", "license": key})
	secret, failed := str(out, "secret"), str(out, "failedEvent")
	var ok200, failed500, issued int
	for _, d := range rc.deliveries() {
		if strings.Contains(string(d.body), `"type":"license.issued"`) && strings.Contains(string(d.body), key) {
			issued++
		}
		if err := webhook.Verify(d.header.Get("Keyhouse-Signature"), d.body, []byte(secret), webhook.DefaultTolerance, time.Now()); err != nil {
			t.Fatalf("a delivery the browser caused does not verify with the secret it showed: %v", err)
		}
		switch {
		case d.status == 500 && d.header.Get("Keyhouse-Event-Id") == failed:
			failed500++
		case d.status != 500:
			ok200++ // the first ping, the ping after the mend, the license's event (and the failed ping's own retry, if it came already)
		}
	}
	if ok200 < 3 || failed500 < 1 || issued != 1 {
		t.Fatalf("the receiver saw %d good deliveries, %d failed, %d of the license's event", ok200, failed500, issued)
	}
	// The browser deleted the endpoint after its confirmation.
	admin(t, s).Delete("/v1/webhook-endpoints/"+str(out, "endpoint"), nil).Expect(t, 404)
}

// An endpoint's description is cleared with "" (null in every answer after); a pending
// delivery of a disabled endpoint shows no next attempt (none is made while it is
// disabled), and shows one again once the endpoint is enabled.
func TestWebhookEndpointDescriptionClearsAndADisabledEndpointHasNoNextAttempt(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	adm := admin(t, s)
	rc := newWebhookReceiver(t)
	rc.broken.Store(true)
	if d := adm.Post("/v1/webhook-endpoints", map[string]any{"url": rc.URL + "/hook", "events": []string{"*"}, "description": ""}).Expect(t, 200).JSON(t); d["description"] != nil {
		t.Fatalf(`created with description "": %v`, d)
	} else {
		adm.Delete("/v1/webhook-endpoints/"+d["id"].(string), nil).Expect(t, 200)
	}
	id := adm.Post("/v1/webhook-endpoints", map[string]any{"url": rc.URL + "/hook", "events": []string{"license.issued"}, "description": "CRM"}).Expect(t, 200).JSON(t)["id"].(string)
	defer adm.Delete("/v1/webhook-endpoints/"+id, nil)
	update := func(body map[string]any) map[string]any {
		return adm.Post("/v1/webhook-endpoints/"+id+"/update", body).Expect(t, 200).JSON(t)
	}
	if d := update(map[string]any{"description": nil}); d["description"] != "CRM" {
		t.Fatalf("null kept nothing: %v", d)
	}
	if d := update(map[string]any{"description": ""}); d["description"] != nil {
		t.Fatalf(`"" did not clear: %v`, d)
	}
	key := issueLicense(t, adm, lic(product("webhooks-disabled")))
	eventID := eventsOf(t, adm, key, 1)[0].ID
	// Other tests issue licenses on this shared stack too: look for this one's delivery.
	pending := func() map[string]any {
		dels, _ := newClient(t, adm.Base, adm.Token).Get("/v1/webhook-endpoints/"+id+"/deliveries?status=pending&limit=1000").Expect(t, 200).JSON(t)["deliveries"].([]any)
		for _, x := range dels {
			if d := x.(map[string]any); d["event_id"] == eventID {
				return d
			}
		}
		return nil
	}
	eventually(t, "the license.issued delivery failing", func() bool {
		for _, d := range rc.deliveries() {
			if strings.Contains(string(d.body), key) {
				return pending() != nil
			}
		}
		return false
	})
	update(map[string]any{"enabled": false})
	if d := pending(); d == nil || d["next_attempt_at"] != nil {
		t.Fatalf("the pending delivery of the disabled endpoint: %v", d)
	}
	update(map[string]any{"enabled": true})
	if d := pending(); d == nil || d["next_attempt_at"] == nil {
		t.Fatalf("the pending delivery once the endpoint is enabled: %v", d)
	}
}
