package admission

import (
	"math"
	"sync"
	"time"

	"github.com/keyhouse/keyhouse/pkg/metrics"
)

// Config sets a Limiter's bounds and how it adapts.
type Config struct {
	// MinLimit and MaxLimit bound the concurrency limit (ADMISSION_MIN_LIMIT,
	// ADMISSION_MAX_LIMIT); InitialLimit is where it starts (clamped into the bounds).
	MinLimit, MaxLimit, InitialLimit int
	// Tolerance is how far the average latency may rise above the baseline before the
	// limit shrinks (ADMISSION_LATENCY_TOLERANCE, e.g. 2: twice the baseline).
	Tolerance float64
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

// lightFloor is how many requests in a window leave a tenant light that is not the
// busiest: early in a window, or just after a flood began, a quiet tenant's two or three
// requests must not make it look heavy next to a flood that has only started counting.
const lightFloor = 10

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
	// asked counts each tenant's requests (admitted or not), fading to a quarter every
	// Window (sharesStart is the last time); heaviest is the most any tenant has.
	asked       map[string]int
	heaviest    int
	sharesStart time.Time

	windowStart time.Time
	windowSum   time.Duration
	windowCount int
	// windowPeak is the most requests in flight during the window: a limit that was
	// never reached is not raised (the load, not the limit, set the latency).
	windowPeak int

	history   []windowAverage
	baseline  time.Duration
	nextProbe time.Time
	probeEnds time.Time
}

type windowAverage struct {
	end time.Time
	avg time.Duration
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
	l := &Limiter{cfg: cfg, now: now, limit: float64(cfg.InitialLimit), asked: map[string]int{}}
	t := now()
	l.windowStart = t
	l.nextProbe = t.Add(cfg.BaselineWindow / 2)
	metrics.AdmissionLimit.Set(l.limit)
	return l
}

// Defaults of Config (and of the ADMISSION_* settings).
const (
	DefaultMinLimit     = 16
	DefaultMaxLimit     = 1000
	DefaultInitialLimit = 32
	DefaultTolerance    = 2.0
)

// Refusal reasons, the values of keyhouse_admission_refused_total's reason label.
const (
	// ReasonLimit: every slot of the limit is taken and the tenant is the heaviest (or
	// the hard bound is reached).
	ReasonLimit = "limit"
	// ReasonShare: the limit is reached and the tenant is among the heavy ones, though
	// another was admitted more.
	ReasonShare = "tenant_share"
)

// Acquire admits a request of tenant, or refuses it with the reason. An admitted request
// must call done exactly once with its latency.
//
// Any request is admitted while fewer than the limit are in flight. Past it, only a light
// tenant is: one that asked less than half as often as the busiest tenant in the last
// Window, or less than the busiest and at most lightFloor times (refused requests count:
// it is the demand that tells a flood). A tenant that floods is the busiest: it takes the free slots and is
// refused past them (and so is any tenant near its rate), while the quiet tenants'
// requests still go through, up to twice the limit plus lightFloor in flight. Their
// requests over the limit count in the latency, and the limit makes room.
func (l *Limiter) Acquire(tenant string) (done func(latency time.Duration), reason string) {
	l.mu.Lock()
	now := l.now()
	if now.Sub(l.sharesStart) >= l.cfg.Window {
		// The counts fade to a quarter every Window, whatever the traffic: who is busy
		// carries over a window's start (a quiet tenant must not look as busy as a flood
		// that has only started counting again), and a flood that stopped fades out.
		for t, n := range l.asked {
			if n >>= 2; n > 0 {
				l.asked[t] = n
			} else {
				delete(l.asked, t)
			}
		}
		l.heaviest, l.sharesStart = l.heaviest>>2, now
	}
	l.asked[tenant]++
	asked := l.asked[tenant]
	l.heaviest = max(l.heaviest, asked)
	limit := l.effectiveLimit(now)
	if l.inflight >= limit {
		light := asked < l.heaviest && (asked <= lightFloor || 2*asked < l.heaviest)
		// A probe lowers the limit for the heavy tenants only; the light ones keep their
		// room, up to twice the real limit plus what lightFloor lets any tenant have (a
		// bound, too, on what made-up tenants, each light for lightFloor requests, take).
		if !light || l.inflight >= 2*int(l.limit)+lightFloor {
			reason := ReasonLimit
			if !light && asked < l.heaviest {
				reason = ReasonShare
			}
			l.mu.Unlock()
			return nil, reason
		}
	}
	l.inflight++
	l.windowPeak = max(l.windowPeak, l.inflight)
	l.mu.Unlock()
	metrics.AdmissionInflight.Inc()
	var once sync.Once
	return func(latency time.Duration) {
		once.Do(func() { l.done(latency) })
	}, ""
}

// effectiveLimit is the limit in whole requests, MinLimit during a probe.
func (l *Limiter) effectiveLimit(now time.Time) int {
	if now.Before(l.probeEnds) {
		return l.cfg.MinLimit
	}
	return int(l.limit)
}

func (l *Limiter) done(latency time.Duration) {
	metrics.AdmissionInflight.Dec()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.inflight--
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
	peak := l.windowPeak
	l.windowStart, l.windowSum, l.windowCount, l.windowPeak = now, 0, 0, l.inflight

	l.history = append(l.history, windowAverage{end: now, avg: avg})
	cut := 0
	for cut < len(l.history) && now.Sub(l.history[cut].end) > l.cfg.BaselineWindow {
		cut++
	}
	l.history = l.history[cut:]
	l.baseline = l.history[0].avg
	for _, w := range l.history[1:] {
		l.baseline = min(l.baseline, w.avg)
	}

	gradient := math.Max(0.5, math.Min(1, l.cfg.Tolerance*float64(l.baseline)/float64(max(avg, 1))))
	next := l.limit
	if gradient < 1 || float64(peak) >= l.limit/2 {
		next = l.limit*gradient + math.Sqrt(l.limit)
		next = 0.8*l.limit + 0.2*next
	}
	l.limit = math.Max(float64(l.cfg.MinLimit), math.Min(float64(l.cfg.MaxLimit), next))

	if !now.Before(l.nextProbe) {
		l.probeEnds = now.Add(l.cfg.Window)
		l.nextProbe = now.Add(l.cfg.BaselineWindow / 2)
	}
	metrics.AdmissionLimit.Set(l.limit)
	metrics.AdmissionBaseline.Set(l.baseline.Seconds())
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
