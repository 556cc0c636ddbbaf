package licensecache

import (
	"context"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// TenantHeader is the gRPC response metadata in which an answer about license keys names
// the tenant that owns each key it found, one "<key> <tenant>" value per key: licensing's
// verify-license answers, and every answer of activations and releases that looked a
// license up in any tenant (pkg/licensingclient), each found item of a batch included.
// The gateway learns from it whose license a later request is about, to share its
// capacity fairly between tenants (gateway/internal/admission); the REST edge passes no
// metadata on.
const TenantHeader = "keyhouse-license-tenant"

// AnnounceTenant adds to the call's TenantHeader the tenant of each key found, given as
// pairs (key, tenant, key, tenant, …; each key canonical), in one header write: gRPC
// copies the header it holds at every write, so a batch announced one key at a time
// cost the square of its size. Outside a call it does nothing.
//
// Within GatherTenants's context the pairs are gathered instead, for one write at the end.
func AnnounceTenant(ctx context.Context, keysAndTenants ...string) {
	if len(keysAndTenants) < 2 {
		return
	}
	values := make([]string, 0, len(keysAndTenants)/2)
	for i := 0; i+1 < len(keysAndTenants); i += 2 {
		values = append(values, keysAndTenants[i]+" "+keysAndTenants[i+1])
	}
	if g, ok := ctx.Value(gatheredKey{}).(*gathered); ok && g.gather(values) {
		return
	}
	_ = grpc.SetHeader(ctx, metadata.MD{TenantHeader: values})
}

// GatherTenants returns a context (and its descendants) in which AnnounceTenant gathers
// what it names, from any goroutine, and a function that writes all of it in one header
// write: a batch whose items each look their license up on their own names every item's
// tenant once, not in a write per item (each copying the header written so far). After
// that write, AnnounceTenant in the context writes at once again.
func GatherTenants(ctx context.Context) (context.Context, func()) {
	g := &gathered{}
	return context.WithValue(ctx, gatheredKey{}, g), func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if !g.written && len(g.values) > 0 {
			_ = grpc.SetHeader(ctx, metadata.MD{TenantHeader: g.values})
		}
		g.written, g.values = true, nil
	}
}

type gatheredKey struct{}

type gathered struct {
	mu      sync.Mutex
	values  []string
	written bool
}

// gather keeps values for the one write, unless it was made.
func (g *gathered) gather(values []string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.written {
		g.values = append(g.values, values...)
	}
	return !g.written
}

// Tenants reads TenantHeader from an answer's metadata and calls learn for each key.
func Tenants(md metadata.MD, learn func(key, tenant string)) {
	for _, v := range md.Get(TenantHeader) {
		if key, tenant, ok := strings.Cut(v, " "); ok {
			learn(key, tenant)
		}
	}
}
