package webhooks

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/devinfra/testkit"
	"github.com/keyhouse/keyhouse/pkg/seal"
	"github.com/keyhouse/keyhouse/pkg/webhook"
)

// The receivers of docs/webhooks.md (docs/examples/webhook-receiver), run as documented
// against real deliveries: each verifies a delivery, recognizes a redelivery as a
// duplicate, refuses a delivery signed with another secret (an attempt that failed with
// its 400), and refuses a captured delivery replayed after the 5-minute tolerance.
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

			// A captured delivery replayed later than the tolerance, its signature good.
			replay, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(f.deliveryBody(good.ID)))
			if err != nil {
				t.Fatal(err)
			}
			replay.Header.Set("Keyhouse-Signature", webhook.Sign(time.Now().Add(-6*time.Minute), f.deliveryBody(good.ID), []byte(secret)))
			resp, err := http.DefaultClient.Do(replay)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			expectLine(t, lines, "rejected")
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("a replay answered %d", resp.StatusCode)
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

// The Stripe library checks docs/webhooks.md names for Node and Python, run as the page
// prints them (each line is read from the page) on the exact bytes of a real delivery, as
// a receiver has them: each verifies the delivery, and refuses it replayed with a
// timestamp past the 5-minute tolerance and signed with another secret. stripe-node is
// pinned in testdata/stripe-node (npm ci there), stripe-python is Debian's python3-stripe
// (make deps).
func TestDocumentedStripeLibraryChecksVerifyRealDeliveries(t *testing.T) {
	testkit.Integration(t)
	page, err := os.ReadFile("../../../../docs/webhooks.md")
	if err != nil {
		t.Fatal(err)
	}
	line := func(lib string) string {
		m := regexp.MustCompile(`\(` + lib + `\): ` + "`([^`]+)`").FindSubmatch(page)
		if m == nil {
			t.Fatalf("docs/webhooks.md names no %s check", lib)
		}
		return string(m[1])
	}
	node, python := testkit.RequireTool(t, "node"), testkit.RequireTool(t, "/usr/bin/python3")
	nodeModules, err := filepath.Abs("testdata/stripe-node/node_modules")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(nodeModules, "stripe")); err != nil {
		t.Fatal("stripe-node is not installed in testdata/stripe-node (npm ci there)")
	}
	if out, err := exec.Command(python, "-c", "import stripe").CombinedOutput(); err != nil {
		t.Fatalf("stripe-python is not installed (make deps): %v %s", err, out)
	}
	checks := map[string]func(body, header, secret string) []string{
		"node": func(body, header, secret string) []string {
			return []string{node, "-e", `const stripe = require('stripe')('sk_test_unused');
const [body, header, secret] = [require('node:fs').readFileSync(process.argv[1]), process.argv[2], process.argv[3]];
try { ` + line("stripe-node") + `; console.log('verified'); } catch (e) { console.log('rejected'); }`, body, header, secret}
		},
		"python": func(body, header, secret string) []string {
			return []string{python, "-c", `import stripe, sys
body, header, secret = open(sys.argv[1], "rb").read(), sys.argv[2], sys.argv[3]
try:
    ` + line("stripe-python") + `
    print("verified")
except stripe.error.SignatureVerificationError:
    print("rejected")`, body, header, secret}
		},
	}

	f := newFixture(t)
	f.clock.now = time.Now()
	f.worker.Now = time.Now
	rc := newRecorder(t)
	_, secret := f.endpoint("t1", rc.URL)
	f.event("t1", "evt_signed", "license.issued")
	f.worker.RunOnce(context.Background())
	if rc.count() != 1 {
		t.Fatalf("received %d deliveries", rc.count())
	}
	body, header := rc.bodies[0], rc.got[0].Header.Get("Keyhouse-Signature")
	bodyFile := filepath.Join(t.TempDir(), "body")
	if err := os.WriteFile(bodyFile, body, 0o600); err != nil {
		t.Fatal(err)
	}
	replayed := webhook.Sign(time.Now().Add(-6*time.Minute), body, []byte(secret))
	for name, argv := range checks {
		for _, c := range []struct{ what, header, secret, want string }{
			{"the delivery", header, secret, "verified"},
			{"the delivery replayed after the tolerance", replayed, secret, "rejected"},
			{"the delivery checked with another secret", header, NewSecret(), "rejected"},
		} {
			argv := argv(bodyFile, c.header, c.secret)
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.Env = append(os.Environ(), "NODE_PATH="+nodeModules)
			out, err := cmd.CombinedOutput()
			if got := strings.TrimSpace(string(out)); err != nil || got != c.want {
				t.Errorf("%s check of %s: %v %q, want %q", name, c.what, err, got, c.want)
			}
		}
	}
}

// The Go code docs/webhooks.md prints as the heart of its receivers is the Go receiver's,
// verbatim, so that what the page shows is what the tests above run.
func TestWebhooksPageQuotesTheGoReceiver(t *testing.T) {
	page, err := os.ReadFile("../../../../docs/webhooks.md")
	if err != nil {
		t.Fatal(err)
	}
	receiver, err := os.ReadFile("../../../../docs/examples/webhook-receiver/receiver.go")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(page), "The heart of each")
	_, code, ok2 := strings.Cut(rest, "```go\n")
	code, _, ok3 := strings.Cut(code, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("docs/webhooks.md prints no Go code as the heart of its receivers")
	}
	if !strings.Contains(string(receiver), code) {
		t.Fatalf("docs/webhooks.md prints Go code that is not in receiver.go:\n%s", code)
	}
}
