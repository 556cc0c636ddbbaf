package admission

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// RetryAfter is the Retry-After of a refusal: the limit moves every 100 ms, so a second
// later the client finds a fresh decision.
const RetryAfter = time.Second

// Options configure Middleware.
type Options struct {
	Limiter *Limiter
	// Tenants assigns requests to fair shares; nil puts every request in one.
	Tenants *Tenants
	// AnswersFromMemory, when set, reports whether the gateway answers a request on path
	// about the license key from memory now (edge.Caches.AnswersFromMemory), given the
	// body as read, all of it but its last byte (cut; nil when the key was not read the
	// plain way), whose other members name the rest of the question. Such a
	// request is let through without a slot: it holds nothing behind the gateway, and
	// refusing it costs the gateway about what answering it does, so its refusal gives
	// up the answer and saves nothing. (Refused, one tenant's flood of checks the cache
	// answered took the CPU its answers would have used, and the limit, shrunk by the
	// latency that CPU caused, refused the other tenants.) It needs Tenants, which reads
	// the key.
	AnswersFromMemory func(path string, key, cut []byte) bool
	// SlotOnMiss (edge.WithSlotOnMiss) marks the context of a request let through by
	// AnswersFromMemory with take: if its answer is gone when the handler asks (expired,
	// or dropped by a change, while the request waited for its turn), the miss takes a
	// slot through it, or is refused.
	SlotOnMiss func(ctx context.Context, take func() (release func(), ok bool)) context.Context
	// Refuse writes the 503 (edge.WriteOverloaded); Retry-After is already set.
	Refuse func(http.ResponseWriter)
	Log    *slog.Logger
	// Now is the clock of the refusal log (time.Now when nil).
	Now func() time.Time
}

// Governed reports whether a request goes through admission control: the API under /v1/.
// Health, readiness and the console pages never do (metrics have a port of their own), so
// an overloaded gateway still answers its probes.
func Governed(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, "/v1/") }

// Middleware admits the governed requests through the limiter, refusing the excess at once
// with 503 and Retry-After. It goes outermost, before routing, the request id, the access
// log, the request metrics, the rate limits and the body cap, so a refusal costs the HTTP
// server's read and write and little else: the body is read short of its end (peekLicense),
// nothing is allocated for the answer, refusals are counted
// (keyhouse_admission_refused_total, its series resolved once) and logged at most once
// every 10 s with their number.
func Middleware(opts Options, next http.Handler) http.Handler {
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	log := &refusalLog{log: opts.Log, now: now}
	retryAfter := []string{strconv.Itoa(int(RetryAfter / time.Second))}
	refused := map[string]prometheus.Counter{
		ReasonLimit: refusedCounter.WithLabelValues(ReasonLimit),
		ReasonShare: refusedCounter.WithLabelValues(ReasonShare),
	}
	// acquire takes a slot for tenant's request, or counts and logs its refusal and sets
	// its Retry-After.
	acquire := func(tenant string, w http.ResponseWriter) (release func(), ok bool) {
		done, reason := opts.Limiter.Acquire(tenant)
		if done == nil {
			refused[reason].Inc()
			log.note(opts.Limiter)
			w.Header()["Retry-After"] = retryAfter
			return nil, false
		}
		start := time.Now()
		return func() { done(time.Since(start)) }, true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !Governed(r) {
			next.ServeHTTP(w, r)
			return
		}
		tenant, key, cut := NoKey, []byte(nil), []byte(nil)
		if opts.Tenants != nil {
			tenant, key, cut = opts.Tenants.ofRequest(r)
		}
		if key != nil && opts.AnswersFromMemory != nil && opts.AnswersFromMemory(r.URL.Path, key, cut) {
			if opts.SlotOnMiss != nil {
				r = r.WithContext(opts.SlotOnMiss(r.Context(), func() (func(), bool) { return acquire(tenant, w) }))
			}
			next.ServeHTTP(w, r)
			return
		}
		release, ok := acquire(tenant, w)
		if !ok {
			opts.Refuse(w)
			return
		}
		defer release()
		next.ServeHTTP(w, r)
	})
}

// refusalLog writes one WARN line per 10 s of refusals instead of one per refusal, which
// would add to the overload it reports.
type refusalLog struct {
	log *slog.Logger
	now func() time.Time

	mu      sync.Mutex
	since   time.Time
	refused int
}

const refusalLogEvery = 10 * time.Second

func (l *refusalLog) note(lim *Limiter) {
	if l.log == nil {
		return
	}
	l.mu.Lock()
	now := l.now()
	l.refused++
	if !l.since.IsZero() && now.Sub(l.since) < refusalLogEvery {
		l.mu.Unlock()
		return
	}
	n, since := l.refused, l.since
	l.refused, l.since = 0, now
	l.mu.Unlock()
	attrs := []any{"refused", n, "limit", lim.Limit(), "in_flight", lim.InFlight()}
	if !since.IsZero() {
		attrs = append(attrs, "over", now.Sub(since).Round(time.Second).String())
	}
	l.log.Warn("overloaded: refusing requests with 503", attrs...)
}
