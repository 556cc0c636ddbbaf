package webhooks

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/keyhouse/keyhouse/pkg/pgxx"
)

// BenchmarkLaneDrain drains a backlog of deliveries to one local endpoint through the
// worker's lanes (the webhooks bench scenario's delivery half, without the rest of the
// stack), the backlog stored as the log's ingest stores it under load: fan-out batches of
// 256 events sharing a due time. It reports deliveries per second and what Postgres did
// per delivery: WAL bytes and shared buffers (the database's counters, so everything the
// worker's statements did). Run it on two builds back to back to compare them:
//
//	go test ./services/events/internal/webhooks -run '^$' -bench LaneDrain -benchtime 1x -count 2
func BenchmarkLaneDrain(b *testing.B) {
	const backlog, batch = 4000, 256
	for range b.N {
		b.StopTimer()
		f := newFixture(b)
		var got atomic.Int64
		done := make(chan struct{})
		recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if got.Add(1) == backlog {
				close(done)
			}
			w.WriteHeader(http.StatusNoContent)
		}))
		f.endpoint("t1", recv.URL)
		for i := 0; i < backlog; i += batch {
			evs := make([]NewEvent, 0, batch)
			for j := i; j < min(i+batch, backlog); j++ {
				id := fmt.Sprintf("evt_drain_%05d", j)
				evs = append(evs, NewEvent{TenantID: "t1", ID: id, Type: "license.issued",
					Body: []byte(`{"id":"` + id + `","type":"license.issued","created_at":"2026-11-25T12:00:00.000000Z","actor":{"type":"system","request_id":null},"data":{"key":"` + id + `","tier":"pro","product_id":"bench","issued_to":"someone@example.com","expires_at":null,"limits":{}}}`)})
			}
			if err := pgxx.InTx(context.Background(), f.store.db, func(tx pgx.Tx) error {
				_, err := f.store.FanoutAll(context.Background(), tx, evs, f.clock.Now())
				return err
			}); err != nil {
				b.Fatal(err)
			}
		}
		f.worker.Now = time.Now // the real clock: the backlog is due
		// With pg_stat_statements preloaded (not by default), the statements are logged too.
		_, statements := f.store.db.Exec(context.Background(), `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`)
		if statements == nil {
			_, statements = f.store.db.Exec(context.Background(), `SELECT pg_stat_statements_reset()`)
		}
		before := dbCounters(b, f)
		ctx, cancel := context.WithCancel(context.Background())
		start := time.Now()
		b.StartTimer()
		go f.worker.Run(ctx)
		select {
		case <-done:
		case <-time.After(2 * time.Minute):
			b.Fatalf("%d of %d delivered in 2 minutes", got.Load(), backlog)
		}
		b.StopTimer()
		elapsed := time.Since(start)
		cancel()
		recv.Close()
		time.Sleep(1500 * time.Millisecond) // the backends report their counters when idle
		after := dbCounters(b, f)
		if statements == nil {
			logStatements(b, f, backlog)
		}
		b.ReportMetric(float64(backlog)/elapsed.Seconds(), "deliveries/s")
		b.ReportMetric(float64(after.wal-before.wal)/backlog, "WAL-B/delivery")
		b.ReportMetric(float64(after.blks-before.blks)/backlog, "buffers/delivery")
		f.store.db.Close()
	}
}

type counters struct{ wal, blks int64 }

func dbCounters(b *testing.B, f *fixture) counters {
	var c counters
	if err := f.store.db.QueryRow(context.Background(), `
		SELECT pg_current_wal_lsn() - '0/0', blks_hit + blks_read FROM pg_stat_database WHERE datname = current_database()`).Scan(&c.wal, &c.blks); err != nil {
		b.Fatal(err)
	}
	return c
}

// logStatements logs the statements that read the most buffers, per delivery.
func logStatements(b *testing.B, f *fixture, n int) {
	rows, err := f.store.db.Query(context.Background(), `
		SELECT calls, shared_blks_hit + shared_blks_read, wal_bytes, total_exec_time, left(regexp_replace(query, '\s+', ' ', 'g'), 90)
		FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		ORDER BY shared_blks_hit + shared_blks_read DESC LIMIT 6`)
	if err != nil {
		b.Log(err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var calls, blks int64
		var wal, ms float64
		var q string
		if err := rows.Scan(&calls, &blks, &wal, &ms, &q); err != nil {
			b.Log(err)
			return
		}
		b.Logf("%6d calls %7.1f buffers/delivery %7.0f WAL-B/delivery %6.3f ms/call  %s", calls, float64(blks)/float64(n), wal/float64(n), ms/float64(calls), q)
	}
}
