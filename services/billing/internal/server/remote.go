package server

import (
	"context"
	"time"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/auth"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	"google.golang.org/grpc"
)

// remoteTimeout bounds a call to another service: a slow dependency answers 503, never a hang.
const remoteTimeout = 3 * time.Second

// RemoteUsage asks the licensing service for the active-license count.
type RemoteUsage struct {
	Client   licensingv1.LicensingInternalServiceClient
	AdminKey string
}

// CountActive implements Usage.
func (r RemoteUsage) CountActive(ctx context.Context, tenant string) (int, error) {
	ctx, cancel := context.WithTimeout(auth.Outgoing(ctx, r.AdminKey, tenant), remoteTimeout)
	defer cancel()
	resp, err := r.Client.CountActiveLicenses(ctx, &licensingv1.CountActiveLicensesRequest{}, grpc.WaitForReady(true))
	if err != nil {
		return 0, apierr.Unavailable("Licensing service unavailable, retry")
	}
	return int(resp.GetActive()), nil
}
