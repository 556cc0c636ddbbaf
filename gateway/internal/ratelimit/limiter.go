package ratelimit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// redisCooldown is how long Redis is skipped after a failure before one request probes it.
	redisCooldown = time.Second
	// keyExpirySlack keeps a counter alive a little past its window, so replicas whose
	// clocks run slightly behind still find it.
	keyExpirySlack = time.Minute
	// maxClientKeyLen is the longest client part stored verbatim in a Redis key.
	maxClientKeyLen = 64
	// overLimitCacheSize bounds the memory of the over-limit cache; when it is full, keys are
	// simply asked about in Redis again.
	overLimitCacheSize = 100_000
	// aheadKeys bounds the keys whose counts are kept for deciding ahead of Redis (about
	// 100 bytes each, 20 MB in all); past it, a new key's requests wait for Redis.
	aheadKeys = 200_000
	// aheadMargin is the least of a limit kept for requests that wait for Redis (aheadBound).
	aheadMargin = 10
	// aheadInFlight is how many of a key's hits may be unanswered at a gateway for the next
	// to be decided ahead: a burst of one key waits for Redis past it.
	aheadInFlight = 4
	// sweepEvery is how often the in-memory tables drop entries of ended windows.
	sweepEvery = time.Minute
)

// Result is the outcome of one Take, and the numbers of the X-RateLimit headers.
type Result struct {
	Limit     int
	Remaining int
	// Reset is the end of the window.
	Reset   time.Time
	Allowed bool
	// RetryAfter is the time left in the window when refused, zero when allowed.
	RetryAfter time.Duration
}

// Limiter counts requests in fixed windows, in Redis when it answers and in process
// otherwise (see the package doc). It is safe for concurrent use.
type Limiter struct {
	redis        *redis.Client
	redisTimeout time.Duration
	log          *slog.Logger
	now          func() time.Time

	breaker   breaker
	overLimit windowTable
	local     windowTable
	ahead     aheadTable
	coalesce  coalescer
}

// New returns a Limiter counting in client, each round trip to it bounded by timeout
// (RATE_LIMIT_REDIS_TIMEOUT). The client should be created with
// ContextTimeoutEnabled: without it, go-redis ignores the per-call timeout for a Redis that
// accepts connections but stops answering, and a request can wait the client's ReadTimeout
// before the fallback takes over; New logs a warning in that case.
func New(client *redis.Client, log *slog.Logger, timeout time.Duration) *Limiter {
	if !client.Options().ContextTimeoutEnabled {
		log.Warn("rate limiter: Redis client has ContextTimeoutEnabled off; a hung Redis delays requests by its ReadTimeout",
			"read_timeout", client.Options().ReadTimeout)
	}
	l := &Limiter{
		redis:        client,
		redisTimeout: timeout,
		log:          log,
		now:          time.Now,
		breaker:      breaker{cooldown: redisCooldown},
		overLimit:    windowTable{maxKeys: overLimitCacheSize},
	}
	l.ahead = aheadTable{maxKeys: aheadKeys, post: func(key string, end time.Time) {
		l.coalesce.post(key, end.Sub(l.now())+keyExpirySlack, end)
	}}
	l.coalesce = coalescer{
		client:     client,
		timeout:    func() time.Duration { return l.redisTimeout },
		answered:   l.answeredAhead,
		redisDown:  func() bool { return !l.breaker.up() },
		postedWait: defaultPostedWait,
	}
	return l
}

// Take counts one request of key (for example "ip:203.0.113.7" or "lic:<license key>")
// against tier and says whether it is allowed.
func (l *Limiter) Take(ctx context.Context, tier Tier, key string) Result {
	now := l.now()
	start := windowStart(now, tier.Window)
	reset := start.Add(tier.Window)
	rkey := redisKey(tier.Name, key, start)
	if l.overLimit.has(rkey, now) {
		return newResult(tier, int64(tier.Limit)+1, reset, now)
	}
	tracked := false
	if l.breaker.up() {
		count, d := l.ahead.take(rkey, tier.Limit, reset, now)
		if d == decided {
			return newResult(tier, count, reset, now)
		}
		tracked = d == wait
	}
	res := newResult(tier, l.count(ctx, rkey, reset, now, tracked), reset, now)
	if !res.Allowed {
		l.overLimit.add(rkey, reset, now)
	}
	return res
}

// count increments key in Redis, or in process while Redis is failing. tracked: the hit
// is in flight in l.ahead, which is told its end.
func (l *Limiter) count(ctx context.Context, key string, reset, now time.Time, tracked bool) int64 {
	if ok, probe := l.breaker.allow(now); ok {
		n, err := l.incrRedis(ctx, key, reset.Sub(now)+keyExpirySlack, probe)
		if err == nil {
			if tracked {
				l.ahead.answered(key, reset, n)
			}
			l.redisAnswered()
			return n
		}
		if err != errNotSent {
			l.redisFailed(err, now)
		}
	}
	if tracked {
		l.ahead.answered(key, reset, 0)
	}
	return l.local.add(key, reset, now)
}

// errNotSent answers the hits of a batch not sent to a Redis known to be down: they are
// counted in process, and are no news of Redis for the breaker.
var errNotSent = errors.New("rate limiter: not sent, Redis is down")

// answeredAhead takes Redis's answer to a hit decided ahead of it (see aheadTable). A
// failed one is counted in process instead, as a request that waited would have been.
func (l *Limiter) answeredAhead(h *hit) {
	if h.err != nil {
		now := l.now()
		l.ahead.answered(h.key, h.end, 0)
		l.local.add(h.key, h.end, now)
		if h.err != errNotSent {
			l.redisFailed(h.err, now)
		}
		return
	}
	l.ahead.answered(h.key, h.end, h.count)
	l.redisAnswered()
}

// redisAnswered notes a round trip that succeeded, logging the end of an outage.
func (l *Limiter) redisAnswered() {
	if l.breaker.succeeded() {
		l.log.Info("rate limiter: Redis reachable again; limits are shared across gateways")
	}
}

// redisFailed notes a round trip that failed, logging the start of an outage.
func (l *Limiter) redisFailed(err error, now time.Time) {
	if l.breaker.failed(now) {
		l.log.Warn("rate limiter: Redis unreachable; each gateway enforces limits on its own until it answers",
			"error", err.Error())
	}
}

// incrRedis counts one hit of key in Redis and returns the key's new count. Hits are
// coalesced (see coalescer): the requests that arrive while a round trip is out go
// together in the next pipeline.
// probe: the hit is the breaker's probe of an outage, sent whatever the breaker says then.
func (l *Limiter) incrRedis(_ context.Context, key string, ttl time.Duration, probe bool) (int64, error) {
	// The client hanging up does not cancel the count: a cancelled request is still a
	// request, and must not look like a Redis failure. Only the deadline is ours.
	return l.coalesce.incr(key, ttl, probe)
}

// coalescer sends the increments of concurrent requests to Redis in shared round trips.
// While one pipeline is out, arriving hits queue; when it returns, every queued hit goes
// in the next one. Hits of one key in one pipeline become one INCRBY of their number and
// one EXPIRE, and each hit gets its own count back (the INCRBY's result minus the hits
// queued after it), so counts are exactly those of one INCRBY per request. A hit a request
// waits for goes at once when no pipeline is out, so coalescing adds no latency; under
// load it takes a pipeline per round trip instead of one per request.
//
// A posted hit (its request already answered) that finds no pipeline out waits up to
// defaultPostedWait for others instead: between the bursts of a moderate load, a pipeline per
// request was a Redis round trip, a goroutine and a wake-up of Redis each. A hit a
// request waits for that arrives meanwhile sends them all at once.
type coalescer struct {
	client  *redis.Client
	timeout func() time.Duration
	// answered takes the answer to a hit nobody waits for (post).
	answered func(*hit)
	// redisDown reports an outage: a batch without the breaker's probe is then not sent
	// (each hit gets errNotSent), so that hits queued behind the round trip that failed do
	// not ask a dead Redis again within the breaker's cooldown.
	redisDown func() bool

	mu    sync.Mutex
	queue []*hit
	// running: a pipeline is out, or posted hits wait for one (posting).
	running bool
	// posting: the queue holds posted hits only, to be sent when flush fires (or by the
	// next hit a request waits for).
	posting bool
	flush   *time.Timer
	// postedWait is how long posted hits wait for company (defaultPostedWait; tests
	// lengthen it).
	postedWait time.Duration
}

// defaultPostedWait bounds how long a posted hit waits for company when no pipeline is
// out. It delays when other gateways hear of the hit by as much (they hear of it from
// Redis's answers to their own hits, a round trip late already).
const defaultPostedWait = 2 * time.Millisecond

// hit is one request's increment, waiting for its pipeline, or, posted, not waited for.
type hit struct {
	key   string
	ttl   time.Duration
	count int64
	err   error
	done  chan struct{}
	// posted: the request was decided ahead of Redis and did not wait; its answer goes
	// to coalescer.answered, with end, its window's end.
	posted bool
	end    time.Time
	// probe: the breaker's probe of an outage (see coalescer.redisDown).
	probe bool
}

var hitPool = sync.Pool{New: func() any { return &hit{done: make(chan struct{}, 1)} }}

func (c *coalescer) incr(key string, ttl time.Duration, probe bool) (int64, error) {
	h := hitPool.Get().(*hit)
	h.key, h.ttl, h.probe = key, ttl, probe
	if c.enqueue(h) {
		// The hit that finds no pipeline out sends one itself (with whatever queued in
		// the meantime) instead of handing it to a new goroutine and waiting for it: at a
		// few thousand requests a second most pipelines carry one or two hits, and the
		// hand-off cost a goroutine and two switches each. What arrives while it is out
		// goes on in a goroutine, so this request waits for its own round trip alone.
		var spare []*hit
		c.sendQueued(&spare)
		c.mu.Lock()
		if len(c.queue) == 0 {
			c.running = false
			c.mu.Unlock()
		} else {
			c.mu.Unlock()
			go c.run(spare)
		}
	}
	<-h.done
	n, err := h.count, h.err
	*h = hit{done: h.done}
	hitPool.Put(h)
	return n, err
}

// post queues a hit of key that nobody waits for: its answer goes to c.answered. When no
// pipeline is out, it goes postedWait later (flushPosted) with the hits posted meanwhile,
// so the caller never waits for Redis.
func (c *coalescer) post(key string, ttl time.Duration, end time.Time) {
	h := hitPool.Get().(*hit)
	h.key, h.ttl, h.end, h.posted = key, ttl, end, true
	c.mu.Lock()
	defer c.mu.Unlock()
	c.queue = append(c.queue, h)
	if c.running {
		return
	}
	c.running, c.posting = true, true
	if c.flush == nil {
		c.flush = time.AfterFunc(c.postedWait, c.flushPosted)
	} else {
		c.flush.Reset(c.postedWait)
	}
}

// flushPosted sends the posted hits that waited, unless a hit someone waits for has
// taken them along.
func (c *coalescer) flushPosted() {
	c.mu.Lock()
	lead := c.posting
	c.posting = false
	c.mu.Unlock()
	if lead {
		c.run(nil)
	}
}

// enqueue queues h for the next pipeline and reports whether none was out: the caller
// then sends it (and what queues meanwhile), posted hits that wait for company included.
func (c *coalescer) enqueue(h *hit) (lead bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.queue = append(c.queue, h)
	lead = !c.running || c.posting
	c.running, c.posting = true, false
	return lead
}

// run sends pipelines until the queue is empty. spare is a slice for the next queue.
func (c *coalescer) run(spare []*hit) {
	for c.sendQueued(&spare) {
	}
}

// sendQueued sends every queued hit in one pipeline and answers them; with none queued it
// marks the coalescer idle and returns false. *spare becomes the queue, and gets the sent
// batch's slice back for the next call.
func (c *coalescer) sendQueued(spare *[]*hit) bool {
	c.mu.Lock()
	batch := c.queue
	c.queue = (*spare)[:0]
	if len(batch) == 0 {
		c.running = false
		c.mu.Unlock()
		*spare = batch
		return false
	}
	c.mu.Unlock()
	if c.redisDown() && !slices.ContainsFunc(batch, func(h *hit) bool { return h.probe }) {
		for _, h := range batch {
			h.err = errNotSent
		}
	} else {
		c.send(batch)
	}
	for _, h := range batch {
		if !h.posted {
			h.done <- struct{}{}
			continue
		}
		c.answered(h)
		*h = hit{done: h.done}
		hitPool.Put(h)
	}
	clear(batch)
	*spare = batch
	return true
}

// send counts batch in one pipeline and sets each hit's count or error.
func (c *coalescer) send(batch []*hit) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout())
	defer cancel()
	type keyHits struct {
		incr *redis.IntCmd
		n    int64
	}
	keys := make(map[string]*keyHits, len(batch))
	pipe := c.client.Pipeline()
	// Queue order: the first hit of a key takes its first count.
	for _, h := range batch {
		if k := keys[h.key]; k != nil {
			k.n++
			continue
		}
		keys[h.key] = &keyHits{n: 1}
	}
	for _, h := range batch {
		if k := keys[h.key]; k.incr == nil {
			k.incr = pipe.IncrBy(ctx, h.key, k.n)
			pipe.Expire(ctx, h.key, h.ttl)
		}
	}
	_, err := pipe.Exec(ctx)
	for _, h := range batch {
		if err != nil {
			h.err = err
			continue
		}
		k := keys[h.key]
		h.count = k.incr.Val() - k.n + 1
		k.n--
	}
}

func newResult(tier Tier, count int64, reset, now time.Time) Result {
	r := Result{
		Limit:     tier.Limit,
		Remaining: int(max(0, int64(tier.Limit)-count)),
		Reset:     reset,
		Allowed:   count <= int64(tier.Limit),
	}
	if !r.Allowed {
		r.RetryAfter = reset.Sub(now)
	}
	return r
}

// windowStart aligns windows to the Unix epoch, which time.Truncate (aligned to year 1)
// does only for windows dividing its offset.
func windowStart(now time.Time, window time.Duration) time.Time {
	ns := now.UnixNano()
	return time.Unix(0, ns-ns%int64(window))
}

func redisKey(tier, key string, start time.Time) string {
	if len(key) > maxClientKeyLen {
		sum := sha256.Sum256([]byte(key))
		key = "sha256:" + hex.EncodeToString(sum[:])
	}
	return "ratelimit:" + tier + ":" + key + ":" + strconv.FormatInt(start.Unix(), 10)
}

// breaker keeps a failing Redis out of the request path: after a failure Redis is skipped
// for cooldown, then a single request probes it while the others keep counting in process.
type breaker struct {
	cooldown time.Duration
	// down is read without the lock so that a healthy Redis costs one atomic load.
	down atomic.Bool

	mu      sync.Mutex
	probing bool
	retryAt time.Time
}

// up reports whether Redis answered the last time it was asked.
func (b *breaker) up() bool { return !b.down.Load() }

// allow reports whether Redis may be asked now, and whether that is the probe of an
// outage.
func (b *breaker) allow(now time.Time) (ok, probe bool) {
	if !b.down.Load() {
		return true, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.down.Load() {
		return true, false
	}
	if b.probing || now.Before(b.retryAt) {
		return false, false
	}
	b.probing = true
	return true, true
}

// succeeded reports whether this success ended an outage.
func (b *breaker) succeeded() bool {
	if !b.down.Load() {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.probing = false
	return b.down.Swap(false)
}

// failed reports whether this failure started an outage.
func (b *breaker) failed(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.probing = false
	b.retryAt = now.Add(b.cooldown)
	return !b.down.Swap(true)
}

// windowTable counts per key until the key's window ends. Ended windows are swept at most
// every sweepEvery, so memory follows the number of keys active in a window.
type windowTable struct {
	maxKeys int // 0 means unbounded

	mu        sync.Mutex
	entries   map[string]windowEntry
	nextSweep time.Time
}

type windowEntry struct {
	count int64
	end   time.Time
}

// add counts one hit of key in the window ending at end and returns the window's count.
// When the table is full, a new key is not stored and its count is 1.
func (t *windowTable) add(key string, end, now time.Time) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sweep(now)
	e, ok := t.entries[key]
	if !ok || !now.Before(e.end) {
		if !ok && t.maxKeys > 0 && len(t.entries) >= t.maxKeys {
			return 1
		}
		e = windowEntry{end: end}
	}
	e.count++
	t.entries[key] = e
	return e.count
}

// has reports whether key holds an entry whose window has not ended.
func (t *windowTable) has(key string, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.entries[key]
	return ok && now.Before(e.end)
}

func (t *windowTable) sweep(now time.Time) {
	if t.entries == nil {
		t.entries = make(map[string]windowEntry)
	}
	if now.Before(t.nextSweep) {
		return
	}
	t.nextSweep = now.Add(sweepEvery)
	for k, e := range t.entries {
		if !now.Before(e.end) {
			delete(t.entries, k)
		}
	}
}

// aheadTable keeps, per key, what this gateway knows of the key's count in Redis: the
// highest count Redis answered for it, and this gateway's hits of it whose answers have not
// come back. From these a request's count is reckoned without asking Redis; it is exact
// while no other gateway counts the key. A request is decided at once (ahead of Redis), its
// hit counted in Redis behind it, while its reckoned count is within aheadBound and fewer
// than aheadInFlight of the key's hits are unanswered here; otherwise it waits for its own
// count, as every request did before. See the package doc for what this costs in
// exactness.
//
// Keys are kept per window, so a window's end drops them all at once.
type aheadTable struct {
	maxKeys int
	// post sends a hit decided ahead to Redis. take calls it before it lets go of the
	// table, so that a hit decided ahead is queued before any hit taken after it: a hit
	// that waits counts, in Redis's answer, every hit decided ahead before it.
	post func(key string, end time.Time)

	mu      sync.Mutex
	windows map[int64]map[string]aheadCount // by the window's end, in Unix nanoseconds
	size    int
	// firstEnd is the earliest end among windows: nothing to sweep before it.
	firstEnd int64
}

type aheadCount struct {
	// answered is the highest count Redis answered for the key.
	answered int64
	// inFlight is this gateway's hits of the key whose counts Redis has not answered.
	inFlight int64
}

// aheadDecision is take's answer about one hit.
type aheadDecision int

const (
	// untracked: the table is full; the hit waits for Redis and need not be answered.
	untracked aheadDecision = iota
	// wait: the hit waits for its own count, then answered(…, waited) is called.
	wait
	// decided: the hit was decided ahead; answered(…, posted) is called once Redis counts it.
	decided
)

// take counts one hit of key in flight and says whether it is decided ahead, with count
// its reckoned count then; a hit decided ahead is posted to Redis.
func (t *aheadTable) take(key string, limit int, end, now time.Time) (count int64, d aheadDecision) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sweep(now)
	window := t.windows[end.UnixNano()]
	c, known := window[key]
	if !known && t.size >= t.maxKeys {
		return 0, untracked
	}
	if window == nil {
		window = make(map[string]aheadCount)
		t.windows[end.UnixNano()] = window
		t.firstEnd = min(t.firstEnd, end.UnixNano())
	}
	if !known {
		t.size++
	}
	count = c.answered + c.inFlight + 1
	d = wait
	if count <= aheadBound(limit) && c.inFlight < aheadInFlight {
		d = decided
		t.post(key, end)
	}
	c.inFlight++
	window[key] = c
	return count, d
}

// aheadBound is the highest count decided ahead of Redis under limit: a tenth of the
// limit, and at least aheadMargin, is left for requests that wait for their own count.
// That margin is what other gateways may count of the key, unknown to this one, without
// the limit being exceeded; a limit of aheadMargin or less is counted in Redis request by
// request.
func aheadBound(limit int) int64 {
	return int64(max(0, limit-max(limit/10, aheadMargin)))
}

// answered records the end of a hit of key that take counted in flight: count is what
// Redis answered, or 0 when it did not.
func (t *aheadTable) answered(key string, end time.Time, count int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	window := t.windows[end.UnixNano()]
	c, known := window[key]
	if !known {
		return
	}
	c.answered = max(c.answered, count)
	c.inFlight--
	window[key] = c
}

// sweep drops the windows that have ended.
func (t *aheadTable) sweep(now time.Time) {
	if t.windows == nil {
		t.windows = make(map[int64]map[string]aheadCount)
		t.firstEnd = math.MaxInt64
	}
	if len(t.windows) == 0 || now.UnixNano() < t.firstEnd {
		return
	}
	t.firstEnd = math.MaxInt64
	for end, window := range t.windows {
		if end <= now.UnixNano() {
			t.size -= len(window)
			delete(t.windows, end)
			continue
		}
		t.firstEnd = min(t.firstEnd, end)
	}
}
