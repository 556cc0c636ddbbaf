package webhooks

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/devinfra/testkit"
	"github.com/keyhouse/keyhouse/pkg/seal"
)

// The receivers of docs/webhooks.md (docs/examples/webhook-receiver), run as documented
// against real deliveries: each verifies a delivery, recognizes a redelivery as a
// duplicate, and refuses a delivery signed with another secret (an attempt that failed
// with its 400).
func TestDocumentedReceiversVerifyRealDeliveries(t *testing.T) {
	testkit.Integration(t)
	examples, err := filepath.Abs("../../../../docs/examples/webhook-receiver")
	if err != nil {
		t.Fatal(err)
	}
	goBinary := filepath.Join(t.TempDir(), "receiver")
	if out, err := exec.Command("go", "build", "-o", goBinary, filepath.Join(examples, "receiver.go")).CombinedOutput(); err != nil {
		t.Fatalf("build the Go receiver: %v %s", err, out)
	}
	receivers := map[string][]string{
		"go":     {goBinary},
		"node":   {testkit.RequireTool(t, "node"), filepath.Join(examples, "receiver.js")},
		"python": {testkit.RequireTool(t, "/usr/bin/python3"), filepath.Join(examples, "receiver.py")},
	}
	for name, argv := range receivers {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			// The receivers check the signature's age on the real clock.
			f.clock.now = time.Now()
			f.worker.Now = time.Now
			secret := NewSecret()
			url, lines := startReceiver(t, argv, secret)
			good := f.endpointWithSecret("t1", url, secret, "license.")
			wrong := f.endpointWithSecret("t1", url, NewSecret(), "seat.")

			f.event("t1", "evt_first", "license.issued")
			f.worker.RunOnce(context.Background())
			expectLine(t, lines, "verified evt_first license.issued")

			if _, err := f.store.Enqueue(context.Background(), "t1", good.ID, "evt_first", "license.issued", f.deliveryBody(good.ID), true, time.Now()); err != nil {
				t.Fatal(err)
			}
			f.worker.RunOnce(context.Background())
			expectLine(t, lines, "duplicate evt_first")

			f.event("t1", "evt_second", "seat.activated")
			f.worker.RunOnce(context.Background())
			expectLine(t, lines, "rejected")
			d := f.deliveries("t1", wrong.ID)[0]
			if d.Status != StatusPending || *d.Attempts[0].StatusCode != 400 {
				t.Fatalf("a refused delivery: %+v", d)
			}
		})
	}
}

// endpointWithSecret creates an endpoint with a given secret (the receiver knows it first).
func (f *fixture) endpointWithSecret(tenant, url, secret string, events ...string) *Endpoint {
	f.t.Helper()
	sealed, err := seal.Seal(f.keys.k, seal.PurposeEndpointSecret, []byte(secret))
	if err != nil {
		f.t.Fatal(err)
	}
	ep, err := createEndpoint(f.store, tenant, NewEndpoint{URL: url, Events: events, SealedSecret: sealed}, f.clock.Now())
	if err != nil {
		f.t.Fatal(err)
	}
	return ep
}

// deliveryBody is the body of the endpoint's first delivery.
func (f *fixture) deliveryBody(endpointID string) []byte {
	var body []byte
	if err := f.store.db.QueryRow(context.Background(), `SELECT body FROM webhook_deliveries WHERE endpoint_id = $1 ORDER BY seq LIMIT 1`, endpointID).Scan(&body); err != nil {
		f.t.Fatal(err)
	}
	return body
}

// startReceiver runs a receiver on a free port and returns its URL and its output lines.
func startReceiver(t *testing.T, argv []string, secret string) (string, <-chan string) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "WEBHOOK_SECRET="+secret)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	first := expectPrefix(t, lines, "listening on ")
	return "http://127.0.0.1:" + strings.TrimPrefix(first, "listening on ") + "/webhooks", lines
}

func expectPrefix(t *testing.T, lines <-chan string, prefix string) string {
	t.Helper()
	select {
	case l, ok := <-lines:
		if !ok || !strings.HasPrefix(l, prefix) {
			t.Fatalf("receiver said %q (open %v), want %q…", l, ok, prefix)
		}
		return l
	case <-time.After(time.Minute): // a failure bound for a hung receiver, not a timing goal
		t.Fatalf("receiver said nothing, want %q…", prefix)
	}
	return ""
}

func expectLine(t *testing.T, lines <-chan string, want string) {
	t.Helper()
	if got := expectPrefix(t, lines, want); got != want {
		t.Fatalf("receiver said %q, want %q", got, want)
	}
}
