package licensecache

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// TenantHeader is the gRPC response metadata in which an answer about one license key
// names the tenant that owns it (verify-license's, found or not usable). The gateway
// learns from it whose license a later request is about, to share its capacity fairly
// between tenants (gateway/internal/admission); the REST edge passes no metadata on.
const TenantHeader = "keyhouse-license-tenant"

// AnnounceTenant puts tenant in the call's TenantHeader (outside a call it does nothing).
func AnnounceTenant(ctx context.Context, tenant string) {
	_ = grpc.SetHeader(ctx, metadata.Pairs(TenantHeader, tenant))
}
