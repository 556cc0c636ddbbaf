package webhooks

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/keyhouse/keyhouse/pkg/pgxx"
	"github.com/keyhouse/keyhouse/pkg/webhook"
)

// The operator sees the queue and the outcomes: a batch of events of two tenants fanned
// out in one statement makes one delivery per matching endpoint (pending and due until
// the worker runs); then the attempts count by outcome, the failing delivery stays
// pending, and a disabled endpoint is counted.
func TestDeliveryMetricsFollowTheQueue(t *testing.T) {
	f := newFixture(t)
	// The queue's gauges compare with the database's clock.
	f.clock.now = time.Now().Add(-time.Second)
	ok, down := newRecorder(t), newRecorder(t)
	down.status.Store(503)
	f.endpoint("t1", ok.URL, "license.")
	f.endpoint("t2", down.URL, "*")
	f.endpoint("t2", ok.URL, "release.")
	off, _ := f.endpoint("t3", ok.URL)
	if _, err := f.store.db.Exec(context.Background(), `UPDATE webhook_endpoints SET enabled = false WHERE id = $1`, off.ID); err != nil {
		t.Fatal(err)
	}
	err := pgxx.InTx(context.Background(), f.store.db, func(tx pgx.Tx) error {
		n, err := f.store.FanoutAll(context.Background(), tx, []NewEvent{
			{TenantID: "t1", ID: "evt_a", Type: "license.issued", Body: []byte(`{}`)},
			{TenantID: "t2", ID: "evt_b", Type: "license.revoked", Body: []byte(`{}`)},
			{TenantID: "t1", ID: "evt_c", Type: "seat.activated", Body: []byte(`{}`)},
			{TenantID: "t3", ID: "evt_d", Type: "license.issued", Body: []byte(`{}`)},
		}, f.clock.Now())
		if n != 2 {
			t.Errorf("%d deliveries fanned out, want 2 (t1's license endpoint, t2's catch-all)", n)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(queueCollector{st: f.store})
	gauge := func(name string) float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == name {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatalf("no %s", name)
		return 0
	}
	if p, d, dis := gauge("keyhouse_webhook_deliveries_pending"), gauge("keyhouse_webhook_deliveries_due"), gauge("keyhouse_webhook_endpoints_disabled"); p != 2 || d != 2 || dis != 1 {
		t.Fatalf("pending %v, due %v, disabled %v; want 2, 2, 1", p, d, dis)
	}
	if age := gauge("keyhouse_webhook_oldest_due_seconds"); age < 1 {
		t.Fatalf("oldest due %vs, want at least the second it has been due", age)
	}
	succeeded := testutil.ToFloat64(attemptsTotal.WithLabelValues(OutcomeSucceeded))
	httpErrors := testutil.ToFloat64(attemptsTotal.WithLabelValues(OutcomeHTTPError))
	if n := f.worker.RunOnce(context.Background()); n != 2 {
		t.Fatalf("%d attempts, want 2", n)
	}
	if d := testutil.ToFloat64(attemptsTotal.WithLabelValues(OutcomeSucceeded)) - succeeded; d != 1 {
		t.Fatalf("%v successes counted, want 1", d)
	}
	if d := testutil.ToFloat64(attemptsTotal.WithLabelValues(OutcomeHTTPError)) - httpErrors; d != 1 {
		t.Fatalf("%v HTTP errors counted, want 1", d)
	}
	// The failed one waits for its retry: pending, not due.
	if p, d := gauge("keyhouse_webhook_deliveries_pending"), gauge("keyhouse_webhook_deliveries_due"); p != 1 || d != 0 {
		t.Fatalf("after the attempts: pending %v, due %v; want 1, 0", p, d)
	}
}

// An attempt that got no answer is told from one that got an error status.
func TestAttemptOutcomes(t *testing.T) {
	for res, want := range map[string]struct {
		status int
		err    string
		want   string
	}{
		"2xx":      {204, "", OutcomeSucceeded},
		"5xx":      {500, "answered HTTP 500", OutcomeHTTPError},
		"redirect": {302, "redirect not followed", OutcomeHTTPError},
		"timeout":  {0, "timed out after 10s", OutcomeNoAnswer},
	} {
		if got := outcome(webhook.Result{StatusCode: want.status, Error: want.err}); got != want.want {
			t.Errorf("%s: %s, want %s", res, got, want.want)
		}
	}
}
