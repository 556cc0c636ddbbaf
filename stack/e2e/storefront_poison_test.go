package e2e

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// The H1 incident, replayed: a Free tenant signs, to its own storefront webhook, an event
// whose customer_details.email is about 800 KB. It used to be accepted, and its outbox row
// (over NATS's 1 MiB max payload) stopped every later purchase of every tenant. Now the
// callback refuses it, naming the field, and 100 ordinary purchases from other tenants
// that follow each get a license and an email.
func TestStorefrontOversizedEventStallsNobody(t *testing.T) {
	t.Parallel()
	s, sink := storefrontStack(t)

	attacker := connectShop(t, newTenant(t, s))
	link := uniq("plink_")
	attacker.mapping(map[string]any{"payment_link": link, "product_id": product("h1-free"), "tier": "free"})
	huge := newSession(link, strings.Repeat("x", 800_000)+"@example.com")
	evID := uniq("evt_")
	attacker.deliver(event(evID, "checkout.session.completed", huge)).
		ExpectError(t, 400, "Invalid payload: data.object.customer_details.email must be at most 254 characters")
	if d := attacker.delivery(evID); d != nil {
		t.Fatalf("the refused event was recorded: %v", d)
	}

	// 100 purchases: 20 Free tenants (quota 5 each), 5 buyers each, sent 10 at a time.
	const tenants, perTenant = 20, 5
	type purchase struct {
		shop                 *shop
		link, eventID, buyer string
	}
	var purchases []purchase
	for range tenants {
		sh := connectShop(t, newTenant(t, s))
		link := uniq("plink_")
		sh.mapping(map[string]any{"payment_link": link, "product_id": product("h1"), "tier": "pro"})
		for range perTenant {
			purchases = append(purchases, purchase{shop: sh, link: link, eventID: uniq("evt_"), buyer: uniq("buyer") + "@example.com"})
		}
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 10)
	for _, p := range purchases {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			sess := newSession(p.link, p.buyer)
			if r := p.shop.deliver(event(p.eventID, "checkout.session.completed", sess)); r.Status != 200 {
				t.Errorf("purchase %s: status %d %s", p.eventID, r.Status, r.Body)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for _, p := range purchases {
		d := p.shop.await(p.eventID, outcome("issued", "sent"))
		key, _ := d["license_key"].(string)
		msgs := awaitMail(t, sink, p.buyer, 1)
		if len(msgs) != 1 || !strings.Contains(msgs[0].Body, "License key: "+key) {
			t.Fatalf("%s: %d emails, want 1 with key %s", p.buyer, len(msgs), key)
		}
	}
}

// A signed event the callback cannot accept is refused with a 400 that says what is wrong,
// not recorded, and never looks like an outage: invalid UTF-8, an id out of shape, an empty
// event id, a timestamp from the future.
func TestStorefrontRefusesSignedEventsItCannotAccept(t *testing.T) {
	t.Parallel()
	s, _ := storefrontStack(t)
	sh := connectShop(t, newTenant(t, s))
	link := uniq("plink_")
	sh.mapping(map[string]any{"payment_link": link, "product_id": product("refuse"), "tier": "pro"})
	future := time.Now().Add(time.Hour).Unix()

	good := newSession(link, "buyer@example.com")
	rawUTF8 := bytes.Replace(event(uniq("evt_"), "checkout.session.completed", good), []byte(good.ID), []byte(good.ID+"\xff\xfe"), 1)
	escaped := bytes.Replace(event(uniq("evt_"), "checkout.session.completed", good), []byte(good.ID), []byte(good.ID+`\udcff`), 1)
	emptyID := event("", "checkout.session.completed", good)
	futureEvent := bytes.Replace(event(uniq("evt_"), "checkout.session.completed", good),
		[]byte(`"type"`), []byte(fmt.Sprintf(`"created":%d,"type"`, future)), 1)
	for name, tc := range map[string]struct {
		body []byte
		want string
	}{
		"invalid UTF-8 in the session id": {rawUTF8, "Invalid payload: not valid UTF-8"},
		"escaped lone surrogate":          {escaped, "Invalid payload: data.object.id must be at most 255 printable ASCII characters without spaces"},
		"empty event id":                  {emptyID, "Invalid payload: id is required"},
		"created in the future":           {futureEvent, "Invalid payload: created is in the future"},
	} {
		if r := sh.deliver(tc.body); !r.IsError(400, tc.want) {
			t.Errorf("%s: %d %s, want 400 %s", name, r.Status, r.Body, errorBody(tc.want))
		}
	}
	if _, total := sh.deliveries(""); total != 0 {
		t.Fatalf("%d deliveries recorded, want none", total)
	}
}
