package pgxx_test

import (
	"context"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/devinfra/testkit"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
)

// Rows older than the period go, in chunks, and only those; a period of 0 keeps all.
func TestRetentionDeletesOnlyRowsOlderThanThePeriod(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := pgxx.Open(ctx, testkit.DatabaseURL(t, testkit.Empty), "svc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	now := time.Now()
	for _, q := range []string{
		`CREATE SCHEMA svc`,
		`CREATE TABLE svc.events (event_id text PRIMARY KEY, received_at timestamptz NOT NULL)`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `INSERT INTO events SELECT 'old' || g, $1::timestamptz FROM generate_series(1, 2500) g
		UNION ALL SELECT 'new' || g, $2::timestamptz FROM generate_series(1, 10) g`,
		now.Add(-91*24*time.Hour), now.Add(-89*24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	keepAll := pgxx.Retention{Table: "events", Column: "received_at"}
	if n, err := keepAll.Prune(ctx, pool, now); err != nil || n != 0 {
		t.Fatalf("Keep 0 deleted %d (%v), want nothing", n, err)
	}
	r := pgxx.Retention{Table: "events", Column: "received_at", Keep: 90 * 24 * time.Hour}
	n, err := r.Prune(ctx, pool, now)
	if err != nil || n != 2500 {
		t.Fatalf("deleted %d (%v), want the 2500 rows older than 90 days", n, err)
	}
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE event_id LIKE 'new%'`).Scan(&left); err != nil || left != 10 {
		t.Fatalf("%d newer rows left (%v), want 10", left, err)
	}
}
