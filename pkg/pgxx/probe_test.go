package pgxx_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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
	url := testkit.DatabaseURL(t, testkit.Empty)
	pool, err := pgxx.Open(ctx, url, "svc")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	prober := pgxx.NewProber(pool)
	defer prober.Close()
	if err := prober.Probe(ctx); err != nil {
		t.Fatal(err)
	}
	// An administrator's session, not one of svc's: it ends every idle session of svc
	// (the probe's among them) and waits until they are gone.
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	var ended []int32
	if err := admin.QueryRow(ctx, `WITH idle AS MATERIALIZED (SELECT pid FROM pg_stat_activity WHERE application_name = 'keyhouse-svc' AND state = 'idle')
		SELECT coalesce(array_agg(pid), '{}') FROM idle WHERE pg_terminate_backend(pid)`).Scan(&ended); err != nil {
		t.Fatal(err)
	}
	if len(ended) == 0 {
		t.Fatal("no idle session of svc to end")
	}
	deadline := time.Now().Add(time.Minute) // a failure bound, not a timing goal
	for left := len(ended); left > 0; time.Sleep(10 * time.Millisecond) {
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1)`, ended).Scan(&left); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d ended sessions still there", left)
		}
	}
	if err := prober.Probe(ctx); err == nil {
		t.Fatal("the probe answered on a connection the server ended")
	}
	if err := prober.Probe(ctx); err != nil {
		t.Fatalf("the probe did not connect again: %v", err)
	}
}
