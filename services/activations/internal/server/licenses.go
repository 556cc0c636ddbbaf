package server

import (
	"context"
	"time"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/auth"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Licenses looks licenses up. tenant "" (public routes) finds the key in any tenant; the
// returned license carries its tenant_id either way.
type Licenses interface {
	Get(ctx context.Context, tenant, key string) (*licensingv1.License, error)
}

// RemoteLicenses asks the licensing service, which owns licenses. There is no cache: a
// revocation or a deletion must take effect on the next call.
type RemoteLicenses struct {
	Client   licensingv1.LicensingInternalServiceClient
	AdminKey string
	Timeout  time.Duration
}

// Get implements Licenses.
func (r RemoteLicenses) Get(ctx context.Context, tenant, key string) (*licensingv1.License, error) {
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = 3 * time.Second
	}
	ctx, cancel := context.WithTimeout(auth.Outgoing(ctx, r.AdminKey, tenant), timeout)
	defer cancel()
	resp, err := r.Client.GetLicense(ctx, &licensingv1.GetLicenseRequest{Key: key})
	switch status.Code(err) {
	case codes.OK:
		if resp.GetLicense() == nil {
			return nil, errLicenseNotFound
		}
		return resp.GetLicense(), nil
	case codes.NotFound:
		return nil, errLicenseNotFound
	default:
		return nil, apierr.Unavailable("Licensing service unavailable, retry")
	}
}
