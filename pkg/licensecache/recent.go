package licensecache

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keyhouse/keyhouse/pkg/license"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Recent changes: read-your-writes through every process a request passes.
//
// A write's answer drops the changed keys from the caller's caches (DropAnnounced) before
// its client sees it, but the services the caller asks next on a client's behalf keep
// caches of their own (activations and releases keep licensing's answers, licensing keeps
// its rows on every replica), and those hear of the change only when NATS delivers the
// event, on their own time. A revocation answered by the gateway, then a lease asked
// through it a millisecond later, could find activations' entry from before.
//
// So every process remembers, for recentWindow, the license keys it heard changed:
// from a write's answer (LicenseChangedHeader), from the change events on NATS, and from
// its own callers. Every call it makes names, in RecentlyChangedHeader, those of them the
// request is about (its fields named key and keys, at any depth, batches included); the
// process called drops them from every cache it keeps (HonorRecentChanges) before serving
// the call, and remembers them in turn, so the hint reaches the last hop. Outside the
// window a call carries nothing and pays one atomic load.

// recentWindow is how long a process names a changed key on its calls about it: the
// default TTL, the longest a service that has not heard the change serves an entry of it
// without the proof of liveness, and the bound within which a cache that stops hearing
// changes loses that proof. NATS delivers a change within milliseconds on a quiet
// machine, but on a loaded one later than the next calls: with the settle window (100 ms)
// as this window, a check-update 172 ms after a revocation through the same gateway
// reached a releases replica that had not heard it, and was answered from its cache.
const recentWindow = DefaultTTL

// RecentlyChangedHeader is the gRPC request metadata naming the license keys (canonical)
// of the request that the caller heard changed within recentWindow. Binary, as
// ChangedHeader, so that any byte rides it.
const RecentlyChangedHeader = "keyhouse-license-recently-changed-bin"

// LicenseChangedHeader is the gRPC response metadata naming, among the keys of
// ChangedHeader, those whose license itself changed (not only one of its seats): the
// caller names them on its next calls (RecentlyChangedHeader) for recentWindow.
const LicenseChangedHeader = "keyhouse-license-row-changed-bin"

// AnnounceLicenseChangedInCall names key, whose license changed, in both ChangedHeader
// and LicenseChangedHeader of the answer of the call ctx belongs to, if any.
func AnnounceLicenseChangedInCall(ctx context.Context, key string) {
	_ = grpc.SetHeader(ctx, metadata.Pairs(ChangedHeader, key, LicenseChangedHeader, key))
}

// recentChanges is one process's memory of the license keys changed within recentWindow,
// and the caches that drop a key when a caller names it.
type recentChanges struct {
	now func() time.Time
	// latest is the end of the newest key's window (Unix nanoseconds): past it, no key is
	// recent, and a call is not looked into.
	latest atomic.Int64
	mu     sync.RWMutex
	until  map[string]time.Time
	// nextPrune: the record is pruned of ended windows at most once per window, so a burst
	// of changes (an import) costs one pass per window, not one per change.
	nextPrune time.Time
	caches    map[Announced]int // the following caches, by how many subscriptions each has
}

// recent is the process's record: every cache that follows NATS (Subscribe) is in it.
var recent = newRecentChanges()

func newRecentChanges() *recentChanges {
	return &recentChanges{now: time.Now, until: map[string]time.Time{}, caches: map[Announced]int{}}
}

// note records that key changed now.
func (r *recentChanges) note(key string) {
	now := r.now()
	until := now.Add(recentWindow)
	r.mu.Lock()
	if len(r.until) >= maxSettling && !now.Before(r.nextPrune) {
		for k, u := range r.until {
			if !now.Before(u) {
				delete(r.until, k)
			}
		}
		r.nextPrune = until
	}
	r.until[key] = until
	if n := until.UnixNano(); n > r.latest.Load() {
		r.latest.Store(n)
	}
	r.mu.Unlock()
}

// named returns those of req's keys that changed within the window (canonical), appended
// to dst.
func (r *recentChanges) named(req any, dst []string) []string {
	now := r.now()
	if now.UnixNano() >= r.latest.Load() {
		return dst
	}
	m, ok := req.(proto.Message)
	if !ok {
		return dst
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	eachKey(m.ProtoReflect(), func(key string) {
		key = license.CanonicalKey(key)
		if now.Before(r.until[key]) && !slices.Contains(dst, key) {
			dst = append(dst, key)
		}
	})
	return dst
}

// eachKey calls visit with every string field named key, and every element of a repeated
// one named keys, in m and the messages it holds (maps aside: no request keeps licenses in
// one).
func eachKey(m protoreflect.Message, visit func(string)) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap():
		case fd.Kind() == protoreflect.StringKind && fd.Name() == "key" && !fd.IsList():
			visit(v.String())
		case fd.Kind() == protoreflect.StringKind && fd.Name() == "keys" && fd.IsList():
			for i, list := 0, v.List(); i < list.Len(); i++ {
				visit(list.Get(i).String())
			}
		case fd.Kind() == protoreflect.MessageKind && fd.IsList():
			for i, list := 0, v.List(); i < list.Len(); i++ {
				eachKey(list.Get(i).Message(), visit)
			}
		case fd.Kind() == protoreflect.MessageKind:
			eachKey(v.Message(), visit)
		}
		return true
	})
}

// follow makes c drop the keys callers name; the returned function undoes it.
func (r *recentChanges) follow(c Announced) (stop func()) {
	r.mu.Lock()
	r.caches[c]++
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		if r.caches[c]--; r.caches[c] <= 0 {
			delete(r.caches, c)
		}
		r.mu.Unlock()
	}
}

// honor drops the keys a caller named from every following cache and remembers them;
// only the keys the request is about, so that a call (public ones come from anywhere the
// port is reachable) cannot empty more of the cache than asking about those keys would.
func (r *recentChanges) honor(named []string, req any) {
	if len(named) == 0 {
		return
	}
	m, ok := req.(proto.Message)
	if !ok {
		return
	}
	// A set: what a caller names is bounded only by the size of its headers.
	names := make(map[string]bool, len(named))
	for _, key := range named {
		names[key] = true
	}
	var keys []string
	eachKey(m.ProtoReflect(), func(key string) {
		if key = license.CanonicalKey(key); names[key] && !slices.Contains(keys, key) {
			keys = append(keys, key)
		}
	})
	if len(keys) == 0 {
		return
	}
	r.mu.Lock()
	caches := make([]Announced, 0, len(r.caches))
	for c := range r.caches {
		caches = append(caches, c)
	}
	r.mu.Unlock()
	for _, key := range keys {
		for _, c := range caches {
			c.Invalidate(key)
		}
		r.note(key)
	}
}

func (r *recentChanges) forwarding() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if keys := r.named(req, nil); len(keys) > 0 {
			kv := make([]string, 0, 2*len(keys))
			for _, key := range keys {
				kv = append(kv, RecentlyChangedHeader, key)
			}
			ctx = metadata.AppendToOutgoingContext(ctx, kv...)
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

func (r *recentChanges) honoring() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		r.honor(metadata.ValueFromIncomingContext(ctx, RecentlyChangedHeader), req)
		return handler(ctx, req)
	}
}

// ForwardRecentChanges is the client interceptor of every connection to a service: a call
// names the keys of its request that this process heard changed within recentWindow.
func ForwardRecentChanges() grpc.UnaryClientInterceptor { return recent.forwarding() }

// HonorRecentChanges is the server interceptor of every service: the keys a call names as
// recently changed, among those it is about, leave this process's caches before the call
// is served.
func HonorRecentChanges() grpc.UnaryServerInterceptor { return recent.honoring() }
