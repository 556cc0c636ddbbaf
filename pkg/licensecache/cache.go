// Package licensecache is the read-through cache of licenses on the hot paths
// (verify-license, validate-license, check-update, track-usage): the licensing service
// caches its rows, and the services that ask licensing for licenses (pkg/licensingclient)
// cache the answers. It is correct only with the invalidation that comes with it:
//
//   - Every write of a license, on any licensing replica, drops the key from that replica's
//     cache before the write is answered (so one replica is never stale), then publishes the
//     key on license.ChangedSubject, a core NATS subject every process of every replica
//     subscribes to (Subscribe), which drops it there: a revocation counts everywhere as soon
//     as NATS delivers the message, typically within milliseconds.
//   - Core NATS delivers at most once. A process that loses its NATS connection stops using
//     its cache (every read goes to the source) and empties it, until it is connected again;
//     and every entry expires after the TTL (LICENSE_CACHE_TTL, 1 s by default) whatever
//     happens, which is the bound on staleness when a message is lost.
//   - A write's answer drops the keys it changed from the caches of the process it passes
//     (DropAnnounced), and that process names them, for a second (the default TTL), on
//     its calls about them, which drop them from the called services' caches first (recent.go): a
//     write is followed by no stale answer through the process that made it, on any hop.
//   - A read that raced a write never stores what it read: Get stores only when no
//     invalidation arrived since it started loading.
//   - Concurrent misses of one answer share one load, but only one that started after the
//     key's last invalidation; a failed load's error is its caller's own (it may be that
//     caller's cancellation), and the others waiting for it load themselves.
//
// Only rows are cached: whether a license has expired is decided at every read with the
// current time, never cached. Unknown keys are not cached either (a new key is random, so a
// miss costs the same as before). A cache keeps at most maxEntries answers, evicting by
// CLOCK (clock.go), so its memory stays flat however many licenses are checked.
package licensecache

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keyhouse/keyhouse/pkg/license"
	"github.com/nats-io/nats.go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// DefaultTTL bounds how long an entry is served without a fresh read.
const DefaultTTL = time.Second

// settle is how long after an invalidation of a key answers about it are not stored (at
// most the TTL): long enough for every process to have received the same event, which
// takes milliseconds.
const settle = 100 * time.Millisecond

// maxSettling is the size at which the record of recent invalidations is pruned.
const maxSettling = 1024

// Cache maps canonical license keys to values of type V (a row or an RPC answer). The zero
// value is not usable; a nil *Cache is a cache that always loads. Safe for concurrent use.
type Cache[V any] struct {
	ttl time.Duration
	// liveTTL, when longer than ttl, is how long an entry lives while the cache is proven
	// live (liveness.go); past ttl, it is served only while the proof holds.
	liveTTL time.Duration
	// liveUntil is when the proof lapses (Unix nanoseconds; 0: not proven).
	liveUntil atomic.Int64
	// keptLong: an entry was ever stored for longer than ttl (only those can outlive a
	// missed change by more than the ttl).
	keptLong atomic.Bool
	now      func() time.Time

	// live: the cache may be used (NATS connected, or no NATS at all).
	live atomic.Bool

	mu sync.RWMutex
	// entries: license key → qualifier (GetUntil; "" for Get) → entry, at most maxEntries
	// of them (clock.go). Invalidating a key drops every answer about it.
	entries table[V]
	// settling: keys invalidated within the last settle, whose answers are not stored
	// (until when). The processes this one asks follow the same events, and one that has
	// not yet received it may answer from its own cache: storing that answer would keep
	// it past the event for a whole TTL.
	settling map[string]time.Time
	// settlingAll: the same for every key, after Clear.
	settlingAll time.Time
	// nextPrune: settling is pruned of ended windows at most once per window, so a burst
	// of invalidations (an import) costs one pass per window, not one per key.
	nextPrune time.Time
	// gen moves on with every invalidation, so a load that overlapped one is not stored.
	gen uint64
	// flights: key → qualifier → the load under way for that answer, which other misses
	// wait for. An invalidation detaches the key's flights (the loads go on), so that a
	// caller arriving after it never gets an answer read before it.
	flights map[string]map[string]*flight[V]
	// proofs: what each subscription knows of its publishers (liveness.go).
	proofs []*proof
}

// flight is one load that several misses share.
type flight[V any] struct {
	done chan struct{} // closed when the load ended
	v    V
	ok   bool // the load returned v without error
	// joined counts the callers that wait for it (tests watch it).
	joined int
}

type entry[V any] struct {
	v       V
	expires time.Time
	// fresh: until when the entry is served without the liveness proof (stored + ttl).
	fresh time.Time
}

// servable says whether e may answer at now.
func (c *Cache[V]) servable(e entry[V], now time.Time) bool { return c.servableUntil(e, now, now) }

// servableUntil says whether e may answer at now and, by its own life, still at later:
// whether the liveness proof holds is known only for now.
func (c *Cache[V]) servableUntil(e entry[V], now, later time.Time) bool {
	return later.Before(e.expires) && (later.Before(e.fresh) || c.proven(now))
}

// New returns a cache whose entries live ttl; ttl <= 0 returns nil (no caching).
func New[V any](ttl time.Duration) *Cache[V] {
	return NewLive[V](ttl, 0)
}

// NewLive returns a cache whose entries live ttl, or liveTTL while the cache is proven
// live (it follows its change subjects and hears every publisher's heartbeat: see
// liveness.go); an entry older than ttl is served only while the proof holds. liveTTL <=
// ttl is New. ttl <= 0 returns nil (no caching).
func NewLive[V any](ttl, liveTTL time.Duration) *Cache[V] {
	if ttl <= 0 {
		return nil
	}
	c := &Cache[V]{ttl: ttl, liveTTL: liveTTL, now: time.Now, entries: newTable[V](maxEntries), settling: map[string]time.Time{}, flights: map[string]map[string]*flight[V]{}}
	c.live.Store(true)
	return c
}

// Get returns the value cached for key, or load's answer, stored unless an invalidation
// arrived while load ran. Errors are returned and never stored.
func (c *Cache[V]) Get(key string, load func() (V, error)) (V, error) {
	return c.GetUntil(key, "", func() (V, time.Time, error) {
		v, err := load()
		return v, time.Time{}, err
	})
}

// Holds reports whether GetUntil would answer key for qualifier from the cache, without
// loading, now and, as far as the answer's own life goes, still after d (an answer
// dropped meanwhile by an invalidation or a lapsed liveness proof is not). A nil cache,
// or one not in use, holds nothing.
func (c *Cache[V]) Holds(key, qualifier string, d time.Duration) bool {
	_, ok := c.Peek(key, qualifier, d)
	return ok
}

// Peek is Holds with the answer it holds.
func (c *Cache[V]) Peek(key, qualifier string, d time.Duration) (v V, ok bool) {
	if c == nil || !c.live.Load() {
		return v, false
	}
	now := c.now()
	return c.cached(key, qualifier, now, now.Add(d))
}

// HoldsAbout reports whether the cache keeps any answer about key, servable or not: false
// means Holds is false for every qualifier, so a caller can skip working out which one a
// request asks about. A nil cache, or one not in use, holds nothing.
func (c *Cache[V]) HoldsAbout(key string) bool {
	if c == nil || !c.live.Load() {
		return false
	}
	c.mu.RLock()
	_, ok := c.entries.slots[key]
	c.mu.RUnlock()
	return ok
}

// cached is the answer about key for qualifier that may be served at now and, by its own
// life, at later, if any.
func (c *Cache[V]) cached(key, qualifier string, now, later time.Time) (v V, ok bool) {
	c.mu.RLock()
	e, ok := c.entries.lookup(key, qualifier)
	c.mu.RUnlock()
	if ok && c.servableUntil(e, now, later) {
		return e.v, true
	}
	return v, false
}

// NotKept, returned by a load as its until, has GetUntil answer without keeping.
var NotKept = time.Unix(0, 0)

// GetUntil is Get for one of several answers about the license key, told apart by
// qualifier (an instance id, a question): an invalidation of key drops them all. load
// names until when its answer holds (zero: the TTL); the entry ends then if that comes
// first, and an answer whose until has passed (NotKept) is not kept at all.
func (c *Cache[V]) GetUntil(key, qualifier string, load func() (V, time.Time, error)) (V, error) {
	if c == nil || !c.live.Load() {
		v, _, err := load()
		return v, err
	}
	now := c.now()
	if v, ok := c.cached(key, qualifier, now, now); ok {
		return v, nil
	}
	var f *flight[V]
	var gen uint64
	for f == nil {
		c.mu.Lock()
		// The leader stores before it lands: checking again here saves a load that just
		// ended.
		if e, ok := c.entries.lookup(key, qualifier); ok && c.servable(e, now) {
			c.mu.Unlock()
			return e.v, nil
		}
		if other := c.flights[key][qualifier]; other != nil {
			other.joined++
			c.mu.Unlock()
			<-other.done
			if other.ok {
				return other.v, nil
			}
			// The leader's error stays its own (it may be its client's cancellation or
			// deadline, which must not fail this request): load as any miss would.
			now = c.now()
			continue
		}
		f = &flight[V]{done: make(chan struct{})}
		if c.flights[key] == nil {
			c.flights[key] = map[string]*flight[V]{}
		}
		c.flights[key][qualifier] = f
		gen = c.gen
		c.mu.Unlock()
	}
	// Deferred, so that a panicking load still releases those waiting (they load then);
	// it runs after the store below unlocked, so a caller finds the entry or the flight.
	defer c.land(key, qualifier, f)
	v, until, err := load()
	if err != nil {
		return v, err
	}
	f.v, f.ok = v, true
	c.mu.Lock()
	c.keep(key, qualifier, v, until, now, gen)
	c.mu.Unlock()
	return v, nil
}

// Loading is the start of a load made outside GetUntil whose answers Keep stores: one
// call that answers entries of several caches at once.
type Loading struct {
	gen uint64
	at  time.Time
}

// StartLoad marks the start of such a load: what Keep is given for it is not stored if an
// invalidation arrives in between, as GetUntil's own loads are not.
func (c *Cache[V]) StartLoad() Loading {
	if c == nil {
		return Loading{}
	}
	at := c.now()
	c.mu.RLock()
	defer c.mu.RUnlock()
	return Loading{gen: c.gen, at: at}
}

// Keep stores v, read by the load started at l, as the answer about key for qualifier
// until until (zero: the TTL), under GetUntil's rules.
func (c *Cache[V]) Keep(l Loading, key, qualifier string, v V, until time.Time) {
	if c == nil || !c.live.Load() {
		return
	}
	c.mu.Lock()
	c.keep(key, qualifier, v, until, l.at, l.gen)
	c.mu.Unlock()
}

// keep stores v, loaded from now on, as the answer about key for qualifier, unless an
// invalidation arrived since the load started (gen moved on), the key is settling, the
// cache is not in use, or until (zero: none) has passed. c.mu is held.
func (c *Cache[V]) keep(key, qualifier string, v V, until, now time.Time, gen uint64) {
	fresh := now.Add(c.ttl)
	expires := fresh
	if c.proven(now) {
		expires = now.Add(c.liveLife())
		c.keptLong.Store(true)
	}
	if !until.IsZero() && until.Before(expires) {
		expires = until
	}
	if c.gen != gen || !c.live.Load() || now.Before(c.settling[key]) || now.Before(c.settlingAll) || !now.Before(expires) {
		return
	}
	c.entries.store(key, qualifier, entry[V]{v: v, expires: expires, fresh: fresh}, now)
}

// liveSpread is the share of liveTTL by which an entry's life is shortened at random.
const liveSpread = 5 // up to a fifth

// liveLife is how long an entry stored while proven lives: liveTTL less up to a fifth of
// it, at random. Answers loaded together (a restart, a deploy, a fleet's first checks)
// would otherwise expire together, and every liveTTL the same keys would miss at once. In
// make bench's minute where the first minute's 100,000 uniform keys reach 5 minutes, the
// cache answered 91.3% with fixed lives and 97.7% with spread ones. Spread over a fifth
// of liveTTL, the reloads fall over a minute of the default 5 and spread further at each
// reload.
func (c *Cache[V]) liveLife() time.Duration {
	spread := int64(c.liveTTL / liveSpread)
	if spread <= 0 {
		return c.liveTTL
	}
	return c.liveTTL - time.Duration(rand.Int64N(spread))
}

// land ends f and takes it out of the table, unless an invalidation already did.
func (c *Cache[V]) land(key, qualifier string, f *flight[V]) {
	c.mu.Lock()
	if c.flights[key][qualifier] == f {
		delete(c.flights[key], qualifier)
		if len(c.flights[key]) == 0 {
			delete(c.flights, key)
		}
	}
	c.mu.Unlock()
	close(f.done)
}

// Invalidate drops key, and keeps any load already under way from storing what it read.
func (c *Cache[V]) Invalidate(key string) {
	if c == nil {
		return
	}
	now := c.now()
	c.mu.Lock()
	c.gen++
	c.entries.drop(key)
	delete(c.flights, key)
	if len(c.settling) >= maxSettling && !now.Before(c.nextPrune) {
		for k, until := range c.settling {
			if !now.Before(until) {
				delete(c.settling, k)
			}
		}
		c.nextPrune = now.Add(min(c.ttl, settle))
	}
	c.settling[key] = now.Add(min(c.ttl, settle))
	c.mu.Unlock()
}

// Clear drops every entry (an invalidation of every key).
func (c *Cache[V]) Clear() {
	if c == nil {
		return
	}
	now := c.now()
	c.mu.Lock()
	c.gen++
	c.entries.reset()
	clear(c.flights)
	c.settlingAll = now.Add(min(c.ttl, settle))
	c.mu.Unlock()
}

// ClearOn empties the cache whenever a message arrives on subject (an event that may
// change any answer, such as a new release). The returned function stops it.
func (c *Cache[V]) ClearOn(nc *nats.Conn, subject string) (stop func(), err error) {
	if c == nil {
		return func() {}, nil
	}
	stop, err = c.follow(nc, map[string]func(*nats.Msg){subject: func(*nats.Msg) { c.Clear() }})
	if err != nil {
		return nil, err
	}
	_ = nc.FlushTimeout(5 * time.Second)
	return stop, nil
}

// Subscribe makes the cache follow license.ChangedSubject on nc (and, when given, other
// subjects whose payload is a license key), and keeps it out of use (emptied) whenever nc
// is not connected. The returned function stops following.
func (c *Cache[V]) Subscribe(nc *nats.Conn, more ...string) (stop func(), err error) {
	if c == nil {
		return func() {}, nil
	}
	status := nc.StatusChanged(nats.CONNECTED, nats.RECONNECTING, nats.DISCONNECTED, nats.CLOSED)
	handlers := map[string]func(*nats.Msg){}
	for _, subject := range more {
		handlers[subject] = func(m *nats.Msg) { c.Invalidate(string(m.Data)) }
	}
	handlers[license.ChangedSubject] = func(m *nats.Msg) {
		c.Invalidate(string(m.Data))
		recent.note(string(m.Data))
	}
	unsubscribe, err := c.follow(nc, handlers)
	if err != nil {
		nc.RemoveStatusListener(status)
		return nil, err
	}
	unfollow := recent.follow(c)
	// The server knows the subscription once it answered a ping; messages missed before
	// that are covered by starting empty.
	_ = nc.FlushTimeout(5 * time.Second)
	c.setLive(nc.IsConnected())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for s := range status {
			c.setLive(s == nats.CONNECTED)
		}
	}()
	return func() {
		unfollow()
		unsubscribe()
		nc.RemoveStatusListener(status)
		<-done
		c.setLive(false)
	}, nil
}

// setLive switches the cache on or off; either way it starts again from empty, since
// invalidations may have been missed while the connection was down.
func (c *Cache[V]) setLive(live bool) {
	c.mu.Lock()
	c.gen++
	c.entries.reset()
	clear(c.flights)
	c.live.Store(live)
	c.mu.Unlock()
}

// Publish tells every process caching licenses that key changed, and waits (at most a
// second) until the NATS server has passed it on, so that the write's answer normally
// reaches its client after the other processes dropped the key. Call it after the change
// committed, and after invalidating the local cache.
func Publish(nc *nats.Conn, key string) error {
	return PublishOn(nc, license.ChangedSubject, key)
}

// PublishOn is Publish on another subject whose payload is a license key, for one key or
// several: one message each, numbered in sequence for the caches' liveness proof
// (liveness.go), and one wait for them all.
func PublishOn(nc *nats.Conn, subject string, keys ...string) error {
	if err := announcerOf(nc).publish(subject, keys); err != nil {
		return err
	}
	return nc.FlushTimeout(time.Second)
}

// ChangedHeader is the gRPC response metadata in which licensing names the keys a call
// changed. A caller that caches licensing's answers drops them as the answer arrives
// (DropAnnounced), before its own client sees it: a write made through a process is never
// followed by a stale answer from that process, whatever NATS's delivery is doing, nor
// from the services it asks next (RecentlyChangedHeader, recent.go).
//
// It is a binary ("-bin") header: gRPC carries its value base64-encoded, so a key holding
// any byte (a control character, invalid UTF-8, from a lookup that found nothing) rides
// it intact. A plain header refuses such a value, and the whole answer failed with it.
const ChangedHeader = "keyhouse-license-changed-bin"

// ValidUntilHeader is the gRPC response metadata in which an answer that holds only until
// the license expires says when that is (RFC 3339): validate-license's valid answer, which
// does not carry the expiry itself. A cache of the answer serves it no longer.
const ValidUntilHeader = "keyhouse-valid-until"

// AnnounceValidUntil puts t in the call's ValidUntilHeader (outside a call it does nothing).
func AnnounceValidUntil(ctx context.Context, t time.Time) {
	_ = grpc.SetHeader(ctx, metadata.Pairs(ValidUntilHeader, t.UTC().Format(time.RFC3339Nano)))
}

// ValidUntil reads ValidUntilHeader from an answer's metadata: zero when there is none
// (the answer holds until the license changes), NotKept when it cannot be read.
func ValidUntil(md metadata.MD) time.Time {
	v := md.Get(ValidUntilHeader)
	if len(v) == 0 {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, v[0])
	if err != nil {
		return NotKept
	}
	return t
}

// ClearHeader in a gRPC answer says that the call changed what any answer may depend on
// (a release was registered or unpublished): DropAnnounced empties the cache.
const ClearHeader = "keyhouse-answers-changed"

// AnnounceClearInCall sets ClearHeader on the answer of the call ctx belongs to, if any.
func AnnounceClearInCall(ctx context.Context) {
	_ = grpc.SetHeader(ctx, metadata.Pairs(ClearHeader, "1"))
}

// AnnounceInCall names key in the response metadata of the gRPC call ctx belongs to, if
// any (outside a call it does nothing).
func AnnounceInCall(ctx context.Context, key string) {
	_ = grpc.SetHeader(ctx, metadata.Pairs(ChangedHeader, key))
}

// DropAnnounced is the client interceptor that drops from c every key a call's answer
// names in ChangedHeader, and everything when it carries ClearHeader, failed calls
// included (a write whose commit was in doubt).
func (c *Cache[V]) DropAnnounced() grpc.UnaryClientInterceptor {
	return DropAnnouncedFrom(c)
}

// Announced is what DropAnnouncedFrom does to a cache (any *Cache).
type Announced interface {
	Invalidate(key string)
	Clear()
}

// ClearsOnly is c as DropAnnouncedFrom should treat a cache kept by something other than
// license keys (check-update's answers by class): an answer that names changed keys
// leaves it as it is, since dropping those keys would find nothing there and would keep
// every answer being loaded meanwhile from being stored; an answer that says every answer
// changed empties it.
func (c *Cache[V]) ClearsOnly() Announced { return clearsOnly[V]{c} }

type clearsOnly[V any] struct{ c *Cache[V] }

func (clearsOnly[V]) Invalidate(string) {}
func (o clearsOnly[V]) Clear()          { o.c.Clear() }

// DropAnnouncedFrom is DropAnnounced for several caches, reading each answer once.
func DropAnnouncedFrom(caches ...Announced) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		var header metadata.MD
		err := invoker(ctx, method, req, reply, cc, append(opts, grpc.Header(&header))...)
		keys, clearAll := header.Get(ChangedHeader), len(header.Get(ClearHeader)) > 0
		for _, key := range header.Get(LicenseChangedHeader) {
			recent.note(key)
		}
		for _, c := range caches {
			for _, key := range keys {
				c.Invalidate(key)
			}
			if clearAll {
				c.Clear()
			}
		}
		return err
	}
}
