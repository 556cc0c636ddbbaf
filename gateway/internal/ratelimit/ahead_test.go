package ratelimit

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A request far from its limit is answered from what the gateway knows, and its hit is
// counted in Redis behind it: a Redis that takes its time does not hold the request up.
func TestTake_ARequestFarFromItsLimitIsAnsweredWithoutWaitingForRedis(t *testing.T) {
	t.Parallel()
	tier := tierFor(t, 1000)
	url := sharedRedisURL(t)
	g := newGateway(t, url, newClock(t0))
	release := make(chan struct{})
	var held atomic.Int64
	g.Limiter.redis.AddHook(holdPipelines{wait: func() {
		held.Add(1)
		<-release
	}})
	ctx := context.Background()
	for i, want := range []int{999, 998, 997} {
		answered := make(chan Result, 1)
		go func() { answered <- g.Limiter.Take(ctx, tier, "ip:1") }()
		select {
		case got := <-answered:
			if !got.Allowed || got.Remaining != want {
				t.Fatalf("request %d: %+v, want allowed with %d remaining", i+1, got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("request %d waited for a Redis that holds every round trip", i+1)
		}
	}
	waitUntil(t, "the hits to be on their way to Redis", func() bool { return held.Load() > 0 })
	close(release)
	waitUntil(t, "Redis to answer", g.idle)
	if n := redisCount(t, url, tier, "ip:1"); n != 3 {
		t.Errorf("Redis counted %d of the 3 requests decided ahead of it", n)
	}
}

// Deciding ahead must not let a gateway's own hits still on their way to Redis go
// uncounted: on one gateway, the limit is exact under any concurrency.
func TestTake_ParallelRequestsAheadOfRedisAllowExactlyTheLimit(t *testing.T) {
	t.Parallel()
	g := newGateway(t, sharedRedisURL(t), newClock(t0))
	for range 5 {
		for _, limit := range []int{20, 200, 1000} {
			tier := tierFor(t, limit)
			if n := takeParallel(g, tier, "ip:1", 3*limit); n != limit {
				t.Errorf("limit %d: allowed %d of %d", limit, n, 3*limit)
			}
		}
	}
}

// One client's requests one after another, spread over two gateways: each gateway learns
// the other's hits from Redis's answers, and the limit holds exactly.
func TestTake_TwoGatewaysShareALargeBudgetExactlyForRequestsOneAfterAnother(t *testing.T) {
	t.Parallel()
	tier := tierFor(t, 100)
	url := sharedRedisURL(t)
	c := newClock(t0)
	a, b := newGateway(t, url, c), newGateway(t, url, c)
	allowed := 0
	for i := range 300 {
		g := []*gateway{a, b}[i%2]
		if g.Limiter.Take(context.Background(), tier, "ip:1").Allowed {
			allowed++
		}
		// The client's next request comes after this one's answer; by then its hit is in
		// Redis (a round trip after the decision), which the test waits for explicitly.
		waitUntil(t, "the hit to reach Redis", g.idle)
	}
	if allowed != 100 {
		t.Errorf("two gateways allowed %d, want one budget of 100", allowed)
	}
}

// What deciding ahead costs in exactness across gateways: a gateway that has not heard
// of the other's hits lets through at most aheadInFlight of a key past its limit before
// Redis's answers tell it, and a burst on every gateway at once exceeds the limit by at
// most that much per gateway.
func TestTake_AcrossGatewaysALimitIsExceededByAtMostWhatEachHasUnanswered(t *testing.T) {
	t.Parallel()
	url := sharedRedisURL(t)
	t.Run("a gateway that has not heard of the other's hits", func(t *testing.T) {
		t.Parallel()
		tier := tierFor(t, 100)
		c := newClock(t0)
		a, b := newGateway(t, url, c), newGateway(t, url, c)
		takeN(a, tier, "ip:1", 50)
		waitUntil(t, "A's hits to reach Redis", a.idle)
		takeN(b, tier, "ip:1", 100)
		waitUntil(t, "B's hits to reach Redis", b.idle)
		// A last heard 50 of 100; the key is spent.
		if n := takeParallel(a, tier, "ip:1", 50); n > aheadInFlight {
			t.Errorf("A let %d through a spent limit, want at most %d", n, aheadInFlight)
		}
		if a.Limiter.Take(context.Background(), tier, "ip:1").Allowed {
			t.Error("A still allows the key after Redis answered it")
		}
	})
	t.Run("a burst on two gateways at once", func(t *testing.T) {
		t.Parallel()
		tier := tierFor(t, 100)
		c := newClock(t0)
		gateways := []*gateway{newGateway(t, url, c), newGateway(t, url, c)}
		var allowed atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range 600 {
			g := gateways[i%2]
			wg.Go(func() {
				<-start
				if g.Limiter.Take(context.Background(), tier, "ip:1").Allowed {
					allowed.Add(1)
				}
			})
		}
		close(start)
		wg.Wait()
		if n := allowed.Load(); n < 100 || n > 100+2*aheadInFlight {
			t.Errorf("two gateways allowed %d in a burst, want 100 to %d", n, 100+2*aheadInFlight)
		}
	})
}

// While Redis fails, a hit decided ahead of it is counted in process, as a request that
// waited would have been, and the outage is logged once.
func TestTake_HitsDecidedAheadOfAFailingRedisAreCountedInProcess(t *testing.T) {
	t.Parallel()
	tier := tierFor(t, 100)
	g := newGateway(t, unreachableRedisURL(t), newClock(t0))
	allowed := 0
	for range 150 {
		if g.Limiter.Take(context.Background(), tier, "ip:1").Allowed {
			allowed++
		}
		waitUntil(t, "the hit's round trip to fail", g.idle)
	}
	if allowed != 100 {
		t.Errorf("allowed %d of 150, want 100", allowed)
	}
	if n := g.log.count("Redis unreachable"); n != 1 {
		t.Errorf("outage logged %d times, want once", n)
	}
}

func TestAheadTable_StopsTrackingNewKeysWhenFullAndForgetsEndedWindows(t *testing.T) {
	t.Parallel()
	table := aheadTable{maxKeys: 2, post: func(string, time.Time) {}}
	for _, key := range []string{"a", "b"} {
		if _, d := table.take(key, 1000, windowEnd, t0); d != decided {
			t.Fatalf("key %q: decision %d, want decided", key, d)
		}
	}
	if _, d := table.take("c", 1000, windowEnd, t0); d != untracked {
		t.Errorf("a full table tracked a new key (decision %d)", d)
	}
	table.answered("a", windowEnd, 40)
	if n, d := table.take("a", 1000, windowEnd, t0); d != decided || n != 41 {
		t.Errorf("after Redis answered 40: count %d, decision %d; want 41, decided", n, d)
	}
	if n, d := table.take("a", 1000, windowEnd.Add(15*time.Minute), windowEnd); d != decided || n != 1 {
		t.Errorf("the next window: count %d, decision %d; want 1, decided", n, d)
	}
	if table.size != 1 || len(table.windows) != 1 {
		t.Errorf("%d keys in %d windows after the first window ended, want 1 in 1", table.size, len(table.windows))
	}
}

func TestAheadTable_WaitsNearTheLimitAndBehindABurst(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		limit int
		bound int64
	}{{1000, 900}, {300, 270}, {100, 90}, {20, 10}, {10, 0}, {3, 0}} {
		if got := aheadBound(tc.limit); got != tc.bound {
			t.Errorf("limit %d: decided ahead up to %d, want %d", tc.limit, got, tc.bound)
		}
	}
	table := aheadTable{maxKeys: 10, post: func(string, time.Time) {}}
	table.answered("a", windowEnd, 0) // unknown keys are ignored
	for i := range aheadInFlight {
		if _, d := table.take("a", 1000, windowEnd, t0); d != decided {
			t.Fatalf("hit %d: decision %d, want decided", i+1, d)
		}
	}
	if _, d := table.take("a", 1000, windowEnd, t0); d != wait {
		t.Errorf("with %d hits unanswered: decision %d, want wait", aheadInFlight, d)
	}
	for range aheadInFlight + 1 {
		table.answered("a", windowEnd, 899)
	}
	if n, d := table.take("a", 1000, windowEnd, t0); d != decided || n != 900 {
		t.Errorf("at 899 of 1000: count %d, decision %d; want 900, decided", n, d)
	}
	table.answered("a", windowEnd, 900)
	if n, d := table.take("a", 1000, windowEnd, t0); d != wait || n != 901 {
		t.Errorf("at 900 of 1000: count %d, decision %d; want 901, wait", n, d)
	}
}

// redisCount is the count Redis holds for key in tier's window at t0.
func redisCount(t *testing.T, url string, tier Tier, key string) int64 {
	t.Helper()
	n, err := newClient(t, url).Get(context.Background(), redisKey(tier.Name, key, windowStart(t0, tier.Window))).Int64()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Hits posted ahead of Redis while no pipeline is out wait for company (postedWait)
// instead of taking a round trip each; a hit a request waits for takes them along at once,
// so their wait never delays an answer. The wait is lengthened here so that the test does
// not depend on how fast this machine runs the requests; with the default, the posted
// hits reach Redis on their own (TestTake_ARequestFarFromItsLimitIsAnsweredWithoutWaitingForRedis).
func TestTake_PostedHitsWaitForCompanyAndAHitSomeoneWaitsForTakesThemAlong(t *testing.T) {
	t.Parallel()
	url := sharedRedisURL(t)
	g := newGateway(t, url, newClock(t0))
	far, near := tierFor(t, 1000), tierFor(t, 5) // a limit of 10 or less is never decided ahead
	ctx := context.Background()
	// A first request opens the connection (go-redis sets it up with a pipeline of its own).
	g.Take(ctx, near, "ip:warm-up")
	waitUntil(t, "the warm-up's sender to stop", g.idle)
	g.Limiter.coalesce.postedWait = time.Hour
	before := g.roundTrip.Load()
	const posted = 10
	for i := range posted {
		if r := g.Take(ctx, far, fmt.Sprintf("ip:%d", i)); !r.Allowed || r.Remaining != 999 {
			t.Fatalf("request %d: %+v, want allowed with 999 remaining, answered ahead of Redis", i, r)
		}
	}
	if trips := g.roundTrip.Load() - before; trips != 0 {
		t.Fatalf("%d round trips for %d posted hits, want them waiting for company", trips, posted)
	}
	answered := make(chan Result, 1)
	go func() { answered <- g.Take(ctx, near, "ip:waits") }()
	select {
	case r := <-answered:
		if !r.Allowed || r.Remaining != 4 {
			t.Fatalf("the request that waits for Redis: %+v, want allowed with 4 remaining", r)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the request that waits for Redis waited for the posted hits' wait")
	}
	waitUntil(t, "the pipeline to finish", g.idle)
	if trips := g.roundTrip.Load() - before; trips != 1 {
		t.Errorf("%d round trips, want the waiting request's one, carrying the %d posted hits", trips, posted)
	}
	for i := range posted {
		if n := redisCount(t, url, far, fmt.Sprintf("ip:%d", i)); n != 1 {
			t.Errorf("ip:%d counted %d times in Redis, want 1", i, n)
		}
	}
}
