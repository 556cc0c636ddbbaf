package natsx

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/keyhouse/keyhouse/devinfra/testkit"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// One Postgres cluster and one NATS server for the test binary (testkit); each test gets
// its own database and its own stream, so tests run in parallel without seeing each other.

var seq atomic.Int64

func TestMain(m *testing.M) { testkit.Main(m) }

var nonIdent = regexp.MustCompile(`[^a-z0-9]+`)

// uniqueName is a short identifier unique in this test binary, readable in failures.
func uniqueName(t *testing.T) string {
	n := nonIdent.ReplaceAllString(strings.ToLower(t.Name()), "_")
	if len(n) > 40 {
		n = n[len(n)-40:]
	}
	return fmt.Sprintf("t%d_%s", seq.Add(1), strings.Trim(n, "_"))
}

// newOutboxDB makes a fresh database with schema svc holding the outbox table, created
// from OutboxTableSQL through a pool whose search_path is svc, as a service's migration
// would. It returns the database URL and a pool on svc.
func newOutboxDB(t *testing.T) (string, *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	url := testkit.DatabaseURL(t, testkit.Empty)
	pool := openPool(t, url)
	if _, err := pool.Exec(ctx, "CREATE SCHEMA svc"); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, OutboxTableSQL); err != nil {
		t.Fatal(err)
	}
	var schema string
	if err := pool.QueryRow(ctx, "SELECT schemaname FROM pg_tables WHERE tablename = 'outbox'").Scan(&schema); err != nil || schema != "svc" {
		t.Fatalf("outbox table in schema %q (%v), want svc", schema, err)
	}
	return url, pool
}

func openPool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxx.Open(context.Background(), url, "svc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// connect dials url through Connect, closing the connection at the end of the test.
func connect(t *testing.T, url string, log *slog.Logger) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nc, js, err := Connect(ctx, url, "natsx-test", log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc, js
}

// newStream ensures a file-backed stream of the test's own, capturing <prefix>.>.
func newStream(t *testing.T, js jetstream.JetStream) (stream, prefix string) {
	t.Helper()
	prefix = uniqueName(t)
	stream = strings.ToUpper(prefix)
	err := EnsureStream(context.Background(), js, jetstream.StreamConfig{
		Name:     stream,
		Subjects: []string{prefix + ".>"},
		Storage:  jetstream.FileStorage,
	})
	if err != nil {
		t.Fatal(err)
	}
	return stream, prefix
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for: %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// rise is how far counter has risen above before, once it has risen at all (within 10
// s): the relay and the consumer count what they did after it is done (a park after its
// mark commits, a termination after NATS took it), so what a test sees done can be a
// moment ahead of the counter.
func rise(t *testing.T, counter prometheus.Counter, before float64) float64 {
	t.Helper()
	eventually(t, 10*time.Second, "the counter to rise", func() bool { return testutil.ToFloat64(counter) > before })
	return testutil.ToFloat64(counter) - before
}

// background runs f(ctx) in a goroutine. The returned stop (also run at cleanup) cancels
// ctx and fails the test unless f returns nil promptly: Run and Consume must end on cancel.
func background(t *testing.T, f func(ctx context.Context) error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("returned %v after cancel, want nil", err)
				}
			case <-time.After(15 * time.Second):
				t.Errorf("did not return within 15s of cancel")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// logRecorder is a slog handler that keeps messages, to count "once per outage" lines
// and to show the log of a failed test. It never calls t.Log: the NATS client may log
// from its own goroutines after a test ended.
type logRecorder struct {
	mu    sync.Mutex
	lines []string
}

func newLog(t *testing.T) (*slog.Logger, *logRecorder) {
	rec := &logRecorder{}
	t.Cleanup(func() {
		if t.Failed() {
			rec.mu.Lock()
			defer rec.mu.Unlock()
			for _, l := range rec.lines {
				t.Log(l)
			}
		}
	})
	return slog.New(rec), rec
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logRecorder) WithGroup(string) slog.Handler            { return l }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", r.Level, r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	l.mu.Lock()
	l.lines = append(l.lines, b.String())
	l.mu.Unlock()
	return nil
}

// count is how many lines carry message msg.
func (l *logRecorder) count(msg string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if _, m, ok := strings.Cut(line, " "); ok && (m == msg || strings.HasPrefix(m, msg+" ")) {
			n++
		}
	}
	return n
}
