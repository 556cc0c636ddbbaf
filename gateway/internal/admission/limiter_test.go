package admission

import (
	"sync"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/pkg/config"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// clock is a time the test moves.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newTestLimiter(c *clock, cfg Config) *Limiter {
	cfg.Now = c.now
	return NewLimiter(cfg)
}

// strictLimiter is a limiter of a fixed limit whose clock stands still: it never turns
// calm, so every request past the limit meets the strict rules however slow the test.
func strictLimiter(limit int) *Limiter {
	return newTestLimiter(&clock{t: time.Unix(1e9, 0)}, Config{MinLimit: limit, MaxLimit: limit, InitialLimit: limit})
}

// window runs one window of n requests of tenant, each finishing after latency, with at
// most the limit in flight, and returns how many were refused.
func window(l *Limiter, c *clock, tenant string, n int, latency time.Duration) (refused int) {
	var dones []func(time.Duration)
	for range n {
		done, reason := l.Acquire(tenant)
		if done == nil {
			if reason == "" {
				panic("refusal without a reason")
			}
			refused++
			continue
		}
		dones = append(dones, done)
	}
	c.add(l.cfg.Window)
	for _, d := range dones {
		d(latency)
	}
	return refused
}

func TestRequestsOverTheLimitAreRefusedAtOnce(t *testing.T) {
	c := &clock{t: time.Unix(1e9, 0)}
	l := newTestLimiter(c, Config{MinLimit: 4, MaxLimit: 4, InitialLimit: 4})
	var dones []func(time.Duration)
	for range 4 {
		done, _ := l.Acquire("t")
		if done == nil {
			t.Fatal("refused below the limit")
		}
		dones = append(dones, done)
	}
	if done, reason := l.Acquire("t"); done != nil || reason != ReasonLimit {
		t.Fatalf("fifth request: admitted %v, reason %q; want refused for the limit", done != nil, reason)
	}
	dones[0](time.Millisecond)
	dones[0](time.Millisecond) // a second Done must not free a second slot
	if done, _ := l.Acquire("t"); done == nil {
		t.Fatal("refused after a request finished")
	}
	if done, _ := l.Acquire("t"); done != nil {
		t.Fatal("a repeated Done freed a slot twice")
	}
}

func TestLimitShrinksWhenLatencyRisesAndGrowsBackWhenItFalls(t *testing.T) {
	c := &clock{t: time.Unix(1e9, 0)}
	l := newTestLimiter(c, Config{MinLimit: 4, MaxLimit: 200, InitialLimit: 50, Tolerance: 2})
	for range 20 {
		window(l, c, "t", 50, 2*time.Millisecond)
	}
	calm := l.Limit()
	if calm < 50 {
		t.Fatalf("limit %d after calm busy windows; want it to have grown from 50", calm)
	}
	// Latency ten times the baseline: the queue is standing, the limit must give way.
	for range 30 {
		window(l, c, "t", 200, 20*time.Millisecond)
	}
	if got := l.Limit(); got > calm/2 {
		t.Fatalf("limit %d after slow windows; want well under %d", got, calm)
	}
	for range 100 {
		window(l, c, "t", 200, 2*time.Millisecond)
	}
	if got := l.Limit(); got <= calm {
		t.Fatalf("limit %d after latency came back; want above %d again", got, calm)
	}
}

func TestLimitDoesNotGrowWhenTheLoadNeverReachesIt(t *testing.T) {
	c := &clock{t: time.Unix(1e9, 0)}
	l := newTestLimiter(c, Config{MinLimit: 4, MaxLimit: 1000, InitialLimit: 40})
	for range 100 {
		window(l, c, "t", 10, time.Millisecond)
	}
	if got := l.Limit(); got != 40 {
		t.Fatalf("limit %d; want 40: ten requests at a time say nothing about forty", got)
	}
}

// A busy machine stalls now and then for tens of milliseconds; at a moderate load the
// requests that arrive meanwhile pile up to two or three times the usual number in
// flight. That is no overload, and none of them may be refused; nor may a probe refuse
// what is over MinLimit while nothing else is refused.
func TestAStallAtAModerateLoadRefusesNothing(t *testing.T) {
	c := &clock{t: time.Unix(1e9, 0)}
	l := newTestLimiter(c, Config{MinLimit: 16, MaxLimit: 1000, InitialLimit: 32})
	for i := range 150 { // 75 s, past two probes' times, of 20 requests at a time, 2 ms each
		if refused := window(l, c, "t", 20, 2*time.Millisecond); refused > 0 {
			t.Fatalf("window %d: %d of 20 refused at a steady moderate load; limit %d", i, refused, l.Limit())
		}
	}
	var held []func(time.Duration)
	for i := range 3 * 20 { // the stall: two tenants' requests pile up together
		done, _ := l.Acquire([]string{"a", "b"}[i%2])
		if done == nil {
			t.Fatalf("request %d of 60 refused in a stall; limit %d", i+1, l.Limit())
		}
		held = append(held, done)
	}
	c.add(l.cfg.Window)
	for _, done := range held {
		done(30 * time.Millisecond)
	}
	// Past its share of twice the limit even a calm limiter refuses a tenant, and turns
	// strict: the limit holds again for whoever holds its share. The rest of the hard
	// bound stays for the tenants that come after: a flood that starts on a calm limiter
	// does not leave a quiet tenant refused until its first requests finish.
	l = newTestLimiter(c, Config{MinLimit: 4, MaxLimit: 4, InitialLimit: 4})
	c.add(strictWindows * l.cfg.Window)
	admitted := 0
	for range 100 {
		if done, _ := l.Acquire("t"); done != nil {
			admitted++
		}
	}
	if admitted != 2*4 {
		t.Fatalf("a calm limiter of 4 admitted one tenant %d at once; want twice the limit, 8", admitted)
	}
	quiet := 0
	for range 100 {
		if done, _ := l.Acquire("quiet"); done != nil {
			quiet++
		}
	}
	if quiet != lightRoom {
		t.Fatalf("next to it a quiet tenant got %d in flight; want the rest of the hard bound, %d", quiet, lightRoom)
	}
	// A window whose latency is over the target is a sign of overload too, refusals or
	// not: past the limit, the next request is refused.
	l = newTestLimiter(c, Config{MinLimit: 4, MaxLimit: 20, InitialLimit: 20, LatencyFloor: 10 * time.Millisecond})
	c.add(strictWindows * l.cfg.Window)
	window(l, c, "t", minSamples, time.Millisecond)
	window(l, c, "t", minSamples, 100*time.Millisecond)
	for range l.Limit() {
		if done, _ := l.Acquire("t"); done == nil {
			t.Fatal("refused under the limit")
		}
	}
	if done, _ := l.Acquire("t"); done != nil {
		t.Fatal("admitted past the limit right after a window over the latency target")
	}
}

func TestLimitStaysWithinItsBounds(t *testing.T) {
	c := &clock{t: time.Unix(1e9, 0)}
	l := newTestLimiter(c, Config{MinLimit: 6, MaxLimit: 30, InitialLimit: 20})
	for range 200 {
		window(l, c, "t", 40, time.Millisecond)
	}
	if got := l.Limit(); got != 30 {
		t.Fatalf("limit %d; want the maximum 30", got)
	}
	for range 100 { // latency a hundred times the baseline: a long queue
		window(l, c, "t", 40, 100*time.Millisecond)
	}
	if got := l.Limit(); got != 6 {
		t.Fatalf("limit %d; want the minimum 6", got)
	}
}

// A standing queue must not become the baseline: under a long overload the probes drain
// it, so the limit settles near what the server sustains rather than creeping up.
func TestBaselineIsRemeasuredDuringALongOverload(t *testing.T) {
	c := &clock{t: time.Unix(1e9, 0)}
	l := newTestLimiter(c, Config{MinLimit: 4, MaxLimit: 500, InitialLimit: 100, BaselineWindow: 5 * time.Second})
	// A server that works on 10 requests at a time, 2 ms each: n in flight take
	// 2 ms × n/10. The load is always more than the limit.
	latency := func(n int) time.Duration { return 2 * time.Millisecond * time.Duration(max(1, n/10)) }
	end := c.now().Add(time.Minute)
	sawProbe := false
	for c.now().Before(end) {
		var dones []func(time.Duration)
		for {
			done, _ := l.Acquire("t")
			if done == nil {
				break
			}
			dones = append(dones, done)
		}
		if len(dones) < l.Limit()/2 {
			sawProbe = true
		}
		d := latency(len(dones))
		c.add(d)
		for _, done := range dones {
			done(d)
		}
	}
	if !sawProbe {
		t.Fatal("no probe in a minute of overload")
	}
	if got := l.Limit(); got > 40 {
		t.Fatalf("limit %d after a minute of overload; want at most the 20-odd in flight that keep the latency within twice 2 ms", got)
	}
	if got := l.Limit(); got < 10 {
		t.Fatalf("limit %d; below the 10 the server works on at once, it would waste capacity", got)
	}
}

func TestAFloodingTenantLeavesTheOthersTheirShare(t *testing.T) {
	c := &clock{t: time.Unix(1e9, 0)}
	l := newTestLimiter(c, Config{MinLimit: 10, MaxLimit: 10, InitialLimit: 10})
	acquire := func(tenant string) func(time.Duration) {
		t.Helper()
		done, reason := l.Acquire(tenant)
		if done == nil {
			t.Fatalf("%s refused (%s) at %d in flight", tenant, reason, l.InFlight())
		}
		return done
	}
	// Tenant a floods: it holds every slot.
	var as []func(time.Duration)
	for range 10 {
		as = append(as, acquire("a"))
	}
	if done, reason := l.Acquire("a"); done != nil || reason != ReasonLimit {
		t.Fatalf("a alone past the limit: admitted %v reason %q", done != nil, reason)
	}
	// b gets in past the limit while it is light by either measure: it holds less than
	// its equal share (10 ÷ 2 tenants), or it has asked much less than a (up to
	// lightFloor requests while a is the busiest); a stays refused.
	var bs []func(time.Duration)
	for range 4 {
		bs = append(bs, acquire("b"))
	}
	if done, reason := l.Acquire("a"); done != nil || reason != ReasonShare {
		t.Fatalf("a past its share: admitted %v reason %q", done != nil, reason)
	}
	for range lightFloor - 4 {
		bs = append(bs, acquire("b"))
	}
	if done, reason := l.Acquire("b"); done != nil || reason != ReasonShare {
		t.Fatalf("b past its share and asking as much as a: admitted %v reason %q", done != nil, reason)
	}
	// A tenant never seen has nothing in flight: light, whatever the others hold.
	bs = append(bs, acquire("c"))
	// As a's requests finish, a is refused until the total is under the limit again,
	// while b and c keep their shares.
	for _, done := range as[:6] {
		done(time.Millisecond)
	}
	if done, _ := l.Acquire("a"); done != nil {
		t.Fatalf("a admitted at %d in flight, the limit 10", l.InFlight()-1)
	}
	for _, done := range bs {
		done(time.Millisecond)
	}
	acquire("a")
}

// The share is what a tenant holds now: once the flood's requests have finished, the
// tenant that flooded is light again next to one that holds slots.
func TestSharesFollowWhatIsInFlight(t *testing.T) {
	c := &clock{t: time.Unix(1e9, 0)}
	l := newTestLimiter(c, Config{MinLimit: 10, MaxLimit: 10, InitialLimit: 10})
	for range 5 {
		window(l, c, "a", 20, time.Millisecond)
	}
	for range 10 {
		if done, _ := l.Acquire("b"); done == nil {
			t.Fatal("b refused below the limit")
		}
	}
	if done, _ := l.Acquire("a"); done == nil {
		t.Fatal("a, with nothing in flight, refused while b fills the limit")
	}
	if done, reason := l.Acquire("b"); done != nil || reason != ReasonShare {
		t.Fatalf("b, holding the limit, past it: admitted %v reason %q", done != nil, reason)
	}
}

// In parallel: whatever the interleaving, the in-flight count returns to zero and never
// exceeds the hard bound (twice the limit and lightRoom).
func TestParallelAcquireAndDoneKeepTheCount(t *testing.T) {
	l := NewLimiter(Config{MinLimit: 8, MaxLimit: 8, InitialLimit: 8})
	var wg sync.WaitGroup
	var mu sync.Mutex
	peak := 0
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tenant := []string{"a", "b", "c"}[w%3]
			for range 2000 {
				done, _ := l.Acquire(tenant)
				if done == nil {
					continue
				}
				n := l.InFlight()
				mu.Lock()
				peak = max(peak, n)
				mu.Unlock()
				done(time.Microsecond)
			}
		}()
	}
	wg.Wait()
	if n := l.InFlight(); n != 0 {
		t.Fatalf("%d in flight after every request finished", n)
	}
	if peak > 16+lightRoom {
		t.Fatalf("peak %d in flight; the bound is twice the limit and lightRoom, %d", peak, 16+lightRoom)
	}
}

// A new flood gets its equal share past the limit and no more, and a quiet tenant keeps
// its room meanwhile.
func TestANewFloodCannotTakeAQuietTenantsRoom(t *testing.T) {
	c := &clock{t: time.Unix(1e9, 0)}
	l := newTestLimiter(c, Config{MinLimit: 10, MaxLimit: 10, InitialLimit: 10})
	for range 10 {
		if done, _ := l.Acquire("filler"); done == nil {
			t.Fatal("refused below the limit")
		}
	}
	admitted := 0
	for range 50 {
		if done, _ := l.Acquire("new-flood"); done != nil {
			admitted++
		}
	}
	// Its share is 5 (10 ÷ 2 tenants); while it has asked less than the busiest tenant
	// and at most lightFloor times it is light by its demand, so up to lightFloor - 1.
	if admitted < 5 || admitted >= lightFloor {
		t.Fatalf("the new flood got %d in flight past the limit; want from its share, 5, to under lightFloor, %d", admitted, lightFloor)
	}
	if done, reason := l.Acquire("quiet"); done == nil {
		t.Fatalf("the quiet tenant refused (%s) while a new flood started", reason)
	}
}

// Latency that swings under the floor is a busy machine's noise, not a queue of ours: the
// limit holds, though the average is many times the baseline; past the floor it shrinks.
func TestLatencyUnderTheFloorDoesNotShrinkTheLimit(t *testing.T) {
	c := &clock{t: time.Unix(1e9, 0)}
	l := newTestLimiter(c, Config{MinLimit: 4, MaxLimit: 40, InitialLimit: 40, LatencyFloor: 20 * time.Millisecond})
	for range 10 {
		window(l, c, "t", 40, time.Millisecond)
	}
	for range 20 {
		window(l, c, "t", 40, 15*time.Millisecond)
	}
	if got := l.Limit(); got != 40 {
		t.Fatalf("limit %d after windows of 15 ms (baseline 1 ms, floor 20 ms); want 40", got)
	}
	for range 20 {
		window(l, c, "t", 40, 60*time.Millisecond)
	}
	if got := l.Limit(); got > 20 {
		t.Fatalf("limit %d after windows of 60 ms, three times the floor; want it halved at least", got)
	}
}

// A quiet tenant whose requests slowed down under a flood holds more than an equal share
// of the limit, yet asks far less often than the flood: it stays light by its demand, up
// to the hard bound, while the flood stays refused.
func TestAQuietTenantWhoseRequestsSlowedDownKeepsGettingIn(t *testing.T) {
	c := &clock{t: time.Unix(1e9, 0)}
	l := newTestLimiter(c, Config{MinLimit: 10, MaxLimit: 10, InitialLimit: 10})
	for range 10 {
		if done, _ := l.Acquire("flood"); done == nil {
			t.Fatal("refused below the limit")
		}
	}
	for range 90 {
		if done, _ := l.Acquire("flood"); done != nil {
			t.Fatal("the flood admitted past the limit")
		}
	}
	admitted := 0
	for range 40 {
		if done, _ := l.Acquire("quiet"); done != nil {
			admitted++
		}
	}
	// Its equal share is 5 (10 ÷ 2 tenants); the hard bound, 2 × 10 + lightRoom in flight,
	// leaves it 20.
	if want := 2*10 + lightRoom - 10; admitted != want {
		t.Fatalf("the quiet tenant got %d in flight past the limit; want %d (up to the hard bound)", admitted, want)
	}
	if done, _ := l.Acquire("flood"); done != nil {
		t.Fatal("the flood admitted while the quiet tenant holds slots")
	}
}

// A flood that stopped is no measure of who asks little: whether it stopped seconds ago
// (its counts faded out) or just now (they have not), a new flood is not light next to
// it, and past the limit it gets no more than a flood does.
func TestAFloodThatStoppedDoesNotMakeTheNextLookLight(t *testing.T) {
	for _, quiet := range []time.Duration{0, 10 * time.Second} {
		c := &clock{t: time.Unix(1e9, 0)}
		l := newTestLimiter(c, Config{MinLimit: 2, MaxLimit: 2, InitialLimit: 2})
		for range 4 {
			window(l, c, "old-flood", 5000, time.Millisecond)
		}
		c.add(quiet) // nobody asks meanwhile
		if quiet > 0 {
			// A straggler of the old flood, still in flight: it counts for one request now,
			// not for the thousands of ten seconds ago.
			if done, _ := l.Acquire("old-flood"); done == nil {
				t.Fatal("refused below the limit")
			}
		}
		// Ten seconds of nothing leave the limiter calm: the new flood's start gets its
		// share of twice the limit (4 ÷ 2 tenants in flight), and its first refusal makes
		// the limit strict again. Those requests finish, and the flood goes on.
		if quiet > 0 {
			var onset []func(time.Duration)
			for range 100 {
				if done, _ := l.Acquire("new-flood"); done != nil {
					onset = append(onset, done)
				}
			}
			if len(onset) != 2 {
				t.Errorf("a flood starting on a calm limiter got %d in flight; want its share of twice the limit, 2", len(onset))
			}
			for _, done := range onset {
				done(time.Millisecond)
			}
		}
		admitted := 0
		for range 100 {
			if done, _ := l.Acquire("new-flood"); done != nil {
				admitted++
			}
		}
		if admitted > 2 || (quiet > 0 && admitted > 1) {
			t.Errorf("%v after the old flood stopped, the new one got %d in flight at a limit of 2: the old flood still counted as the busiest", quiet, admitted)
		}
		if done, reason := l.Acquire("quiet"); done == nil {
			t.Errorf("%v after the old flood stopped, the quiet tenant was refused (%s) while the new flood held the limit", quiet, reason)
		}
	}
}

// closedLoop runs clients that each ask again as soon as they are answered, for d: every
// round the admitted ones finish after latency(how many were admitted). It returns how
// many were refused.
func closedLoop(l *Limiter, c *clock, clients int, latencyOf func(admitted int) time.Duration, d time.Duration) (refused int) {
	for end := c.now().Add(d); c.now().Before(end); {
		var dones []func(time.Duration)
		for range clients {
			if done, _ := l.Acquire("t"); done != nil {
				dones = append(dones, done)
			} else {
				refused++
			}
		}
		latency := latencyOf(len(dones))
		c.add(latency)
		for _, done := range dones {
			done(latency)
		}
	}
	return refused
}

// fixed is a latency whatever the number in flight.
func fixed(latency time.Duration) func(int) time.Duration {
	return func(int) time.Duration { return latency }
}

// A machine that is merely full (its answers slowed by work the limit does not hold
// back, such as the refusals' own) keeps the limit its throughput has earned: at the
// rate it has shown, that many requests in flight finish within the latency floor, and
// refusing more of them would only turn answers into refusals. (A queue the limit does
// cause still shrinks it: TestBaselineIsRemeasuredDuringALongOverload.)
func TestAFullMachineKeepsTheLimitItsThroughputEarned(t *testing.T) {
	c := &clock{t: time.Unix(1e9, 0)}
	l := newTestLimiter(c, Config{MinLimit: 16, MaxLimit: 1000, InitialLimit: 160, LatencyFloor: 20 * time.Millisecond})
	// 40 clients answered in 5 ms: 8,000 a second, a baseline of 5 ms, a target of 20.
	if refused := closedLoop(l, c, 40, fixed(5*time.Millisecond), 5*time.Second); refused > 0 {
		t.Fatalf("%d refused under the limit", refused)
	}
	if got := testutil.ToFloat64(bestRateGauge); got != 8000 {
		t.Fatalf("keyhouse_admission_best_rate_per_second %g; want 8000", got)
	}
	// 160 clients now, and the machine slows to 30 ms an answer (5,333 a second), over
	// the target, for 20 s: 8,000 a second within 20 ms is 160 in flight, and the limit
	// stays there.
	closedLoop(l, c, 160, fixed(30*time.Millisecond), 20*time.Second)
	if got := l.Limit(); got < 160 {
		t.Fatalf("limit %d after a slower full machine; want at least the 160 that 8,000/s keeps in flight within 20 ms", got)
	}
}

// A limit the load reaches, with latency within the target, rises at once to what the
// window's rate keeps in flight at the target latency: at that rate so many finish
// within it, and a closed loop of clients that ask again as soon as they are refused
// would otherwise spin on refusals for the seconds √limit a window takes.
func TestTheLimitRisesAtOnceToWhatTheRateKeepsWithinTheTarget(t *testing.T) {
	c := &clock{t: time.Unix(1e9, 0)}
	l := newTestLimiter(c, Config{MinLimit: 16, MaxLimit: 1000, InitialLimit: 32, LatencyFloor: 20 * time.Millisecond})
	// 160 clients of a server that answers in 4 ms: 32 at a time are 8,000 a second,
	// 160 in flight at 20 ms.
	closedLoop(l, c, 160, fixed(4*time.Millisecond), time.Second)
	if got := l.Limit(); got < 160 {
		t.Fatalf("limit %d after a second of 8,000 answers a second in 4 ms; want 160", got)
	}
	if refused := closedLoop(l, c, 160, fixed(4*time.Millisecond), time.Second); refused > 0 {
		t.Fatalf("%d refused in the second second", refused)
	}
}

// The gateway's default settings (the ADMISSION_* defaults, as the gateway reads them)
// keep the latency floor above what a gateway that is merely full shows. A small
// machine's gateway at capacity keeps its misses in flight about 25 ms (128 clients at
// 5,000 answers a second, each answer as late as the queue ahead of it): the limit must
// let that closed loop through, since the refusals would cost CPU the answers need and
// their clients would ask again at once.
func TestTheDefaultSettingsLetAFullSmallMachineAnswerItsClosedLoop(t *testing.T) {
	settings, err := config.LoadFrom(func(name string) (string, bool) { return "k", name == "ADMIN_API_KEY" })
	if err != nil {
		t.Fatal(err)
	}
	c := &clock{t: time.Unix(1e9, 0)}
	l := newTestLimiter(c, ConfigFrom(settings))
	atCapacity := func(admitted int) time.Duration { return time.Duration(admitted) * time.Second / 5000 }
	// The limit climbs from its initial 32 within the first seconds.
	closedLoop(l, c, 128, atCapacity, 5*time.Second)
	if refused := closedLoop(l, c, 128, atCapacity, 20*time.Second); refused > 0 {
		t.Fatalf("%d of a 128-client closed loop refused at 5,000 answers a second (25.6 ms each); limit %d", refused, l.Limit())
	}
}
