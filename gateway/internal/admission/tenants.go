package admission

import (
	"context"
	"hash/maphash"
	"net/http"
	"strconv"
	"strings"
	"sync"

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
)

// maxKnownKeys bounds the book (about 100 bytes an entry); when it is full, each new key
// evicts an arbitrary old one, which simply counts as unknown again until its next answer.
const maxKnownKeys = 500_000

// Tenants is the book of which tenant owns which license key, learned from the services'
// answers (licensecache.TenantHeader), and the way a request is assigned to a tenant.
type Tenants struct {
	mu sync.RWMutex
	// byKey maps a canonical key to its tenant's share name ("tenant:" and the id).
	byKey map[string]string
	// shares interns the share names by tenant id, so a million keys of one tenant share
	// one string and a request's share costs no allocation.
	shares map[string]string
	seed   maphash.Seed
}

// NewTenants returns an empty book.
func NewTenants() *Tenants {
	return &Tenants{byKey: map[string]string{}, shares: map[string]string{}, seed: maphash.MakeSeed()}
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
	share, ok := t.shares[tenant]
	if !ok {
		share = sharePrefix + tenant
		t.shares[tenant] = share
	}
	if _, ok := t.byKey[key]; !ok && len(t.byKey) >= maxKnownKeys {
		for k := range t.byKey {
			delete(t.byKey, k)
			break
		}
	}
	t.byKey[key] = share
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

// Of names the share r counts against: a request with a credential counts by that
// credential (one API key is one tenant; the value is hashed, never kept); one about a
// license key by the key's tenant once known (UnknownKeys before); anything else is NoKey.
func (t *Tenants) Of(r *http.Request) string {
	if auth := r.Header.Get("Authorization"); auth != "" {
		return "credential:" + strconv.FormatUint(maphash.String(t.seed, auth), 36)
	}
	if r.Method != http.MethodPost {
		return NoKey
	}
	key := peekKey(r)
	if len(key) == 0 {
		return NoKey
	}
	if share, ok := t.shareOf(key); ok {
		return share
	}
	return UnknownKeys
}

// Learning is the client interceptor of the connection to licensing: every key an
// answer names with its tenant (licensecache.TenantHeader: verify-license's, and each
// found item of a batch of them) goes into the book.
func (t *Tenants) Learning() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		var header metadata.MD
		err := invoker(ctx, method, req, reply, cc, append(opts, grpc.Header(&header))...)
		licensecache.Tenants(header, t.Learn)
		return err
	}
}
