package pgxx_test

import (
	"context"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/devinfra/testkit"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
)

// The readiness probe must say Postgres answers while every pooled connection is busy:
// a busy pool is load, and a process that calls it an outage refuses all its requests.
func TestProbeAnswersWhileThePoolIsBusy(t *testing.T) {
	ctx := context.Background()
	pool, err := pgxx.Open(ctx, testkit.DatabaseURL(t, testkit.Empty), "svc", pgxx.WithMaxConns(1))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	prober := pgxx.NewProber(pool)
	defer prober.Close()

	held, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release()
	// The premise: the pool's own ping waits for the busy connection.
	pingCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := pool.Ping(pingCtx); err == nil {
		t.Fatal("pool.Ping answered with its only connection held; the test no longer shows the busy pool")
	}
	for i := range 3 {
		probeCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := prober.Probe(probeCtx)
		cancel()
		if err != nil {
			t.Fatalf("probe %d with the pool busy: %v", i, err)
		}
	}
}

// A connection the server ends fails one probe; the next connects again.
func TestProbeReconnectsAfterItsConnectionEnds(t *testing.T) {
	ctx := context.Background()
	pool, err := pgxx.Open(ctx, testkit.DatabaseURL(t, testkit.Empty), "svc")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	prober := pgxx.NewProber(pool)
	defer prober.Close()
	if err := prober.Probe(ctx); err != nil {
		t.Fatal(err)
	}
	var ended int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE pid <> pg_backend_pid() AND datname = current_database() AND application_name = 'keyhouse-svc' AND state = 'idle') t`).Scan(&ended); err != nil {
		t.Fatal(err)
	}
	if ended == 0 {
		t.Fatal("no idle probe connection found to end")
	}
	deadline := time.Now().Add(10 * time.Second)
	failed := false
	for {
		err := prober.Probe(ctx)
		if err == nil {
			break
		}
		failed = true
		if time.Now().After(deadline) {
			t.Fatalf("probe never reconnected: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !failed {
		t.Log("the server's end was not seen by the first probe (the ping raced it); it reconnected either way")
	}
}
