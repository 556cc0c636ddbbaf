package ratelimit

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/devinfra"
	"github.com/keyhouse/keyhouse/devinfra/testkit"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"
)

// t0 is 5 minutes into the window 10:00-10:15 UTC, so a test never crosses a window by accident.
var t0 = time.Date(2030, 1, 2, 10, 5, 0, 0, time.UTC)

// windowEnd is the end of t0's 15-minute window.
var windowEnd = time.Date(2030, 1, 2, 10, 15, 0, 0, time.UTC)

func TestMain(m *testing.M) {
	// go-redis logs every failed dial; the outage tests cause many on purpose and assert on
	// the limiter's own log instead.
	logging.Disable()
	testkit.Main(m)
}

// sharedRedisURL is the redis-server of the tests that do not stop it; they keep out of
// each other's way with tiers and keys of their own.
func sharedRedisURL(tb testing.TB) string { return testkit.RedisURL(tb) }

var lastUnique atomic.Int64

// unique is a name only this call of the calling test uses, also under -count.
func unique(tb testing.TB) string {
	return fmt.Sprintf("%s#%d", tb.Name(), lastUnique.Add(1))
}

// tierFor is a tier only the calling test counts in.
func tierFor(tb testing.TB, limit int) Tier {
	return Tier{Name: unique(tb), Limit: limit, Window: 15 * time.Minute}
}

// startRedis starts a redis-server of the test's own, stopped when the test ends.
func startRedis(tb testing.TB) *devinfra.Redis {
	tb.Helper()
	dir, err := os.MkdirTemp(testkit.Dir(tb), "redis-")
	if err != nil {
		tb.Fatal(err)
	}
	srv, err := devinfra.StartRedis(context.Background(), dir, 0)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			tb.Error(err)
		}
	})
	return srv
}

// newClient connects to url the way the gateway should: with context timeouts honoured.
func newClient(tb testing.TB, url string) *redis.Client {
	tb.Helper()
	opt, err := redis.ParseURL(url)
	if err != nil {
		tb.Fatal(err)
	}
	opt.ContextTimeoutEnabled = true
	c := redis.NewClient(opt)
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// unreachableRedisURL points at a port nothing listens on.
func unreachableRedisURL(tb testing.TB) string {
	tb.Helper()
	port, err := devinfra.FreePort()
	if err != nil {
		tb.Fatal(err)
	}
	return fmt.Sprintf("redis://127.0.0.1:%d/0", port)
}

// gateway is one Limiter as a gateway process holds it, with its clock, log and a count of
// the round trips it makes to Redis.
type gateway struct {
	*Limiter
	clock     *clock
	log       *logBuffer
	roundTrip *roundTripCounter
}

func newGateway(tb testing.TB, url string, c *clock) *gateway {
	tb.Helper()
	client := newClient(tb, url)
	rt := &roundTripCounter{}
	client.AddHook(rt)
	logs := &logBuffer{}
	// A test machine busy with hundreds of parallel requests must not pass for a Redis
	// outage; the outage tests stop Redis, which fails fast whatever the timeout.
	l := New(client, slog.New(slog.NewTextHandler(logs, nil)), 5*time.Second)
	l.now = c.Now
	return &gateway{Limiter: l, clock: c, log: logs, roundTrip: rt}
}

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock(t time.Time) *clock { return &clock{now: t} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// roundTripCounter counts pipelines sent to Redis, the only way the limiter talks to it.
type roundTripCounter struct{ n atomic.Int64 }

func (h *roundTripCounter) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *roundTripCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *roundTripCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}

func (h *roundTripCounter) Load() int64 { return h.n.Load() }

type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// count returns how many log lines contain s.
func (b *logBuffer) count(s string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Count(b.buf.String(), s)
}

// takeN takes n requests of key and returns how many were allowed.
func takeN(g *gateway, tier Tier, key string, n int) int {
	allowed := 0
	for range n {
		if g.Take(context.Background(), tier, key).Allowed {
			allowed++
		}
	}
	return allowed
}

// takeParallel takes n requests of key at once, all released together, and returns how
// many were allowed.
func takeParallel(g *gateway, tier Tier, key string, n int) int {
	var allowed atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range n {
		wg.Go(func() {
			<-start
			if g.Take(context.Background(), tier, key).Allowed {
				allowed.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	return int(allowed.Load())
}
