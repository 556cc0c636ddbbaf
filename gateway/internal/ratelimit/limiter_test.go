package ratelimit

import (
	"context"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestTake_CountsDownAndRefusesOnceTheLimitIsSpent(t *testing.T) {
	t.Parallel()
	three := tierFor(t, 3)
	g := newGateway(t, sharedRedisURL(t), newClock(t0))
	ctx := context.Background()
	for i, wantRemaining := range []int{2, 1, 0} {
		got := g.Take(ctx, three, "ip:203.0.113.7")
		want := Result{Limit: 3, Remaining: wantRemaining, Reset: windowEnd, Allowed: true}
		if !got.Reset.Equal(want.Reset) || got.Reset.Unix() != want.Reset.Unix() {
			t.Fatalf("request %d: reset %v, want %v", i+1, got.Reset, want.Reset)
		}
		got.Reset = want.Reset
		if got != want {
			t.Fatalf("request %d: %+v, want %+v", i+1, got, want)
		}
	}
	g.clock.Advance(90 * time.Second)
	got := g.Take(ctx, three, "ip:203.0.113.7")
	if got.Allowed || got.Remaining != 0 || got.Limit != 3 || got.RetryAfter != windowEnd.Sub(t0)-90*time.Second {
		t.Errorf("4th request: %+v, want refused with 8m30s to wait", got)
	}
}

func TestTake_WindowsAlignToTheEpochAndTheNextWindowRestoresTheBudget(t *testing.T) {
	t.Parallel()
	three := tierFor(t, 3)
	g := newGateway(t, sharedRedisURL(t), newClock(t0))
	if n := takeN(g, three, "ip:1", 4); n != 3 {
		t.Fatalf("allowed %d of 4, want 3", n)
	}
	g.clock.Advance(windowEnd.Sub(t0))
	got := g.Take(context.Background(), three, "ip:1")
	if !got.Allowed || got.Remaining != 2 || !got.Reset.Equal(windowEnd.Add(15*time.Minute)) {
		t.Errorf("first request of the next window: %+v", got)
	}
	// 7 minutes does not divide the offset between year 1 and 1970: the alignment is the epoch's.
	seven := Tier{Name: "seven", Limit: 1, Window: 7 * time.Minute}
	if reset := g.Take(context.Background(), seven, "ip:1").Reset; reset.Unix()%(7*60) != 0 || reset.Sub(g.clock.Now()) > 7*time.Minute {
		t.Errorf("7-minute window resets at %v, not on a multiple of 7 minutes since the epoch", reset)
	}
}

func TestTake_TiersAndKeysCountSeparately(t *testing.T) {
	t.Parallel()
	three := tierFor(t, 3)
	g := newGateway(t, sharedRedisURL(t), newClock(t0))
	other := Tier{Name: "other", Limit: 3, Window: 15 * time.Minute}
	takeN(g, three, "ip:1", 3)
	if !g.Take(context.Background(), three, "ip:2").Allowed {
		t.Error("another key was refused")
	}
	if !g.Take(context.Background(), other, "ip:1").Allowed {
		t.Error("the same key in another tier was refused")
	}
}

func TestTake_KeysOverTheLimitAreRefusedLocallyWithoutAskingRedis(t *testing.T) {
	t.Parallel()
	three := tierFor(t, 3)
	g := newGateway(t, sharedRedisURL(t), newClock(t0))
	takeN(g, three, "ip:1", 4)
	before := g.roundTrip.Load()
	if n := takeN(g, three, "ip:1", 50); n != 0 {
		t.Fatalf("allowed %d over the limit", n)
	}
	if trips := g.roundTrip.Load() - before; trips != 0 {
		t.Errorf("%d Redis round trips for a key known to be over its limit, want 0", trips)
	}
	g.clock.Advance(windowEnd.Sub(t0))
	if !g.Take(context.Background(), three, "ip:1").Allowed || g.roundTrip.Load() == before {
		t.Error("the next window was not counted in Redis")
	}
}

func TestTake_RedisKeysAreBoundedInLengthAndExpireAfterTheirWindow(t *testing.T) {
	t.Parallel()
	three := tierFor(t, 3)
	url := sharedRedisURL(t)
	g := newGateway(t, url, newClock(t0))
	long := strings.Repeat("K", 500)
	takeN(g, three, "lic:"+long+"A", 3)
	if !g.Take(context.Background(), three, "lic:"+long+"B").Allowed {
		t.Error("two long keys sharing a prefix share a counter")
	}
	ctx := context.Background()
	rdb := newClient(t, url)
	prefix := "ratelimit:" + three.Name + ":"
	keys, err := rdb.Keys(ctx, prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 {
		t.Fatalf("keys %q, want 2", keys)
	}
	hashed := regexp.MustCompile(`^sha256:[0-9a-f]{64}:1893578400$`) // 2030-01-02T10:00:00Z
	for _, k := range keys {
		if !hashed.MatchString(strings.TrimPrefix(k, prefix)) {
			t.Errorf("key %q: want %s<hashed key>:<window start>", k, prefix)
		}
		ttl, err := rdb.TTL(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if want := windowEnd.Sub(t0) + keyExpirySlack; ttl <= 0 || ttl > want {
			t.Errorf("key %q expires in %v, want within %v", k, ttl, want)
		}
	}
}

func TestTake_TwoGatewaysShareOneBudgetThroughRedis(t *testing.T) {
	t.Parallel()
	three := tierFor(t, 3)
	url := sharedRedisURL(t)
	c := newClock(t0)
	a, b := newGateway(t, url, c), newGateway(t, url, c)
	allowed := 0
	for i := range 10 {
		g := a
		if i%2 == 1 {
			g = b
		}
		if g.Take(context.Background(), three, "ip:1").Allowed {
			allowed++
		}
	}
	if allowed != 3 {
		t.Errorf("two gateways allowed %d, want one budget of 3", allowed)
	}
}

func TestTake_ParallelRequestsAllowExactlyTheLimit(t *testing.T) {
	t.Parallel()
	t.Run("counting in Redis", func(t *testing.T) {
		t.Parallel()
		fifty := tierFor(t, 50)
		g := newGateway(t, sharedRedisURL(t), newClock(t0))
		if n := takeParallel(g, fifty, "ip:1", 300); n != 50 {
			t.Errorf("allowed %d of 300, want 50", n)
		}
	})
	t.Run("counting in process", func(t *testing.T) {
		t.Parallel()
		fifty := tierFor(t, 50)
		g := newGateway(t, unreachableRedisURL(t), newClock(t0))
		if n := takeParallel(g, fifty, "ip:1", 300); n != 50 {
			t.Errorf("allowed %d of 300, want 50", n)
		}
	})
}

func TestTake_UnreachableRedisFallsBackToInProcessLimitsLoggedOnce(t *testing.T) {
	t.Parallel()
	three := tierFor(t, 3)
	g := newGateway(t, unreachableRedisURL(t), newClock(t0))
	if n := takeN(g, three, "ip:1", 10); n != 3 {
		t.Errorf("allowed %d of 10, want 3", n)
	}
	if n := takeN(g, three, "ip:2", 2); n != 2 {
		t.Errorf("another key allowed %d of 2", n)
	}
	if trips := g.roundTrip.Load(); trips != 1 {
		t.Errorf("%d Redis attempts within the cooldown, want only the one that failed", trips)
	}
	g.clock.Advance(redisCooldown)
	takeN(g, three, "ip:3", 5)
	if trips := g.roundTrip.Load(); trips != 2 {
		t.Errorf("%d Redis attempts, want one probe after the cooldown", trips)
	}
	if n := g.log.count("Redis unreachable"); n != 1 {
		t.Errorf("outage logged %d times, want once", n)
	}
}

func TestTake_RedisOutageKeepsLimitsPerGatewayAndSharedCountingResumesWhenRedisReturns(t *testing.T) {
	t.Parallel()
	three := tierFor(t, 3)
	srv := startRedis(t)
	c := newClock(t0)
	a, b := newGateway(t, srv.URL(), c), newGateway(t, srv.URL(), c)
	if got := a.Take(context.Background(), three, "ip:1"); got.Remaining != 2 {
		t.Fatalf("before the outage: %+v", got)
	}

	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	// Counts in Redis are not known to the in-process counters: each gateway has 3 again.
	if n := takeN(a, three, "ip:1", 5); n != 3 {
		t.Errorf("gateway A allowed %d of 5 during the outage, want 3", n)
	}
	if n := takeN(b, three, "ip:1", 5); n != 3 {
		t.Errorf("gateway B allowed %d of 5 during the outage, want its own 3", n)
	}

	if err := srv.Start(context.Background(), ""); err != nil {
		t.Fatal(err)
	}
	c.Advance(redisCooldown)
	a.Take(context.Background(), three, "ip:2")
	got := b.Take(context.Background(), three, "ip:2")
	if got.Remaining != 1 {
		t.Errorf("after recovery, B sees %d remaining of the budget A also spends, want 1", got.Remaining)
	}
	for name, g := range map[string]*gateway{"A": a, "B": b} {
		if n := g.log.count("Redis unreachable"); n != 1 {
			t.Errorf("gateway %s logged the outage %d times, want once", name, n)
		}
		if n := g.log.count("Redis reachable again"); n != 1 {
			t.Errorf("gateway %s logged the recovery %d times, want once", name, n)
		}
	}
}

func TestTake_AClientHangingUpIsNotARedisFailure(t *testing.T) {
	t.Parallel()
	three := tierFor(t, 3)
	g := newGateway(t, sharedRedisURL(t), newClock(t0))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	g.Take(ctx, three, "ip:1")
	if got := g.Take(context.Background(), three, "ip:1"); got.Remaining != 1 {
		t.Errorf("remaining %d, want 1: the cancelled request was not counted in Redis", got.Remaining)
	}
	if n := g.log.count("Redis unreachable"); n != 0 {
		t.Error("a cancelled request context was logged as a Redis outage")
	}
}

func TestWindowTable_ForgetsEndedWindowsAndStopsGrowingWhenFull(t *testing.T) {
	t.Parallel()
	table := windowTable{maxKeys: 2}
	table.add("a", windowEnd, t0)
	table.add("b", windowEnd, t0)
	if n := table.add("c", windowEnd, t0); n != 1 || table.has("c", t0) {
		t.Errorf("a full table stored a new key (count %d)", n)
	}
	if n := table.add("a", windowEnd, t0); n != 2 {
		t.Errorf("a stored key counts %d, want 2", n)
	}
	if table.has("a", windowEnd) {
		t.Error("an entry outlived its window")
	}
	table.add("c", windowEnd.Add(time.Hour), windowEnd.Add(sweepEvery))
	if len(table.entries) != 1 {
		t.Errorf("%d entries after a sweep, want only the live one", len(table.entries))
	}
}

func TestTake_HitsQueuedDuringARoundTripShareTheNextAndEachGetsItsOwnCount(t *testing.T) {
	t.Parallel()
	tier := tierFor(t, 1000)
	g := newGateway(t, sharedRedisURL(t), newClock(t0))
	// The first pipeline is held until every other request is queued behind it, so the
	// test does not depend on how fast this machine schedules goroutines.
	const n = 300
	// A first request opens the connection (go-redis sets it up with a pipeline of its own).
	g.Take(context.Background(), tier, "ip:warm-up")
	// The warm-up's sender stays running for a moment after answering; a request queued
	// then would ride its pipeline instead of the held first one.
	waitUntil(t, "the warm-up sender to stop", g.idle)
	before := g.roundTrip.Load()
	first := make(chan struct{})
	var once sync.Once
	g.Limiter.redis.AddHook(holdPipelines{wait: func() {
		once.Do(func() {
			<-first
		})
	}})
	results := make(chan Result, n)
	// Every sender is in wg, so that closing results after wg.Wait is ordered after
	// every send (the race detector sees no order in len(results)).
	var wg sync.WaitGroup
	wg.Go(func() { results <- g.Take(context.Background(), tier, "ip:1") })
	waitUntil(t, "the first request's pipeline to be out", func() bool { return g.queued(0) })
	for i := range n - 1 {
		key := "ip:1"
		if i%3 == 0 {
			key = "ip:2"
		}
		wg.Go(func() { results <- g.Take(context.Background(), tier, key) })
	}
	waitUntil(t, "every other request to queue behind it", func() bool { return g.queued(n - 1) })
	close(first)
	wg.Wait()
	close(results)
	if trips := g.roundTrip.Load() - before; trips != 2 {
		t.Errorf("%d round trips for one request and %d queued behind it, want 2", trips, n-1)
	}
	seen := map[int]int{}
	for r := range results {
		if !r.Allowed {
			t.Fatalf("refused under the limit: %+v", r)
		}
		seen[r.Remaining]++
	}
	// ip:1 took 200 hits (999 … 800 remaining), ip:2 100 (999 … 900): every count once.
	for rem := 800; rem <= 999; rem++ {
		want := 1
		if rem >= 900 {
			want = 2
		}
		if seen[rem] != want {
			t.Errorf("remaining %d answered %d times, want %d", rem, seen[rem], want)
		}
	}
}

// queued reports whether exactly n hits wait for the next pipeline (0: the first one is
// out and nothing waits).
func (g *gateway) queued(n int) bool {
	c := &g.Limiter.coalesce
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.running && len(c.queue) == n
}

// idle reports whether the coalescer has no sender running.
func (g *gateway) idle() bool {
	c := &g.Limiter.coalesce
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.running
}

// waitUntil polls cond, failing the test rather than hanging when it never holds.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// holdPipelines calls wait before every pipeline is sent.
type holdPipelines struct{ wait func() }

func (h holdPipelines) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h holdPipelines) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h holdPipelines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.wait()
		return next(ctx, cmds)
	}
}
