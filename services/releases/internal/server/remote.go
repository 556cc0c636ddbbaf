package server

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/auth"
	"github.com/keyhouse/keyhouse/pkg/signing"
	accountsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/accounts/v1"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// remoteTimeout bounds a call to another service: a slow dependency answers 503, never a hang.
const remoteTimeout = 3 * time.Second

var errLicensingDown = apierr.Unavailable("Licensing service unavailable, retry")

// RemoteLicensing asks the licensing service, which owns licenses, product ownership and
// the signing keys. Licenses are not cached: a revocation must count on the next check.
type RemoteLicensing struct {
	Client   licensingv1.LicensingInternalServiceClient
	AdminKey string

	keyring atomic.Pointer[signing.Keyring]
	fetch   sync.Mutex
}

func (r *RemoteLicensing) call(ctx context.Context, tenant string) (context.Context, context.CancelFunc) {
	return context.WithTimeout(auth.Outgoing(ctx, r.AdminKey, tenant), remoteTimeout)
}

// waitForReady lets a call ride out a reconnect (licensing starting later, or restarting)
// within remoteTimeout, instead of failing the moment the connection is not up.
var waitForReady = grpc.WaitForReady(true)

// License implements Licensing: the key in any tenant.
func (r *RemoteLicensing) License(ctx context.Context, key string) (*licensingv1.License, error) {
	ctx, cancel := r.call(ctx, "")
	defer cancel()
	resp, err := r.Client.GetLicense(ctx, &licensingv1.GetLicenseRequest{Key: key}, waitForReady)
	switch {
	case status.Code(err) == codes.NotFound, err == nil && resp.GetLicense() == nil:
		return nil, errLicenseNotFound
	case err != nil:
		return nil, errLicensingDown
	}
	return resp.GetLicense(), nil
}

// ClaimProduct implements Licensing: the one ownership claim issue-license also makes.
func (r *RemoteLicensing) ClaimProduct(ctx context.Context, tenant, productID string) error {
	ctx, cancel := r.call(ctx, tenant)
	defer cancel()
	_, err := r.Client.ClaimProduct(ctx, &licensingv1.ClaimProductRequest{ProductId: productID}, waitForReady)
	switch status.Code(err) {
	case codes.OK:
		return nil
	case codes.PermissionDenied:
		return errProductOwned
	}
	return errLicensingDown
}

// Keyring implements Licensing. The keyring is fetched once and kept: it does not change
// while the processes run (rotation restarts them, see docs/licensing.md).
func (r *RemoteLicensing) Keyring(ctx context.Context) (*signing.Keyring, error) {
	if k := r.keyring.Load(); k != nil {
		return k, nil
	}
	r.fetch.Lock()
	defer r.fetch.Unlock()
	if k := r.keyring.Load(); k != nil {
		return k, nil
	}
	ctx, cancel := r.call(ctx, "")
	defer cancel()
	resp, err := r.Client.GetSigningKeys(ctx, &licensingv1.GetSigningKeysRequest{}, waitForReady)
	if err != nil {
		return nil, errLicensingDown
	}
	k, err := signing.ParseKeyring(resp.GetKeyring())
	if err != nil {
		return nil, err
	}
	r.keyring.Store(k)
	return k, nil
}

// Prefetch fetches the keyring in the background until it has it or ctx ends, so the
// first requests after a start do not wait for it; licensing may start later than this
// service.
func (r *RemoteLicensing) Prefetch(ctx context.Context, log *slog.Logger) {
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
		k, err := r.Keyring(ctx)
		if err == nil {
			log.Info("signing keyring loaded", "keyring", k)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// RemoteEntitlements asks the billing service whether a hosted tenant's subscription is active.
type RemoteEntitlements struct {
	Client   accountsv1.AccountsServiceClient
	AdminKey string
}

// SubscriptionActive implements Entitlements.
func (r RemoteEntitlements) SubscriptionActive(ctx context.Context, tenant string) (bool, error) {
	ctx, cancel := context.WithTimeout(auth.Outgoing(ctx, r.AdminKey, tenant), remoteTimeout)
	defer cancel()
	resp, err := r.Client.GetEntitlements(ctx, &accountsv1.GetEntitlementsRequest{}, waitForReady)
	if err != nil {
		return false, apierr.Unavailable("Billing service unavailable, retry")
	}
	return resp.GetSubscriptionActive(), nil
}
