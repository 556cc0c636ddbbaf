package licensecache

import (
	"context"
	"strings"

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
func AnnounceTenant(ctx context.Context, keysAndTenants ...string) {
	if len(keysAndTenants) < 2 {
		return
	}
	values := make([]string, 0, len(keysAndTenants)/2)
	for i := 0; i+1 < len(keysAndTenants); i += 2 {
		values = append(values, keysAndTenants[i]+" "+keysAndTenants[i+1])
	}
	_ = grpc.SetHeader(ctx, metadata.MD{TenantHeader: values})
}

// Tenants reads TenantHeader from an answer's metadata and calls learn for each key.
func Tenants(md metadata.MD, learn func(key, tenant string)) {
	for _, v := range md.Get(TenantHeader) {
		if key, tenant, ok := strings.Cut(v, " "); ok {
			learn(key, tenant)
		}
	}
}
