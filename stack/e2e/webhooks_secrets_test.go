package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/pkg/webhook"
)

// pingSigners pings the endpoint, waits for the real receiver to get the ping, and
// reports which of secrets verify it and how many v1 signatures it carries.
func pingSigners(t *testing.T, c *Client, rc *webhookReceiver, id string, secrets ...string) ([]bool, int) {
	t.Helper()
	pingID := c.Post("/v1/webhook-endpoints/"+id+"/ping", map[string]any{}).Expect(t, 200).JSON(t)["event_id"].(string)
	var got *receivedDelivery
	eventually(t, "the ping's delivery", func() bool {
		for _, d := range rc.deliveries() {
			if d.header.Get("Keyhouse-Event-Id") == pingID {
				got = &d
			}
		}
		return got != nil
	})
	header := got.header.Get("Keyhouse-Signature")
	signs := make([]bool, len(secrets))
	for i, secret := range secrets {
		signs[i] = webhook.Verify(header, got.body, []byte(secret), webhook.DefaultTolerance, time.Now()) == nil
	}
	return signs, strings.Count(header, "v1=")
}

// A second roll within the first roll's overlap keeps the first roll's secret signing:
// every secret a roll kept signs until the end its roll promised (addendum §11: one v1 per
// live secret), and a roll that keeps none ends only the secret it replaces.
func TestWebhookRollSecretKeepsEveryPromisedSecret(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	c := admin(t, s)
	rc := newWebhookReceiver(t)
	ep := c.Post("/v1/webhook-endpoints", map[string]any{"url": rc.URL + "/hook", "events": []string{"release.unpublished"}}).Expect(t, 200).JSON(t)
	id, s0 := ep["id"].(string), ep["secret"].(string)
	t.Cleanup(func() { c.Delete("/v1/webhook-endpoints/"+id, nil) })
	roll := func(body map[string]any) string {
		t.Helper()
		return c.Post("/v1/webhook-endpoints/"+id+"/roll-secret", body).Expect(t, 200).JSON(t)["secret"].(string)
	}
	s1 := roll(map[string]any{})                                 // s0 signs for the default day
	s2 := roll(map[string]any{"expire_old_after_seconds": 3600}) // s1 for an hour
	if signs, v1s := pingSigners(t, c, rc, id, s0, s1, s2); !signs[0] || !signs[1] || !signs[2] || v1s != 3 {
		t.Fatalf("after two rolls: s0, s1, s2 sign %v, %d v1; want all three, 3 v1", signs, v1s)
	}
	s3 := roll(map[string]any{"expire_old_after_seconds": 0}) // s2 ends now
	if signs, v1s := pingSigners(t, c, rc, id, s0, s1, s2, s3); !signs[0] || !signs[1] || signs[2] || !signs[3] || v1s != 3 {
		t.Fatalf("after a roll keeping none: s0, s1, s2, s3 sign %v, %d v1; want s0, s1 and s3", signs, v1s)
	}
}

// Rolls racing through two gateways, each reaching an events process of its own, leave at
// most four old secrets signing: the rest are refused with a 400 naming the field and
// change nothing, and a roll keeping none still goes through.
func TestWebhookRollSecretLimitAcrossReplicas(t *testing.T) {
	t.Parallel()
	s := startStack(t, nil)
	t.Cleanup(s.Stop)
	second := secondGateway(t, s, "events", "EVENTS_ADDR")
	c := admin(t, s)
	rc := newWebhookReceiver(t)
	ep := c.Post("/v1/webhook-endpoints", map[string]any{"url": rc.URL + "/hook", "events": []string{"release.unpublished"}}).Expect(t, 200).JSON(t)
	id := ep["id"].(string)
	const refusal = `{"error":"Too many old secrets still signing (at most 4): roll with expire_old_after_seconds 0, or after one expires"}`
	var mu sync.Mutex
	secrets := []string{ep["secret"].(string)}
	var refused int
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each from an address of its own, alternating gateways.
			r, err := newClient(t, []string{s.URL, second}[i%2], s.AdminKey).Try("POST", "/v1/webhook-endpoints/"+id+"/roll-secret", map[string]any{})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				t.Error(err)
			case r.Status == 200:
				var out struct{ Secret string }
				if err := json.Unmarshal(r.Body, &out); err != nil || !strings.HasPrefix(out.Secret, "whsec_") {
					t.Errorf("roll answered %s", r.Body)
				}
				secrets = append(secrets, out.Secret)
			case r.Status == 400 && string(r.Body) == refusal:
				refused++
			default:
				t.Errorf("roll answered %d %s", r.Status, r.Body)
			}
		}()
	}
	wg.Wait()
	if len(secrets) != 5 || refused != 8 {
		t.Fatalf("%d rolls went through and %d were refused; want 4 and 8", len(secrets)-1, refused)
	}
	signs, v1s := pingSigners(t, c, rc, id, secrets...)
	for i, ok := range signs {
		if !ok {
			t.Errorf("secret %d of %d does not sign", i, len(secrets))
		}
	}
	if v1s != 5 {
		t.Errorf("%d v1, want 5", v1s)
	}
	newClient(t, second, s.AdminKey).Post("/v1/webhook-endpoints/"+id+"/roll-secret", map[string]any{"expire_old_after_seconds": 0}).Expect(t, 200)
}

// A ping goes to its endpoint only and is in no log: redeliver, for logged events, answers
// it as GET /v1/events/{id} does (404 Event not found), to another endpoint or its own,
// and queues nothing.
func TestWebhookPingIsNotRedelivered(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	c := admin(t, s)
	rc := newWebhookReceiver(t)
	a := c.Post("/v1/webhook-endpoints", map[string]any{"url": rc.URL + "/a", "events": []string{"release.unpublished"}}).Expect(t, 200).JSON(t)["id"].(string)
	b := c.Post("/v1/webhook-endpoints", map[string]any{"url": rc.URL + "/b", "events": []string{"license.revoked"}}).Expect(t, 200).JSON(t)["id"].(string)
	t.Cleanup(func() {
		c.Delete("/v1/webhook-endpoints/"+a, nil)
		c.Delete("/v1/webhook-endpoints/"+b, nil)
	})
	pingID := c.Post("/v1/webhook-endpoints/"+a+"/ping", nil).Expect(t, 200).JSON(t)["event_id"].(string)
	c.Get("/v1/events/"+pingID).ExpectError(t, 404, "Event not found")
	c.Post("/v1/events/"+pingID+"/redeliver", map[string]any{"endpoint_id": b}).ExpectError(t, 404, "Event not found")
	c.Post("/v1/events/"+pingID+"/redeliver", map[string]any{"endpoint_id": a}).ExpectError(t, 404, "Event not found")
	// A redelivery is queued before redeliver answers: none is listed, none will be sent.
	// The stack is shared: other tests' revocations and unpublished releases reach these
	// endpoints too, so only the ping's deliveries are counted.
	if n := deliveriesOf(t, c, b, pingID); n != 0 {
		t.Fatalf("endpoint b has %d deliveries of the ping, want none", n)
	}
	if n := deliveriesOf(t, c, a, pingID); n != 1 {
		t.Fatalf("endpoint a has %d deliveries of the ping, want its own one", n)
	}
}

// deliveriesOf counts the deliveries of eventID an endpoint lists.
func deliveriesOf(t *testing.T, c *Client, endpoint, eventID string) int {
	t.Helper()
	n := 0
	for _, d := range c.Get("/v1/webhook-endpoints/"+endpoint+"/deliveries?limit=1000").Expect(t, 200).JSON(t)["deliveries"].([]any) {
		if d.(map[string]any)["event_id"] == eventID {
			n++
		}
	}
	return n
}

// checkRollsMade holds the rolls made on an endpoint to made, from what a user sees: each roll
// that keeps the secret it replaces takes one of the MaxOldSecrets (4) slots, so after
// made such rolls exactly 4-made more go through and the next is the 400 of the limit.
func checkRollsMade(t *testing.T, c *Client, id string, made int) {
	t.Helper()
	keep := map[string]any{"expire_old_after_seconds": 3600}
	for i := made; i < 4; i++ {
		if r := c.Post("/v1/webhook-endpoints/"+id+"/roll-secret", keep); r.Status != 200 {
			t.Fatalf("roll %d of 4 answered %d %s: more than %d rolls were made", i+1, r.Status, r.Body, made)
		}
	}
	c.Post("/v1/webhook-endpoints/"+id+"/roll-secret", keep).ExpectError(t, 400,
		"Too many old secrets still signing (at most 4): roll with expire_old_after_seconds 0, or after one expires")
}

// Rolling a webhook secret honours the Idempotency-Key as a create does (addendum §8), in
// both modes: a retry with the same key and body answers the first answer byte for byte,
// its new secret included, and rolls nothing (no second old-secret slot used); another
// body with that key is a 409; a key that cannot be honoured is a 400 and rolls nothing.
func TestWebhookRollSecretHonoursIdempotencyKey(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"self", "hosted"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			s := sharedStack(t, mode)
			c, url := admin(t, s), "http://127.0.0.1:9/idem-roll"
			if mode == "hosted" {
				c, _ = hostedTenant(t, s)
				url = "https://192.0.2.10/idem-roll"
			}
			ep := c.Post("/v1/webhook-endpoints", map[string]any{"url": url, "events": []string{"release.unpublished"}}).Expect(t, 200).JSON(t)
			id := ep["id"].(string)
			t.Cleanup(func() { c.Delete("/v1/webhook-endpoints/"+id, nil) })
			path := "/v1/webhook-endpoints/" + id + "/roll-secret"
			body := map[string]any{"expire_old_after_seconds": 3600}
			idem := uniq("roll-")
			first := c.Do(http.MethodPost, path, body, "Idempotency-Key", idem).Expect(t, 200)
			if sec, _ := first.JSON(t)["secret"].(string); !strings.HasPrefix(sec, "whsec_") || sec == ep["secret"] {
				t.Fatalf("the roll shows no new secret: %s", first.Body)
			}
			c.Do(http.MethodPost, path, body, "Idempotency-Key", idem).ExpectBody(t, string(first.Body))
			c.Do(http.MethodPost, path, map[string]any{"expire_old_after_seconds": 60}, "Idempotency-Key", idem).
				ExpectError(t, 409, "Idempotency-Key reused with a different request")
			c.Do(http.MethodPost, path, body, "Idempotency-Key", "   ").ExpectError(t, 400, "Idempotency-Key must not be blank")
			postKeyTwice(t, c, path, body).ExpectError(t, 400, "Idempotency-Key must be sent once")
			checkRollsMade(t, c, id, 1)
		})
	}
}

// Concurrency is correctness: the same roll with the same Idempotency-Key sent at once
// through two gateways, each on its own events replica, rolls once, and every request
// answers that roll's secret.
func TestWebhookRollSecretWithAKeyRollsOnceAcrossReplicas(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	second := secondGateway(t, s, "events", "EVENTS_ADDR")
	tenant, _ := hostedTenant(t, s)
	clients := []*Client{tenant, newClient(t, second, tenant.Token)}
	id := tenant.Post("/v1/webhook-endpoints", map[string]any{"url": "https://192.0.2.10/roll-race", "events": []string{"release.unpublished"}}).
		Expect(t, 200).JSON(t)["id"].(string)
	idem := uniq("roll-race-")
	answers := make([]*Response, 8)
	var wg sync.WaitGroup
	for i := range answers {
		wg.Go(func() {
			r, err := clients[i%len(clients)].Try(http.MethodPost, "/v1/webhook-endpoints/"+id+"/roll-secret",
				map[string]any{"expire_old_after_seconds": 3600}, "Idempotency-Key", idem)
			if err != nil {
				t.Error(err)
				return
			}
			answers[i] = r
		})
	}
	wg.Wait()
	for i, r := range answers {
		if r == nil {
			t.Fatalf("answer %d missing", i)
		}
		if r.Status != 200 || string(r.Body) != string(answers[0].Body) {
			t.Fatalf("answer %d differs from the first\n got  %d %s\n want %d %s", i, r.Status, r.Body, answers[0].Status, answers[0].Body)
		}
	}
	checkRollsMade(t, tenant, id, 1)
}
