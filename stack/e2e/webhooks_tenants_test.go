package e2e

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// hangingReceiver stands for endpoints that accept the connection and never answer: each
// request is held until the test ends. It counts the requests it holds now and those
// Keyhouse gave up on (its 10 s attempt deadline closed the connection).
type hangingReceiver struct {
	*httptest.Server
	release   chan struct{}
	mu        sync.Mutex
	held, cut int
}

func newHangingReceiver(t *testing.T) *hangingReceiver {
	h := &hangingReceiver{release: make(chan struct{})}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Read the whole body first: the server then notices a closed connection.
		_, _ = io.Copy(io.Discard, r.Body)
		h.mu.Lock()
		h.held++
		h.mu.Unlock()
		cut := false
		select {
		case <-h.release:
		case <-r.Context().Done():
			cut = true
		}
		h.mu.Lock()
		h.held--
		if cut {
			h.cut++
		}
		h.mu.Unlock()
	}))
	t.Cleanup(h.Close)
	t.Cleanup(func() { close(h.release) }) // runs first: Close waits for the handlers
	return h
}

// state is how many requests the receiver holds now and how many were cut so far.
func (h *hangingReceiver) state() (held, cut int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.held, h.cut
}

// The probe's attack, hosted: two tenants fill all their 16 endpoints with receivers
// that accept the connection and never answer, and have a backlog at each; a third
// tenant's receiver answers at once. Its deliveries arrive while every attempt to the
// other two is still hanging: each of them gets at most 8 of the events process's 32
// slots, so slots stay free for everyone else. Before, their attempts took all 32, and
// the third tenant's deliveries waited until Keyhouse gave up on one of them (10 s).
func TestSlowTenantsDoNotHoldUpAnotherTenantsWebhooks(t *testing.T) {
	t.Parallel()
	// Local receivers stand for public ones.
	s := startStack(t, map[string]string{"MULTI_TENANT": "true", "WEBHOOK_ALLOW_PRIVATE_NETWORKS": "true"})
	t.Cleanup(s.Stop)
	hang := newHangingReceiver(t)
	const perTenant = 8 // docs/webhooks.md: a tenant's attempts at once, per events process
	attackers := []string{"slow1", "slow2"}
	for _, name := range attackers {
		c := newTenant(t, s)
		for i := range 16 {
			c.Post("/v1/webhook-endpoints", map[string]any{"url": fmt.Sprintf("%s/%s/%d", hang.URL, name, i), "events": []string{"*"}}).Expect(t, 200)
		}
		// Six events, 96 deliveries: a backlog for minutes of 10 s attempts.
		key := issueLicense(t, c, map[string]any{"tier": "pro", "product_id": product("webhook-" + name), "issued_to": name + "@example.com"})
		for i := range 5 {
			c.Post("/v1/admin/update-notes", map[string]any{"key": key, "notes": fmt.Sprint("note ", i)}).Expect(t, 200)
		}
	}
	eventually(t, "both slow tenants' receivers holding attempts", func() bool {
		held, _ := hang.state()
		return held >= len(attackers)*perTenant
	})

	b := newTenant(t, s)
	rc := newWebhookReceiver(t)
	b.Post("/v1/webhook-endpoints", map[string]any{"url": rc.URL + "/hook", "events": []string{"license.issued"}}).Expect(t, 200)
	prod := product("webhook-fast")
	// A round counts when the fast tenant's delivery arrived with no attempt to the slow
	// ones cut meanwhile. Before the fix no round could: the delivery needed a slot, and
	// only a cut attempt freed one. Now only a machine too slow to deliver within the slow
	// attempts' 10 s makes a round not count; the next starts on fresh attempts.
	for round := 1; ; round++ {
		_, cutBefore := hang.state()
		key := issueLicense(t, b, map[string]any{"tier": "pro", "product_id": prod, "issued_to": "fast@example.com"})
		eventually(t, "the fast tenant's delivery", func() bool {
			for _, d := range rc.deliveries() {
				if strings.Contains(string(d.body), key) {
					return true
				}
			}
			return false
		})
		if _, cut := hang.state(); cut == cutBefore {
			break
		}
		if round == 3 {
			t.Fatalf("in each of %d rounds the fast tenant's delivery arrived only after Keyhouse gave up on a hanging attempt", round)
		}
	}
}
