// Package billingclient is the one way a service asks the billing service, which owns
// tenants, API keys and plans. Every call runs under grpcx.Call's policy (admin key +
// tenant metadata, grpcx.CallTimeout, WaitForReady within it).
package billingclient

import (
	"context"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/auth"
	"github.com/keyhouse/keyhouse/pkg/grpcx"
	accountsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/accounts/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
)

// Client calls AccountsService. It is safe for concurrent use.
type Client struct {
	rpc  accountsv1.AccountsServiceClient
	peer grpcx.Peer
	// auth is the same peer as seen by the auth interceptors, whose 503 names the step.
	auth grpcx.Peer
}

// New returns a client on conn (from grpcx.Dial or app.Deps.Dial) presenting adminKey.
func New(conn grpc.ClientConnInterface, adminKey string) *Client {
	return &Client{
		rpc:  accountsv1.NewAccountsServiceClient(conn),
		peer: grpcx.Peer{Name: "Billing", AdminKey: adminKey},
		auth: grpcx.Peer{Name: "Authentication"},
	}
}

// ErrSubscriptionInactive is the refusal of issuance, reactivation and release
// registration for a hosted tenant whose subscription is not active (addendum §6, §7).
var ErrSubscriptionInactive = apierr.Forbidden("Subscription is not active")

// ActivePlan is the one subscription check: the tenant's active-license quota (0:
// unlimited), or ErrSubscriptionInactive when its subscription is not active.
func (c *Client) ActivePlan(ctx context.Context, tenant string) (int, error) {
	e, err := c.Entitlements(ctx, tenant)
	if err != nil {
		return 0, err
	}
	if !e.GetSubscriptionActive() {
		return 0, ErrSubscriptionInactive
	}
	return int(e.GetLicenseLimit()), nil
}

// Entitlements is the tenant's plan: whether its subscription is active and its active
// license quota (0: unlimited). A tenant the installation does not have (deleted, or
// never created) is 404 "Tenant not found" (tenantpurge.ErrTenantNotFound): what every
// write that asks first refuses with. Failure to answer is 503 "Billing service
// unavailable, retry".
func (c *Client) Entitlements(ctx context.Context, tenant string) (*accountsv1.GetEntitlementsResponse, error) {
	return grpcx.Call(ctx, c.peer, tenant, func(ctx context.Context, o ...grpc.CallOption) (*accountsv1.GetEntitlementsResponse, error) {
		return c.rpc.GetEntitlements(ctx, &accountsv1.GetEntitlementsRequest{}, o...)
	}, codes.NotFound)
}

// TenantEmail is where to write to the tenant: its email, hosted; "" self-hosted.
func (c *Client) TenantEmail(ctx context.Context, tenant string) (string, error) {
	contact, err := c.TenantContact(ctx, tenant)
	return contact.Email, err
}

// Contact is who a tenant is to the people it deals with: the email and name it was
// created with, hosted; both "" self-hosted (the installation's one tenant has none).
type Contact struct {
	Email, Name string
}

// TenantContact is the tenant's Contact.
func (c *Client) TenantContact(ctx context.Context, tenant string) (Contact, error) {
	resp, err := grpcx.Call(ctx, c.peer, tenant, func(ctx context.Context, o ...grpc.CallOption) (*accountsv1.GetTenantContactResponse, error) {
		return c.rpc.GetTenantContact(ctx, &accountsv1.GetTenantContactRequest{}, o...)
	})
	return Contact{Email: resp.GetEmail(), Name: resp.GetName()}, err
}

// TenantExists says whether the installation has the tenant (always, self-hosted).
// Failure to answer is 503 "Billing service unavailable, retry".
func (c *Client) TenantExists(ctx context.Context, tenant string) (bool, error) {
	_, err := grpcx.Call(ctx, c.peer, tenant, func(ctx context.Context, o ...grpc.CallOption) (*accountsv1.GetTenantContactResponse, error) {
		return c.rpc.GetTenantContact(ctx, &accountsv1.GetTenantContactRequest{}, o...)
	}, codes.NotFound)
	if apierr.Is(err, codes.NotFound) {
		return false, nil
	}
	return err == nil, err
}

// ResolveAPIKey implements auth.TenantResolver: the tenant an API key or console session
// belongs to and whether it may only read, apierr.Unauthorized for a credential billing
// does not know (deleted, expired), auth.ErrTenantSuspended for a suspended tenant's.
// There is no cache on purpose: a rotated or deleted key must stop working on every
// service at once. Failure to answer is 503 "Authentication service unavailable, retry".
func (c *Client) ResolveAPIKey(ctx context.Context, apiKey string) (auth.Credential, error) {
	resp, err := grpcx.Call(ctx, c.auth, "", func(ctx context.Context, o ...grpc.CallOption) (*accountsv1.AuthenticateResponse, error) {
		return c.rpc.Authenticate(ctx, &accountsv1.AuthenticateRequest{ApiKey: apiKey}, o...)
	}, codes.Unauthenticated, codes.PermissionDenied)
	switch {
	case apierr.Is(err, codes.Unauthenticated):
		return auth.Credential{}, apierr.Unauthorized
	case apierr.Is(err, codes.PermissionDenied):
		return auth.Credential{}, auth.ErrTenantSuspended
	case err != nil:
		return auth.Credential{}, err
	}
	return auth.Credential{TenantID: resp.GetTenantId(), ReadOnly: resp.GetReadOnly()}, nil
}
