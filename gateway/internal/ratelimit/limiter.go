package ratelimit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
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
	l.coalesce = coalescer{client: client, timeout: func() time.Duration { return l.redisTimeout }}
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
	res := newResult(tier, l.count(ctx, rkey, reset, now), reset, now)
	if !res.Allowed {
		l.overLimit.add(rkey, reset, now)
	}
	return res
}

// count increments key in Redis, or in process while Redis is failing.
func (l *Limiter) count(ctx context.Context, key string, reset, now time.Time) int64 {
	if l.breaker.allow(now) {
		n, err := l.incrRedis(ctx, key, reset.Sub(now)+keyExpirySlack)
		if err == nil {
			if l.breaker.succeeded() {
				l.log.Info("rate limiter: Redis reachable again; limits are shared across gateways")
			}
			return n
		}
		if l.breaker.failed(now) {
			l.log.Warn("rate limiter: Redis unreachable; each gateway enforces limits on its own until it answers",
				"err", err)
		}
	}
	return l.local.add(key, reset, now)
}

// incrRedis counts one hit of key in Redis and returns the key's new count. Hits are
// coalesced (see coalescer): the requests that arrive while a round trip is out go
// together in the next pipeline.
func (l *Limiter) incrRedis(_ context.Context, key string, ttl time.Duration) (int64, error) {
	// The client hanging up does not cancel the count: a cancelled request is still a
	// request, and must not look like a Redis failure. Only the deadline is ours.
	return l.coalesce.incr(key, ttl)
}

// coalescer sends the increments of concurrent requests to Redis in shared round trips.
// While one pipeline is out, arriving hits queue; when it returns, every queued hit goes
// in the next one. Hits of one key in one pipeline become one INCRBY of their number and
// one EXPIRE, and each hit gets its own count back (the INCRBY's result minus the hits
// queued after it), so counts are exactly those of one INCRBY per request. An idle
// gateway sends a lone hit at once, so coalescing adds no latency; under load it takes a
// pipeline per round trip instead of one per request.
type coalescer struct {
	client  *redis.Client
	timeout func() time.Duration

	mu      sync.Mutex
	queue   []*hit
	running bool
}

// hit is one request's increment, waiting for its pipeline.
type hit struct {
	key   string
	ttl   time.Duration
	count int64
	err   error
	done  chan struct{}
}

var hitPool = sync.Pool{New: func() any { return &hit{done: make(chan struct{}, 1)} }}

func (c *coalescer) incr(key string, ttl time.Duration) (int64, error) {
	h := hitPool.Get().(*hit)
	h.key, h.ttl = key, ttl
	c.mu.Lock()
	c.queue = append(c.queue, h)
	lead := !c.running
	c.running = true
	c.mu.Unlock()
	if lead {
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
	c.send(batch)
	for _, h := range batch {
		h.done <- struct{}{}
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

func (b *breaker) allow(now time.Time) bool {
	if !b.down.Load() {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.down.Load() {
		return true
	}
	if b.probing || now.Before(b.retryAt) {
		return false
	}
	b.probing = true
	return true
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
