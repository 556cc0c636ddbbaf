package natsx

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/keyhouse/keyhouse/devinfra/devnats"
	"github.com/keyhouse/keyhouse/devinfra/testkit"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
	"github.com/keyhouse/keyhouse/pkg/telemetry"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// BenchmarkRelayDrain drains a backlog of 4,000 outbox rows of 4 tenants (enqueued in
// changes of 100 rows) through one relay with its default batch, and reports rows relayed
// per second and the shared buffers Postgres read per row (the database's counters, so
// everything the relay's statements did: claims, deletes, commits; autovacuum is off for
// the table, as it is in the stack between its runs a minute apart), and of those the
// buffers of outbox_pending_tenant. "old-snapshot" keeps
// a REPEATABLE READ transaction open meanwhile, as the stack's concurrent transactions do
// under load, so no deleted row's index entry can be marked dead. Run it on two builds
// back to back to compare them:
//
//	go test ./pkg/natsx -run '^$' -bench RelayDrain -benchtime 1x -count 2
func BenchmarkRelayDrain(b *testing.B) {
	for _, held := range []bool{false, true} {
		name := "quiet"
		if held {
			name = "old-snapshot"
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				relayDrain(b, held)
			}
		})
	}
}

func relayDrain(b *testing.B, held bool) {
	const backlog, change, tenants = 4000, 100, 4
	b.StopTimer()
	ctx := context.Background()
	pool, err := pgxx.Open(ctx, testkit.DatabaseURL(b, testkit.Empty), "svc")
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, "CREATE SCHEMA svc"); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, OutboxTableSQL); err != nil {
		b.Fatal(err)
	}
	// Autovacuum would run during the drain at a moment of its own choosing, adding its
	// reads to the figure; in the stack it naps a minute between runs.
	if _, err := pool.Exec(ctx, `ALTER TABLE outbox SET (autovacuum_enabled = off)`); err != nil {
		b.Fatal(err)
	}
	nc, js, err := Connect(ctx, devnats.SharedURL(b), "natsx-bench", nil)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	prefix := fmt.Sprintf("bench_%d", seq.Add(1))
	if err := EnsureStream(ctx, js, jetstream.StreamConfig{Name: strings.ToUpper(prefix), Subjects: []string{prefix + ".>"},
		Storage: jetstream.MemoryStorage}); err != nil {
		b.Fatal(err)
	}
	defer js.DeleteStream(ctx, strings.ToUpper(prefix)) //nolint:errcheck // best effort
	stream, err := js.Stream(ctx, strings.ToUpper(prefix))
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < backlog; i += change {
		msgs := make([]Message, 0, change)
		for j := i; j < i+change; j++ {
			msgs = append(msgs, Message{TenantID: fmt.Sprintf("tenant_%d", j%tenants), Subject: prefix + ".license.issued",
				MsgID: fmt.Sprintf("ev:%05d", j), Payload: []byte(strings.Repeat("x", 400))})
		}
		if err := pgxx.InTx(ctx, pool, func(tx pgx.Tx) error { return EnqueueAll(ctx, tx, msgs...) }); err != nil {
			b.Fatal(err)
		}
	}
	if held {
		defer testkit.HoldSnapshot(b, pool)()
	}
	// All of the database's buffers, and those of outbox_pending_tenant, the index whose
	// dead front a claim from the front reads.
	blocks := func() (all, index int64) {
		if err := pool.QueryRow(ctx, `SELECT (SELECT blks_hit + blks_read FROM pg_stat_database WHERE datname = current_database()),
			(SELECT idx_blks_hit + idx_blks_read FROM pg_statio_user_indexes WHERE indexrelname = 'outbox_pending_tenant')`).Scan(&all, &index); err != nil {
			b.Fatal(err)
		}
		return all, index
	}
	allBefore, indexBefore := blocks()
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	b.StartTimer()
	relay := NewRelay(pool, js, nil, WithPollInterval(10*time.Millisecond))
	go relay.Run(rctx) //nolint:errcheck // ends with rctx
	for {
		// The stream's count, not the outbox's: a count(*) would read the table too.
		info, err := stream.Info(ctx)
		if err != nil {
			b.Fatal(err)
		}
		left := backlog - int(info.State.Msgs)
		if left == 0 {
			break
		}
		if time.Since(start) > 2*time.Minute {
			b.Fatalf("%d of %d rows left after 2 minutes", left, backlog)
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.StopTimer()
	elapsed := time.Since(start)
	cancel()
	time.Sleep(1500 * time.Millisecond) // the backends report their counters when idle
	b.ReportMetric(float64(backlog)/elapsed.Seconds(), "rows/s")
	all, index := blocks()
	b.ReportMetric(float64(all-allBefore)/backlog, "buffers/row")
	b.ReportMetric(float64(index-indexBefore)/backlog, "index-buffers/row")
}

// BenchmarkRelaySpan is what a relay batch's span costs per row (ns/op and allocs/op are
// per row): a full batch of 128 rows, each written by a request of its own, with tracing
// off (the default: no OTLP endpoint) and on (every span recorded).
//
//	go test ./pkg/natsx -run '^$' -bench RelaySpan -benchmem
func BenchmarkRelaySpan(b *testing.B) {
	const batch = 128
	claimed := make([]outboxRow, batch)
	tracer := sdktrace.NewTracerProvider().Tracer("bench")
	for i := range claimed {
		ctx, span := tracer.Start(context.Background(), "request")
		claimed[i].headers = map[string]string{HeaderTraceparent: telemetry.Traceparent(ctx)}
		span.End()
	}
	for _, on := range []bool{false, true} {
		name := "tracing-off"
		if on {
			name = "tracing-on"
		}
		b.Run(name, func(b *testing.B) {
			if on {
				was := otel.GetTracerProvider()
				otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tracetest.NewSpanRecorder())))
				defer otel.SetTracerProvider(was)
			}
			b.ReportAllocs()
			ctx := context.Background()
			for i := 0; i < b.N; i += batch {
				endRelaySpan(startRelaySpan(ctx, claimed[:min(batch, b.N-i)]), batch, nil)
			}
		})
	}
}
