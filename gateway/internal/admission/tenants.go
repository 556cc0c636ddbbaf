package admission

import (
	"context"
	"hash/maphash"
	"net/http"
	"strings"
	"sync"

	"github.com/keyhouse/keyhouse/pkg/auth"
	"github.com/keyhouse/keyhouse/pkg/license"
	"github.com/keyhouse/keyhouse/pkg/licensecache"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// The buckets of requests whose tenant is not known.
const (
	// UnknownKeys holds every request about a license key the gateway has not seen an
	// answer for yet: a flood of made-up keys shares one fair share, and a real key leaves
	// it after its first answer.
	UnknownKeys = "unknown-keys"
	// NoKey holds the requests that carry neither a credential nor a license key.
	NoKey = "no-key"
	// UnknownCredentials holds every request whose credential no answer has proven yet:
	// made-up ones, refused ones, and a real one before its first answer. Counted apart,
	// each made-up credential would be a quiet tenant of its own, so a flood of them
	// would pass as many light tenants.
	UnknownCredentials = "unknown-credentials"
	// adminShare holds the requests made with the admin key.
	adminShare = "admin"
)

// maxKnownKeys bounds the book (about 150 bytes an entry beyond the key, 75 MB or so
// when full); when it is full, each new key evicts an arbitrary old one, which simply
// counts as unknown again until its next answer.
const maxKnownKeys = 500_000

// maxKnownCredentials bounds the credentials the book knows (a hash and a share name
// each), evicting as maxKnownKeys does: an evicted credential counts as unknown until
// its next answer.
const maxKnownCredentials = 100_000

// Tenants is the book of which tenant owns which license key and which credential,
// learned from the services' answers (licensecache.TenantHeader, auth.CallerHeader), and
// the way a request is assigned to a tenant.
type Tenants struct {
	mu sync.RWMutex
	// byKey maps a canonical key to its tenant's share name ("tenant:" and the id).
	byKey map[string]string
	// byCredential maps the hash of an Authorization header (credentialHash; the value
	// itself is never kept) to the share of whom an answer proved it to be: its tenant's,
	// or adminShare.
	byCredential map[uint64]string
	// shares interns the share names by tenant id, so a million keys of one tenant share
	// one string and a request's share costs no allocation.
	shares map[string]string
	seed   maphash.Seed
}

// NewTenants returns an empty book.
func NewTenants() *Tenants {
	return &Tenants{byKey: map[string]string{}, byCredential: map[uint64]string{}, shares: map[string]string{}, seed: maphash.MakeSeed()}
}

// Learn records that key belongs to tenant.
func (t *Tenants) Learn(key, tenant string) {
	if key == "" || tenant == "" {
		return
	}
	key = license.CanonicalKey(key)
	t.mu.RLock()
	share, known := t.shares[tenant]
	known = known && t.byKey[key] == share
	t.mu.RUnlock()
	if known {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	putBounded(t.byKey, key, t.shareLocked(tenant), maxKnownKeys)
}

// LearnCredential records who an answer proved the Authorization header authorization
// to be (auth.CallerHeader's value): "admin", or "tenant " and the tenant id.
func (t *Tenants) LearnCredential(authorization, caller string) {
	if authorization == "" {
		return
	}
	tenant, isTenant := strings.CutPrefix(caller, auth.CallerTenantPrefix)
	if caller != auth.CallerAdmin && (!isTenant || tenant == "") {
		return
	}
	h := t.credentialHash(authorization)
	t.mu.RLock()
	share, known := t.byCredential[h]
	want := adminShare
	if isTenant {
		want = t.shares[tenant] // "" before the tenant's first share
	}
	known = known && share == want
	t.mu.RUnlock()
	if known {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	share = adminShare
	if isTenant {
		share = t.shareLocked(tenant)
	}
	putBounded(t.byCredential, h, share, maxKnownCredentials)
}

// shareLocked is tenant's share name, interned. t.mu is held for writing.
func (t *Tenants) shareLocked(tenant string) string {
	share, ok := t.shares[tenant]
	if !ok {
		share = sharePrefix + tenant
		t.shares[tenant] = share
	}
	return share
}

// putBounded sets m[k] = v; when m is full and k new, an arbitrary entry goes first.
func putBounded[K comparable](m map[K]string, k K, v string, bound int) {
	if _, ok := m[k]; !ok && len(m) >= bound {
		for old := range m {
			delete(m, old)
			break
		}
	}
	m[k] = v
}

// credentialHash is how the book tells credentials apart without keeping them.
func (t *Tenants) credentialHash(authorization string) uint64 {
	return maphash.String(t.seed, authorization)
}

// sharePrefix starts the share name of a tenant known from its keys.
const sharePrefix = "tenant:"

// Owner is the tenant key belongs to, if an answer named it.
func (t *Tenants) Owner(key string) (string, bool) {
	share, ok := t.shareOf([]byte(key))
	return strings.TrimPrefix(share, sharePrefix), ok
}

// shareOf is the share of the tenant key belongs to, if known. A key in its canonical
// spelling (as clients send it) is looked up without an allocation.
func (t *Tenants) shareOf(key []byte) (string, bool) {
	t.mu.RLock()
	share, ok := t.byKey[string(key)]
	t.mu.RUnlock()
	if ok {
		return share, true
	}
	canonical := license.CanonicalKey(string(key))
	if canonical == string(key) {
		return "", false
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	share, ok = t.byKey[canonical]
	return share, ok
}

// Of names the share r counts against: a request with a credential counts for whom an
// answer proved that credential to be (its tenant, or the admin), UnknownCredentials
// before; one about a license key for the key's tenant once known (UnknownKeys before);
// anything else is NoKey. A tenant's credentials and its license keys share one share.
func (t *Tenants) Of(r *http.Request) string {
	share, _, _ := t.ofRequest(r)
	return share
}

// ofRequest is Of, and the license key the request's body names and the body as read (nil
// for a request with a credential, or one that names none; peekLicense).
func (t *Tenants) ofRequest(r *http.Request) (share string, key, cut []byte) {
	if authorization := r.Header.Get("Authorization"); authorization != "" {
		h := t.credentialHash(authorization)
		t.mu.RLock()
		share, ok := t.byCredential[h]
		t.mu.RUnlock()
		if ok {
			return share, nil, nil
		}
		return UnknownCredentials, nil, nil
	}
	if r.Method != http.MethodPost {
		return NoKey, nil, nil
	}
	key, cut = peekLicense(r)
	if len(key) == 0 {
		return NoKey, nil, nil
	}
	if share, ok := t.shareOf(key); ok {
		return share, key, cut
	}
	return UnknownKeys, key, cut
}

// Learning is the client interceptor of the connections to the services: every key an
// answer names with its tenant (licensecache.TenantHeader: every answer about license
// keys, each found item of a batch included) goes into the book, and so does the
// credential of a call whose answer names who it proved to be (auth.CallerHeader).
func (t *Tenants) Learning() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		var header metadata.MD
		err := invoker(ctx, method, req, reply, cc, append(opts, grpc.Header(&header))...)
		licensecache.Tenants(header, t.Learn)
		if caller := header.Get(auth.CallerHeader); len(caller) > 0 {
			// The gateway passes the client's Authorization header on as is.
			if md, ok := metadata.FromOutgoingContext(ctx); ok {
				if authorization := md.Get("authorization"); len(authorization) > 0 {
					t.LearnCredential(authorization[0], caller[0])
				}
			}
		}
		return err
	}
}
