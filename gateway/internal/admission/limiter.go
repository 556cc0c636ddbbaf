package admission

import (
	"math"
	"sync"
	"time"

	"github.com/keyhouse/keyhouse/pkg/config"
)

// Config sets a Limiter's bounds and how it adapts.
type Config struct {
	// MinLimit and MaxLimit bound the concurrency limit (ADMISSION_MIN_LIMIT,
	// ADMISSION_MAX_LIMIT); InitialLimit is where it starts (clamped into the bounds).
	MinLimit, MaxLimit, InitialLimit int
	// Tolerance is how far the average latency may rise above the baseline before the
	// limit shrinks (ADMISSION_LATENCY_TOLERANCE, e.g. 2: twice the baseline).
	Tolerance float64
	// LatencyFloor is an average latency that never shrinks the limit, whatever the
	// baseline (ADMISSION_LATENCY_FLOOR; 0: none): on a busy machine the answers' latency
	// swings by milliseconds that no queue of this gateway causes, and a limit that
	// followed them down would refuse at a fraction of the capacity.
	LatencyFloor time.Duration
	// Window is how often the limit is recomputed from the latencies of the requests that
	// finished meanwhile (at least minSamples of them): 500 ms by default, long enough
	// that one stalled moment of a busy machine does not pass for a queue.
	Window time.Duration
	// BaselineWindow is how far back the baseline looks: the lowest window average of
	// that period. Every BaselineWindow/2 the limit drops to MinLimit for one window (a
	// probe), so that a standing queue cannot pass itself off as the baseline.
	BaselineWindow time.Duration
	// Now is the clock (time.Now when nil); tests move their own.
	Now func() time.Time
}

// lightFloor is how many requests in a window leave a tenant light by its demand when it
// is not the busiest: early in a window, or just after a flood began, a quiet tenant's
// two or three requests must not make it look heavy next to a flood that has only
// started counting.
const lightFloor = 10

// lightRoom is how far past twice the limit the light tenants' requests together may
// go: the hard bound on what is in flight is 2 × limit + lightRoom, whatever the number
// of tenants (made-up ones included).
const lightRoom = 10

// strictWindows is how long, in windows, the limit refuses after the last sign of
// overload (a refusal, or a window whose latency was over the target); see calm.
const strictWindows = 4

// minSamples is the fewest finished requests a window needs to move the limit: a window
// with one slow request says little.
const minSamples = 10

// Limiter is an adaptive concurrency limit shared fairly between tenants. The limit
// follows latency (see the package comment); Acquire admits or refuses at once, never
// queues.
type Limiter struct {
	cfg Config
	now func() time.Time

	mu       sync.Mutex
	limit    float64
	inflight int
	// held is each tenant's admitted requests in flight (tenants with none are absent).
	held map[string]int
	// asked counts each tenant's requests (admitted or not), fading to a quarter every
	// Window (sharesStart is the last time); heaviest is the most any tenant has, and
	// busiest the tenant that has it.
	asked       map[string]int
	heaviest    int
	busiest     string
	sharesStart time.Time

	windowStart time.Time
	windowSum   time.Duration
	windowCount int
	// windowPeak is the most requests in flight during the window: a limit that was
	// never reached is not raised (the load, not the limit, set the latency).
	windowPeak int

	history  []windowAverage
	baseline time.Duration
	// bestRate is the most requests a window of the last BaselineWindow finished per
	// second: the limit does not shrink below what it keeps in flight at the target
	// latency (see adapt).
	bestRate  float64
	nextProbe time.Time
	probeEnds time.Time
	// strictUntil is when the limiter turns calm again, strictWindows after the last
	// sign of overload (see calm).
	strictUntil time.Time
}

// windowAverage is what a closed window measured: its requests' average latency and how
// many of them finished per second.
type windowAverage struct {
	end  time.Time
	avg  time.Duration
	rate float64
}

// NewLimiter returns a limiter for cfg; zero fields take the package defaults.
func NewLimiter(cfg Config) *Limiter {
	if cfg.MinLimit <= 0 {
		cfg.MinLimit = DefaultMinLimit
	}
	if cfg.MaxLimit < cfg.MinLimit {
		cfg.MaxLimit = cfg.MinLimit
	}
	if cfg.InitialLimit <= 0 {
		cfg.InitialLimit = DefaultInitialLimit
	}
	cfg.InitialLimit = min(max(cfg.InitialLimit, cfg.MinLimit), cfg.MaxLimit)
	if cfg.Tolerance < 1 {
		cfg.Tolerance = DefaultTolerance
	}
	if cfg.Window <= 0 {
		cfg.Window = 500 * time.Millisecond
	}
	if cfg.BaselineWindow <= 0 {
		cfg.BaselineWindow = time.Minute
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	l := &Limiter{cfg: cfg, now: now, limit: float64(cfg.InitialLimit), held: map[string]int{}, asked: map[string]int{}}
	t := now()
	l.windowStart = t
	l.nextProbe = t.Add(cfg.BaselineWindow / 2)
	// A process that has just started has no sign of calm yet.
	l.strictUntil = t.Add(strictWindows * cfg.Window)
	limitGauge.Set(l.limit)
	return l
}

// Defaults of Config's zero fields: the ADMISSION_* settings' own (pkg/config), and the
// limit a gateway starts at, which no setting names.
const (
	DefaultMinLimit     = config.DefaultAdmissionMinLimit
	DefaultInitialLimit = 32
	DefaultTolerance    = config.DefaultAdmissionTolerance
)

// ConfigFrom is the limiter's Config from the gateway's settings (ADMISSION_*), whose
// defaults pkg/config holds.
func ConfigFrom(c *config.Config) Config {
	return Config{
		MinLimit:     c.AdmissionMinLimit,
		MaxLimit:     c.AdmissionMaxLimit,
		Tolerance:    c.AdmissionTolerance,
		LatencyFloor: c.AdmissionLatencyFloor,
	}
}

// Refusal reasons, the values of keyhouse_admission_refused_total's reason label.
const (
	// ReasonLimit: every slot of the limit is taken and no other tenant has a request in
	// flight (or the hard bound, twice the limit and lightRoom, is reached).
	ReasonLimit = "limit"
	// ReasonShare: the limit is reached and the tenant holds at least its equal share of
	// it among the tenants in flight.
	ReasonShare = "tenant_share"
)

// Acquire admits a request of tenant, or refuses it with the reason. An admitted request
// must call done exactly once with its latency.
//
// Any request is admitted while fewer than the limit are in flight. Past it, while the
// limiter is calm (no sign of overload for a while, see calm), a tenant holding less than
// its equal share of twice the limit is; otherwise only a light tenant is, by either of
// two measures:
//   - what it holds: fewer requests in flight than its equal share of the limit among
//     the tenants in flight (limit ÷ their number, itself counted), so a tenant with
//     nothing in flight is light while another holds slots, and a stalled moment of a
//     flood does not make the quiet tenant look heavy;
//   - what it asks: less than half as often as the busiest tenant in the last Window, or
//     less than the busiest and at most lightFloor times (refused requests count: it is
//     the demand that tells a flood), while the busiest has requests in flight, so a
//     quiet tenant whose requests are slow (the flood raised everyone's latency) keeps
//     more than its equal share of a low limit.
//
// A tenant that floods is heavy by both: it takes every free slot below the limit and is
// refused past it, while the quiet tenants' requests still go through, up to twice the
// limit plus lightRoom in flight. Their requests over the limit count in the latency,
// and the limit makes room.
func (l *Limiter) Acquire(tenant string) (done func(latency time.Duration), reason string) {
	l.mu.Lock()
	now := l.now()
	asked := l.countAsked(tenant, now)
	held := l.held[tenant]
	if l.inflight >= l.effectiveLimit(now) {
		tenants := len(l.held)
		if held == 0 {
			tenants++
		}
		if l.calm(now) && held*tenants < 2*int(l.limit) && l.inflight < l.hardBound() {
			return l.admit(tenant, held)
		}
		// A probe lowers the limit for the heavy tenants only; the light ones keep their
		// share of the real limit.
		holdsLittle := tenants > 1 && held*tenants < int(l.limit)
		// Only next to a flood still under way: one that stopped (nothing in flight) is no
		// measure of who asks little, and next to it a new flood would pass for light.
		asksLittle := asked < l.heaviest && (asked <= lightFloor || 2*asked < l.heaviest) && l.held[l.busiest] > 0
		light := holdsLittle || asksLittle
		if !light || l.inflight >= l.hardBound() {
			reason := ReasonLimit
			if (tenants > 1 || asked < l.heaviest) && !light {
				reason = ReasonShare
			}
			l.strictUntil = now.Add(strictWindows * l.cfg.Window)
			l.mu.Unlock()
			return nil, reason
		}
	}
	return l.admit(tenant, held)
}

// admit counts an admitted request of tenant, which held requests in flight before it, and
// unlocks l.mu.
func (l *Limiter) admit(tenant string, held int) (done func(latency time.Duration), reason string) {
	l.held[tenant] = held + 1
	l.inflight++
	l.windowPeak = max(l.windowPeak, l.inflight)
	l.mu.Unlock()
	inflightGauge.Inc()
	var once sync.Once
	return func(latency time.Duration) {
		once.Do(func() { l.done(tenant, latency) })
	}, ""
}

// countAsked counts a request of tenant and returns how many it made in the fading
// window. The counts fade to a quarter every Window, whatever the traffic: who is busy
// carries over a window's start (a quiet tenant must not look as busy as a flood that has
// only started counting again), and a flood that stopped fades out, by a quarter for
// every Window gone since the last request: faded once after a quiet spell, a flood that
// stopped seconds ago still looked the busiest, and a new flood next to it light.
func (l *Limiter) countAsked(tenant string, now time.Time) int {
	if gone := now.Sub(l.sharesStart); gone >= l.cfg.Window {
		shift := 2 * min(gone/l.cfg.Window, 32)
		for t, n := range l.asked {
			if n >>= shift; n > 0 {
				l.asked[t] = n
			} else {
				delete(l.asked, t)
			}
		}
		l.heaviest, l.sharesStart = l.heaviest>>shift, now
	}
	l.asked[tenant]++
	asked := l.asked[tenant]
	if asked > l.heaviest {
		l.heaviest, l.busiest = asked, tenant
	}
	return asked
}

// calm reports whether no sign of overload has been seen for strictWindows: no request
// refused, no window's latency over the target. While calm, a request past the limit is
// still admitted if its tenant holds less than an equal share of twice the limit among
// the tenants in flight: a busy machine stalls now and then for tens of milliseconds, the
// requests that arrive meanwhile pile up to two or three times the usual number in
// flight, and refusing them would answer late requests with failures (and retries). The
// first refusal, or the first window over the target, makes the limit strict again, so a
// flood gets at most its share of twice the limit at its start. The hard bound's last
// lightRoom is never a calm tenant's: it stays for the tenants that come after, which
// a flood that took the whole bound at its start would refuse until its first requests
// finished (seconds, for slow ones).
func (l *Limiter) calm(now time.Time) bool { return !now.Before(l.strictUntil) }

// hardBound is the most requests in flight, whoever asks: twice the limit and lightRoom.
func (l *Limiter) hardBound() int { return 2*int(l.limit) + lightRoom }

// effectiveLimit is the limit in whole requests, MinLimit during a probe.
func (l *Limiter) effectiveLimit(now time.Time) int {
	if now.Before(l.probeEnds) {
		return l.cfg.MinLimit
	}
	return int(l.limit)
}

func (l *Limiter) done(tenant string, latency time.Duration) {
	inflightGauge.Dec()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.inflight--
	if n := l.held[tenant] - 1; n > 0 {
		l.held[tenant] = n
	} else {
		delete(l.held, tenant)
	}
	l.windowSum += latency
	l.windowCount++
	if now := l.now(); now.Sub(l.windowStart) >= l.cfg.Window && l.windowCount >= minSamples {
		l.adapt(now)
	}
}

// adapt closes the window: its average latency joins the history, the baseline is the
// lowest average of the last BaselineWindow, and the limit moves by the gradient
// Tolerance × baseline ÷ average (between 0.5 and 1) plus a queue allowance of √limit,
// smoothed, as in Netflix's concurrency-limits Gradient2, with a sliding minimum for the
// baseline instead of a long average (which drifts up under a long overload).
func (l *Limiter) adapt(now time.Time) {
	avg := l.windowSum / time.Duration(l.windowCount)
	rate := float64(l.windowCount) / max(now.Sub(l.windowStart).Seconds(), 1e-9)
	peak := l.windowPeak
	l.windowStart, l.windowSum, l.windowCount, l.windowPeak = now, 0, 0, l.inflight

	l.history = append(l.history, windowAverage{end: now, avg: avg, rate: rate})
	cut := 0
	for cut < len(l.history) && now.Sub(l.history[cut].end) > l.cfg.BaselineWindow {
		cut++
	}
	l.history = l.history[cut:]
	l.baseline, l.bestRate = l.history[0].avg, l.history[0].rate
	for _, w := range l.history[1:] {
		l.baseline, l.bestRate = min(l.baseline, w.avg), max(l.bestRate, w.rate)
	}

	target := max(l.cfg.Tolerance*float64(l.baseline), float64(l.cfg.LatencyFloor))
	gradient := math.Max(0.5, math.Min(1, target/float64(max(avg, 1))))
	next := l.limit
	switch {
	case gradient < 1:
		l.strictUntil = now.Add(strictWindows * l.cfg.Window)
		next = l.limit*gradient + math.Sqrt(l.limit)
		next = 0.8*l.limit + 0.2*next
		// Not below what the best throughput of the last BaselineWindow keeps in flight
		// at the target latency (Little's law): so many requests at the rate the gateway
		// has shown finish within the target, so latency over it at that number comes
		// from a machine slowed by something the limit does not hold back, most often the
		// refusals' own work. Shrinking further would turn answers into refusals, which
		// cost the gateway from a third of a miss to all of a cached answer, so the
		// machine's load and the latency stay and the goodput falls: a closed loop of
		// clients that ask again at once, refused, spun the goodput down to 3 in 10.
		next = max(next, min(l.limit, l.bestRate*target/float64(time.Second)))
	case float64(peak) >= l.limit/2:
		// Latency within the target and the load near the limit: grow by the whole
		// queue allowance, unsmoothed. A flood that starts from a quiet limit otherwise
		// waits seconds for the room the latency says is there (√limit ÷ 5 per window),
		// and the quiet tenants' shares of the low limit are too small meanwhile. At
		// least to what the window's rate keeps in flight at the target latency: were
		// the throughput to rise no further, that many would still finish within it
		// (Little's law), and a closed loop of clients that ask again as soon as they are
		// refused would spin on refusals for seconds while √limit a window caught up.
		next = max(l.limit+math.Sqrt(l.limit), rate*target/float64(time.Second))
	}
	l.limit = math.Max(float64(l.cfg.MinLimit), math.Min(float64(l.cfg.MaxLimit), next))

	if !now.Before(l.nextProbe) {
		l.probeEnds = now.Add(l.cfg.Window)
		l.nextProbe = now.Add(l.cfg.BaselineWindow / 2)
	}
	limitGauge.Set(l.limit)
	baselineGauge.Set(l.baseline.Seconds())
	bestRateGauge.Set(l.bestRate)
}

// Limit is the current limit (whole requests).
func (l *Limiter) Limit() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return int(l.limit)
}

// InFlight is how many admitted requests have not finished.
func (l *Limiter) InFlight() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.inflight
}
