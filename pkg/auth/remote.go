package auth

import (
	"context"
	"time"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	accountsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/accounts/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// RemoteTenants resolves API keys through the billing service, which owns them. There is
// no cache on purpose: a rotated key must stop working on every service at once.
type RemoteTenants struct {
	Client accountsv1.AccountsServiceClient
}

// ResolveAPIKey implements TenantResolver.
func (r RemoteTenants) ResolveAPIKey(ctx context.Context, apiKey string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	resp, err := r.Client.Authenticate(ctx, &accountsv1.AuthenticateRequest{ApiKey: apiKey})
	if err != nil {
		if status.Code(err) == codes.Unauthenticated {
			return "", apierr.Unauthorized
		}
		return "", apierr.Unavailable("Authentication service unavailable, retry")
	}
	return resp.GetTenantId(), nil
}
