package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keyhouse/keyhouse/pkg/webhook"
)

// webhookRate is the steady arrival rate of the webhook scenario (issue 21's goal).
const webhookRate = 500

// webhooksID is the scenario's ID.
const webhooksID = "webhooks"

func init() {
	Register(Scenario{
		ID:   webhooksID,
		Name: "webhooks: issue-license → signed license.issued delivered to a local receiver (500 events/s)",
		Rate: webhookRate,
		// Its p99 is the backlog's: measured in 2 s slices it would never grow past 2 s.
		OneWindow: true,
		Note: "open loop at 500 changes/s, measured in one window of the whole duration; each op is issue-license's 200 (license and event committed) plus the time until a " +
			"receiver on loopback has the signed license.issued delivery (outbox relay → JetStream → events log + fan-out → worker → POST), " +
			"the signature verified by the receiver (goal ≥ 500 events/s, p99 < 1 s)",
		Setup: setupWebhooks,
	})
}

// arrivals lets an op wait for its license's delivery, whichever comes first, and
// counts the licenses issued whose delivery has not arrived yet.
type arrivals struct {
	mu      sync.Mutex
	wait    map[string]chan struct{}
	done    map[string]bool
	pending map[string]bool // issued, not delivered yet
}

func newArrivals() *arrivals {
	return &arrivals{wait: map[string]chan struct{}{}, done: map[string]bool{}, pending: map[string]bool{}}
}

func (a *arrivals) issued(key string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.done[key] {
		a.pending[key] = true
	}
}

func (a *arrivals) outstanding() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.pending)
}

// settleTimeout bounds how long the scenario waits for its backlog after a slice.
const settleTimeout = 2 * time.Minute

// settle waits until every license issued so far has been delivered.
func (a *arrivals) settle(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for a.outstanding() > 0 {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d license.issued deliveries still missing after %s", a.outstanding(), settleTimeout)
		case <-tick.C:
		}
	}
	return nil
}

func (a *arrivals) ch(key string) chan struct{} {
	c, ok := a.wait[key]
	if !ok {
		c = make(chan struct{})
		a.wait[key] = c
	}
	return c
}

func (a *arrivals) arrived(key string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.done[key] {
		a.done[key] = true
		delete(a.pending, key)
		close(a.ch(key))
	}
}

func (a *arrivals) await(ctx context.Context, key string) error {
	a.mu.Lock()
	c := a.ch(key)
	a.mu.Unlock()
	select {
	case <-c:
		a.mu.Lock()
		delete(a.wait, key)
		a.mu.Unlock()
		return nil
	case <-ctx.Done():
		return fmt.Errorf("license.issued of %s not delivered: %w", key, ctx.Err())
	}
}

func setupWebhooks(ctx context.Context, env *Env) (Op, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	arr := newArrivals()
	var secret atomic.Value
	secret.Store("")
	var bad atomic.Int64
	go func() {
		_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			if webhook.Verify(r.Header.Get(webhook.SignatureHeader), body, []byte(secret.Load().(string)), webhook.DefaultTolerance, time.Now()) != nil {
				bad.Add(1)
				w.WriteHeader(http.StatusBadRequest)
				return
			}
			var ev struct {
				Type string `json:"type"`
				Data struct {
					Key string `json:"key"`
				} `json:"data"`
			}
			if json.Unmarshal(body, &ev) == nil && ev.Type == "license.issued" {
				arr.arrived(ev.Data.Key)
			}
			w.WriteHeader(http.StatusNoContent)
		}))
	}()
	st, data, err := env.Do(ctx, http.MethodPost, "/v1/webhook-endpoints", SetupIP(), true, map[string]any{
		"url": "http://" + ln.Addr().String() + "/hook", "events": []string{"license.issued"}, "description": "bench",
	})
	if err := Expect(st, data, err, http.StatusOK); err != nil {
		return nil, fmt.Errorf("create endpoint: %w", err)
	}
	var ep struct {
		ID     string `json:"id"`
		Secret string `json:"secret"`
	}
	if err := json.Unmarshal(data, &ep); err != nil {
		return nil, err
	}
	secret.Store(ep.Secret)
	// The endpoint is enabled only while this row runs: the bench's tenant is every row's,
	// so enabled it would take a delivery of every license the other rows issue (the
	// issue-license row's 700 to 1,000 a second, the import's 100,000), and this row, or
	// whichever came next, would measure that backlog too. Events recorded while an
	// endpoint is disabled are never sent to it (docs/webhooks.md).
	enable := func(on bool) func(context.Context) error {
		return func(ctx context.Context) error {
			st, data, err := env.Do(ctx, http.MethodPost, "/v1/webhook-endpoints/"+ep.ID+"/update", SetupIP(), true, map[string]any{"enabled": on})
			return Expect(st, data, err, http.StatusOK)
		}
	}
	if err := enable(false)(ctx); err != nil {
		return nil, fmt.Errorf("disable endpoint: %w", err)
	}
	env.BeforeEachSlice(webhooksID, func(ctx context.Context) error {
		// And it starts on a quiet stack, as the reports do: the row before it (the
		// issue-license row's 1,000 events a second) leaves the event log's ingest a
		// backlog that this row's events would queue behind.
		waited, quiet := WaitUntilQuiet(ctx, env.Stack, time.Minute)
		fmt.Fprintf(os.Stderr, "webhooks: waited %s for the stack to quiet down (quiet: %t)\n", waited.Round(time.Second), quiet)
		return enable(true)(ctx)
	})
	env.AfterEachSlice(webhooksID, func(ctx context.Context) error {
		return errors.Join(arr.settle(ctx), enable(false)(ctx))
	})
	stamp := time.Now().UnixNano()
	return func(ctx context.Context, _, i int) error {
		st, data, err := env.Do(ctx, http.MethodPost, "/v1/issue-license", ClientIP(160, i, 50), true, map[string]any{
			"tier": "pro", "product_id": fmt.Sprintf("bench-hooks-%d", stamp), "issued_to": fmt.Sprintf("hook-%d@example.com", i),
		})
		if err := Expect(st, data, err, http.StatusOK); err != nil {
			return err
		}
		var out struct {
			Key string `json:"key"`
		}
		if err := json.Unmarshal(data, &out); err != nil {
			return err
		}
		arr.issued(out.Key)
		if n := bad.Load(); n > 0 {
			return fmt.Errorf("%d deliveries failed the receiver's signature check", n)
		}
		wait, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return arr.await(wait, out.Key)
	}, nil
}
