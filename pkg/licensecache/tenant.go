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

// AnnounceTenant adds key's tenant to the call's TenantHeader (outside a call it does
// nothing). key is the canonical key of the license found.
func AnnounceTenant(ctx context.Context, key, tenant string) {
	_ = grpc.SetHeader(ctx, metadata.Pairs(TenantHeader, key+" "+tenant))
}

// Tenants reads TenantHeader from an answer's metadata and calls learn for each key.
func Tenants(md metadata.MD, learn func(key, tenant string)) {
	for _, v := range md.Get(TenantHeader) {
		if key, tenant, ok := strings.Cut(v, " "); ok {
			learn(key, tenant)
		}
	}
}
