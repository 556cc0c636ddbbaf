package admission

import (
	"context"
	"hash/maphash"
	"net/http"
	"strconv"
	"sync"

	"github.com/keyhouse/keyhouse/gateway/internal/ratelimit"
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
	mu    sync.RWMutex
	byKey map[string]string
	// names interns tenant ids, so a million keys of one tenant share one string.
	names map[string]string
	seed  maphash.Seed
}

// NewTenants returns an empty book.
func NewTenants() *Tenants {
	return &Tenants{byKey: map[string]string{}, names: map[string]string{}, seed: maphash.MakeSeed()}
}

// Learn records that key belongs to tenant.
func (t *Tenants) Learn(key, tenant string) {
	if key == "" || tenant == "" {
		return
	}
	key = license.CanonicalKey(key)
	t.mu.RLock()
	known := t.byKey[key] == tenant
	t.mu.RUnlock()
	if known {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	name, ok := t.names[tenant]
	if !ok {
		name = tenant
		t.names[name] = name
	}
	if _, ok := t.byKey[key]; !ok && len(t.byKey) >= maxKnownKeys {
		for k := range t.byKey {
			delete(t.byKey, k)
			break
		}
	}
	t.byKey[key] = name
}

// Owner is the tenant key belongs to, if an answer named it.
func (t *Tenants) Owner(key string) (string, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	name, ok := t.byKey[license.CanonicalKey(key)]
	return name, ok
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
	key := ratelimit.LicenseKey(r)
	if key == "" {
		return NoKey
	}
	if tenant, ok := t.Owner(key); ok {
		return "tenant:" + tenant
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
