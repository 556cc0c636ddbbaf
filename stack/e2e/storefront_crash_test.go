package e2e

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/devinfra/mailtest"
)

// Failures on the way, on a self-hosted stack of its own (it stops its SMTP server and
// kills its storefront): an SMTP outage, a crash between the issue and the email, and
// two storefront replicas racing on one checkout session. Each ends with one license and
// one email.
func TestStorefrontFailuresStillFulfillOnce(t *testing.T) {
	t.Parallel()
	sink := mailtest.New(t)
	s := startStack(t, map[string]string{
		"EMAIL_PROVIDER": "smtp", "SMTP_URL": sink.URL(), "EMAIL_FROM": "shop@example.com",
	})
	defer s.Stop()
	sh := connectShop(t, admin(t, s))
	product, link := product("sf-crash"), uniq("plink_")
	sh.mapping(map[string]any{"payment_link": link, "product_id": product, "tier": "pro", "seats": 2})

	t.Run("SMTP down then up: failed, then sent, one license", func(t *testing.T) {
		sh.t = t
		sink.Stop()
		buyer := uniq("down") + "@example.com"
		evID := uniq("evt_")
		payload := event(evID, "checkout.session.completed", newSession(link, buyer))
		sh.deliver(payload).Expect(t, 200)
		d := sh.await(evID, outcome("issued", "failed"))
		if e, _ := d["error"].(string); !strings.HasPrefix(e, "Email delivery failed: ") || d["license_key"] == nil {
			t.Fatalf("delivery %v", d)
		}
		if err := sink.Restart(); err != nil {
			t.Fatal(err)
		}
		// The worker retries with backoff; Stripe's redelivery of the event (the vendor's
		// "resend" in the dashboard) also resends it, without issuing again.
		sh.deliver(payload).Expect(t, 200)
		sent := sh.await(evID, outcome("issued", "sent"))
		if sent["license_key"] != d["license_key"] || sent["error"] != nil {
			t.Fatalf("after recovery %v, before %v", sent, d)
		}
		got := awaitMail(t, sink, buyer, 1)
		time.Sleep(2 * time.Second) // a retry still in flight would land by now
		if n := len(sink.To(buyer)); n != 1 || !strings.Contains(got[0].Body, d["license_key"].(string)) {
			t.Fatalf("%d emails, want 1 with the key", n)
		}
		if n := len(licensesOf(t, sh.c, product)); n != 1 {
			t.Fatalf("%d licenses, want 1", n)
		}
	})

	t.Run("worker killed between issue and email: the email goes out once", func(t *testing.T) {
		sh.t = t
		before := len(licensesOf(t, sh.c, product))
		sink.Hold()
		buyer := uniq("crash") + "@example.com"
		evID := uniq("evt_")
		sh.deliver(event(evID, "checkout.session.completed", newSession(link, buyer))).Expect(t, 200)
		if !sink.Held(60 * time.Second) {
			t.Fatal("the worker never reached the SMTP server")
		}
		// Issued and recorded; the email is in the SMTP conversation, not yet accepted.
		d := sh.await(evID, outcome("issued", "pending"))
		s.Service("storefront").Kill()
		sink.Release()
		if err := s.RestartService(context.Background(), "storefront"); err != nil {
			t.Fatal(err)
		}
		// JetStream redelivers the unacknowledged message after its ack wait.
		sent := sh.await(evID, outcome("issued", "sent"))
		if sent["license_key"] != d["license_key"] {
			t.Fatalf("after restart %v, before %v", sent, d)
		}
		got := awaitMail(t, sink, buyer, 1)
		time.Sleep(2 * time.Second)
		if n := len(sink.To(buyer)); n != 1 || !strings.Contains(got[0].Body, d["license_key"].(string)) {
			t.Fatalf("%d emails, want 1 with the key", n)
		}
		if n := len(licensesOf(t, sh.c, product)); n != before+1 {
			t.Fatalf("%d licenses, want %d", n, before+1)
		}
	})

	t.Run("two replicas, ten event ids for one session at once: one license, one email", func(t *testing.T) {
		sh.t = t
		if _, err := s.StartServiceReplica(context.Background(), "storefront", nil); err != nil {
			t.Fatal(err)
		}
		before := len(licensesOf(t, sh.c, product))
		buyer := uniq("race") + "@example.com"
		sess := newSession(link, buyer)
		ids := make([]string, 10)
		var wg sync.WaitGroup
		for i := range ids {
			ids[i] = uniq("evt_")
			wg.Add(1)
			go func() {
				defer wg.Done()
				sh.deliver(event(ids[i], "checkout.session.completed", sess)).Expect(t, 200)
			}()
		}
		wg.Wait()
		var key any
		for _, id := range ids {
			d := sh.await(id, outcome("issued", "sent"))
			if key == nil {
				key = d["license_key"]
			}
			if d["license_key"] != key {
				t.Fatalf("event %s got %v, another %v", id, d["license_key"], key)
			}
		}
		awaitMail(t, sink, buyer, 1)
		time.Sleep(2 * time.Second)
		if n := len(sink.To(buyer)); n != 1 {
			t.Fatalf("%d emails, want 1", n)
		}
		if n := len(licensesOf(t, sh.c, product)); n != before+1 {
			t.Fatalf("%d licenses, want %d", n, before+1)
		}
	})
}

// Self-hosted without mail configuration the email is only logged (email_status
// "logged"), with the buyer's address masked and the credentials it carries (the license
// key, the portal link) redacted.
func TestStorefrontLogProvider(t *testing.T) {
	t.Parallel()
	s := startStack(t, nil)
	defer s.Stop()
	sh := connectShop(t, admin(t, s))
	product, ref := product("sf-log"), uniq("ref-")
	sh.mapping(map[string]any{"service_ref": ref, "product_id": product, "tier": "free"})
	buyer := uniq("logged") + "@example.com"
	sess := newSession("", buyer)
	sess.ServiceRef = ref
	evID := uniq("evt_")
	sh.deliver(event(evID, "checkout.session.completed", sess)).Expect(t, 200)
	d := sh.await(evID, outcome("issued", "logged"))
	logs := string(readFile(t, s.LogPath("storefront")))
	if !strings.Contains(logs, "License key: [redacted]") || !strings.Contains(logs, "devices: [redacted]") {
		t.Fatalf("the logged email is not there, or not redacted:\n%s", logs)
	}
	if strings.Contains(logs, d["license_key"].(string)) || strings.Contains(logs, "/portal/") {
		t.Fatalf("the storefront log holds the license key or the portal link:\n%s", logs)
	}
	if strings.Contains(logs, buyer) {
		t.Fatal("the storefront log holds the buyer's address")
	}
}
