package e2e

import (
	"fmt"
	"net/url"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/devinfra/devnats"
)

// Invariant 10, its "exactly one event per change" half: 624 mixed changes made in
// parallel (issue, revoke, reactivate, terms, notes, activate, deactivate, releases,
// floating seats whose lease expires, storefront sales) while the events process is
// SIGKILLed and NATS is restarted each yield exactly one event in the log once everything
// is back, none lost and none doubled.
func TestEveryChangeHasExactlyOneEventThroughCrashesAndANATSRestart(t *testing.T) {
	t.Parallel()
	// Floating leases may last a second here, and lapsed seats are swept every 2 s.
	s := startStack(t, map[string]string{"LEASE_MIN_TTL": "1s", "LEASE_SWEEP_INTERVAL": "2s"})
	t.Cleanup(s.Stop)
	a := admin(t, s)
	sh := connectShop(t, a)

	const workers, licensesEach = 8, 6
	var done atomic.Int32
	total := workers * licensesEach
	keys := make([][]string, workers)
	floating := make([][]string, workers)
	sales := make([][]string, workers)
	releases := make([]string, workers)
	links := make([]string, workers)
	for w := range workers {
		releases[w], links[w] = product(fmt.Sprint("chaos-", w)), uniq("plink_")
		putPolicy(t, a, releases[w]+"-floating", "*", map[string]any{"floating": true, "lease_ttl_seconds": 1, "renew_after_seconds": 0})
		sh.mapping(map[string]any{"payment_link": links[w], "product_id": releases[w] + "-sold", "tier": "pro"})
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			// A client address per worker: each stays within its rate-limit tiers.
			a, c := admin(t, s), anon(t, s)
			prod := releases[w]
			for i := range licensesEach {
				key := issueLicense(t, a, lic(prod, "max_activations", 2))
				keys[w] = append(keys[w], key)
				a.Post("/v1/revoke-license", map[string]any{"key": key, "revoked": true}).Expect(t, 200)
				a.Post("/v1/revoke-license", map[string]any{"key": key, "revoked": false}).Expect(t, 200)
				a.Post("/v1/admin/update-notes", map[string]any{"key": key, "notes": "n"}).Expect(t, 200)
				a.Post("/v1/admin/update-license-terms", map[string]any{"key": key, "max_activations": 3}).Expect(t, 200)
				tok := seat(t, c, key, "host")
				c.Post("/v1/deactivate-license", map[string]any{"key": key, "token": tok}).Expect(t, 200)
				a.Post("/v1/register-release", map[string]any{"product_id": prod, "version": "1.0." + strconv.Itoa(i),
					"platform": "linux", "artifact_url": "https://example.com/a", "checksum": "sha256:00"}).Expect(t, 200)
				// A floating seat left to lapse: the sweeper deactivates it (lease_expired).
				fkey := issueLicense(t, a, lic(prod+"-floating", "max_activations", 1))
				floating[w] = append(floating[w], fkey)
				seat(t, c, fkey, "floater")
				// A sale: its license and its delivery.
				sale := uniq("evt_")
				sales[w] = append(sales[w], sale)
				sh.deliver(event(sale, "checkout.session.completed", newSession(links[w], uniq("buyer")+"@example.com"))).
					ExpectBody(t, `{"received":true}`)
				done.Add(1)
			}
		})
	}

	// Chaos while the changes run: the events process dies without a word, then NATS goes
	// away and comes back on the same port with its data; then the events process returns.
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	waitFor := func(n int32) {
		for done.Load() < n {
			select {
			case <-finished:
				return // a worker failed early; its error is reported
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	waitFor(int32(total / 4))
	s.Service("events").Kill()
	waitFor(int32(total / 2))
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
	<-finished
	if t.Failed() {
		return
	}

	// Each license: issued, revoked, reactivated, notes, terms, seat activated and
	// deactivated: seven events, exactly.
	for _, ks := range keys {
		for _, key := range ks {
			eventsOf(t, a, key, 7)
		}
	}
	// Each floating license: issued, its seat activated, then deactivated by its lease's
	// expiry.
	for _, ks := range floating {
		for _, key := range ks {
			if evs := eventsOf(t, a, key, 3); evs[2].Type != "seat.deactivated" || evs[2].Data["reason"] != "lease_expired" {
				t.Fatalf("the lapsed seat of %s: %+v", key, evs[2])
			}
		}
	}
	// Each sale: its license issued, and the delivery's outcome.
	for _, ids := range sales {
		for _, id := range ids {
			d := sh.await(id, outcome("issued"))
			if evs := eventsOf(t, a, d["license_key"].(string), 2); evs[0].Type != "license.issued" || evs[1].Type != "storefront.delivery" {
				t.Fatalf("the sale %s: %v", id, types(evs))
			}
		}
	}
	for _, prod := range releases {
		deadline := time.Now().Add(60 * time.Second)
		for {
			n := 0
			for _, e := range listEvents(t, admin(t, s), url.Values{"type": {"release.published"}, "limit": {"1000"}}).Events {
				if e.Data["product_id"] == prod {
					n++
				}
			}
			if n > licensesEach {
				t.Fatalf("%d release.published events of %s, want %d", n, prod, licensesEach)
			}
			if n == licensesEach {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d release.published events of %s after 60 s, want %d", n, prod, licensesEach)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

func mustURL(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
