package e2e

import (
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/devinfra/devnats"
	"github.com/keyhouse/keyhouse/pkg/webhook"
)

// Invariant 10, its delivery half: every event of changes made in parallel while the
// receiver is down, the events process is SIGKILLed mid-delivery and NATS restarts,
// reaches the receiver at least once after it comes back, each with a valid signature.
// The retry schedule is compressed (WEBHOOK_RETRY_FIRST): that retries go on for the
// whole 72 hours is the worker's test, on an injected clock.
func TestEveryEventReachesTheReceiverThroughCrashesAndANATSRestart(t *testing.T) {
	t.Parallel()
	s := startStack(t, map[string]string{"WEBHOOK_RETRY_FIRST": "200ms", "WEBHOOK_RETRY_MAX": "2s"})
	t.Cleanup(s.Stop)
	rc := newWebhookReceiver(t)
	// Down: every attempt fails until the end.
	if _, err := http.Post(rc.URL+"/control/break", "", nil); err != nil {
		t.Fatal(err)
	}
	a := admin(t, s)
	ep := a.Post("/v1/webhook-endpoints", map[string]any{"url": rc.URL + "/hook", "events": []string{"*"}}).Expect(t, 200).JSON(t)
	secret := ep["secret"].(string)

	const workers, licensesEach = 6, 8
	var wg sync.WaitGroup
	progress := make(chan struct{}, workers*licensesEach)
	for w := range workers {
		wg.Go(func() {
			a, c := admin(t, s), anon(t, s)
			prod := product(fmt.Sprint("webhook-chaos-", w))
			for i := range licensesEach {
				key := issueLicense(t, a, lic(prod, "max_activations", 2))
				a.Post("/v1/revoke-license", map[string]any{"key": key, "revoked": true}).Expect(t, 200)
				a.Post("/v1/revoke-license", map[string]any{"key": key, "revoked": false}).Expect(t, 200)
				seat(t, c, key, "host-"+strconv.Itoa(i))
				progress <- struct{}{}
			}
		})
	}
	waitFor := func(n int) {
		for range n {
			<-progress
		}
	}
	total := workers * licensesEach
	// Let deliveries be in flight (failing) when the events process dies.
	waitFor(total / 4)
	s.Service("events").Kill()
	waitFor(total / 4)
	port, err := strconv.Atoi(mustURL(t, s.NATS.URL()).Port())
	if err != nil {
		t.Fatal(err)
	}
	s.NATS.Stop()
	time.Sleep(time.Second)
	if s.NATS, err = devnats.Start(filepath.Join(s.Dir(), "nats"), port); err != nil {
		t.Fatal(err)
	}
	if err := s.RestartService(t.Context(), "events"); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	// Four events per license (issued, revoked, reactivated, seat activated).
	want := total * 4
	var logged []logEvent
	eventually(t, "every change in the log", func() bool {
		logged = listEvents(t, admin(t, s), url.Values{"limit": {"1000"}}).Events
		return len(logged) >= want
	})
	// The receiver comes back: every logged event arrives, signed. A delivery the killed
	// process had claimed comes back when its lease (a minute) runs out, so this waits
	// longer than the harness's usual minute.
	if _, err := http.Post(rc.URL+"/control/mend", "", nil); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(4 * time.Minute)
	for {
		got := map[string]bool{}
		for _, d := range rc.deliveries() {
			if d.status != http.StatusNoContent {
				continue
			}
			if err := webhook.Verify(d.header.Get("Keyhouse-Signature"), d.body, []byte(secret), webhook.DefaultTolerance, time.Now()); err != nil {
				t.Fatalf("a delivery does not verify: %v", err)
			}
			got[d.header.Get("Keyhouse-Event-Id")] = true
		}
		missing := 0
		for _, e := range logged {
			if !got[e.ID] {
				missing++
			}
		}
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d logged events never reached the receiver", missing, len(logged))
		}
		time.Sleep(250 * time.Millisecond)
	}
}
