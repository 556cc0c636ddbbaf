// Package remote is how the storefront asks the licensing service: issue a license for
// a tenant (with the Idempotency-Key), claim a product for a mapping, and fetch the
// installation keyring that seals webhook secrets and buyer addresses.
package remote

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/auth"
	"github.com/keyhouse/keyhouse/pkg/idempotency"
	"github.com/keyhouse/keyhouse/pkg/signing"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// callTimeout bounds one call: a slow licensing service is a retry, never a hang.
const callTimeout = 5 * time.Second

// ErrUnavailable is licensing not answering.
var ErrUnavailable = apierr.Unavailable("Licensing service unavailable, retry")

var waitForReady = grpc.WaitForReady(true)

// Licensing is the licensing service's internal API.
type Licensing struct {
	Client   licensingv1.LicensingInternalServiceClient
	AdminKey string

	keyring atomic.Pointer[signing.Keyring]
	fetch   sync.Mutex
}

func (r *Licensing) ctx(ctx context.Context, tenant string) (context.Context, context.CancelFunc) {
	return context.WithTimeout(auth.Outgoing(ctx, r.AdminKey, tenant), callTimeout)
}

// IssueLicense issues for tenant under idemKey and returns the key. Errors are the
// licensing service's own statuses (quota, invalid input, ownership), or ErrUnavailable.
func (r *Licensing) IssueLicense(ctx context.Context, tenant, idemKey string, req *licensingv1.IssueLicenseRequest) (string, error) {
	ctx, cancel := r.ctx(ctx, tenant)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, idempotency.Header, idemKey)
	resp, err := r.Client.IssueLicenseForTenant(ctx, &licensingv1.IssueLicenseForTenantRequest{License: req}, waitForReady)
	if err != nil {
		return "", statusOrUnavailable(err)
	}
	return resp.GetKey(), nil
}

// ClaimProduct binds productID to tenant, as issue-license does (hosted ownership).
func (r *Licensing) ClaimProduct(ctx context.Context, tenant, productID string) error {
	ctx, cancel := r.ctx(ctx, tenant)
	defer cancel()
	_, err := r.Client.ClaimProduct(ctx, &licensingv1.ClaimProductRequest{ProductId: productID}, waitForReady)
	if err != nil {
		return statusOrUnavailable(err)
	}
	return nil
}

// statusOrUnavailable passes the answers licensing gives on purpose (a client error) and
// turns transport failures and internal errors into ErrUnavailable.
func statusOrUnavailable(err error) error {
	switch status.Code(err) {
	case codes.InvalidArgument, codes.PermissionDenied, codes.NotFound, codes.AlreadyExists, codes.FailedPrecondition:
		st := status.Convert(err)
		return &apierr.Error{Code: st.Code(), Message: st.Message()}
	}
	return ErrUnavailable
}

// Keyring returns the installation keyring, fetched once (it changes only with a restart).
func (r *Licensing) Keyring(ctx context.Context) (*signing.Keyring, error) {
	if k := r.keyring.Load(); k != nil {
		return k, nil
	}
	r.fetch.Lock()
	defer r.fetch.Unlock()
	if k := r.keyring.Load(); k != nil {
		return k, nil
	}
	ctx, cancel := r.ctx(ctx, "")
	defer cancel()
	resp, err := r.Client.GetSigningKeys(ctx, &licensingv1.GetSigningKeysRequest{}, waitForReady)
	if err != nil {
		return nil, ErrUnavailable
	}
	k, err := signing.ParseKeyring(resp.GetKeyring())
	if err != nil {
		return nil, err
	}
	r.keyring.Store(k)
	return k, nil
}
