// Package licensingclient is the one way a service asks the licensing service, which owns
// licenses, product ownership and the signing keys. Every call runs under grpcx.Call's
// policy (admin key + tenant metadata, grpcx.CallTimeout, WaitForReady within it) and a
// failure to answer is 503 "Licensing service unavailable, retry".
//
// Licenses are cached when the caller asks for it (CacheLicenses): the cache follows the
// change events licensing publishes, so a revocation or deletion counts within the bound
// pkg/licensecache documents (at once normally, LICENSE_CACHE_TTL at worst).
package licensingclient

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/grpcx"
	"github.com/keyhouse/keyhouse/pkg/idempotency"
	"github.com/keyhouse/keyhouse/pkg/license"
	"github.com/keyhouse/keyhouse/pkg/licensecache"
	"github.com/keyhouse/keyhouse/pkg/signing"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	"github.com/nats-io/nats.go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"
)

// Client calls LicensingInternalService. It is safe for concurrent use.
type Client struct {
	rpc    licensingv1.LicensingInternalServiceClient
	portal licensingv1.LicensingPortalServiceClient
	// public answers GetPublicKey: the key licensing signs with now (CurrentKeyring).
	public licensingv1.LicensingServiceClient
	peer   grpcx.Peer
	// licenses caches License's answers by canonical key (nil: no cache).
	licenses *licensecache.Cache[*licensingv1.License]
	// misses sends the cache's misses to licensing together (GetLicenses).
	misses grpcx.Batcher[string, *licensingv1.GetLicenseResponse]

	keyring atomic.Pointer[signing.Keyring]
	fetch   sync.Mutex
	// keyChecked is when CurrentKeyring last asked licensing for its key (unix nanos):
	// it asks at most once a KeyCheckInterval, however many signings there are.
	keyChecked atomic.Int64
	// now is the clock keyChecked is read on (tests move it).
	now func() time.Time
}

// KeyCheckInterval is how often CurrentKeyring asks licensing which key signs now: one
// small call a second for the whole process, rather than one per signing (releases signs
// each release's manifest once a second, so thousands of releases would be thousands of
// calls), and one wait at most a second for a licensing that does not answer. A signing
// follows a promotion within that second.
const KeyCheckInterval = time.Second

// New returns a client on conn (from grpcx.Dial or app.Deps.Dial) presenting adminKey.
func New(conn grpc.ClientConnInterface, adminKey string) *Client {
	c := &Client{
		rpc:    licensingv1.NewLicensingInternalServiceClient(conn),
		portal: licensingv1.NewLicensingPortalServiceClient(conn),
		public: licensingv1.NewLicensingServiceClient(conn),
		peer:   grpcx.Peer{Name: "Licensing", AdminKey: adminKey},
		now:    time.Now,
	}
	c.misses.Reads = true
	c.misses.Send = func(ctx context.Context, keys []string) ([]*licensingv1.GetLicenseResponse, error) {
		resp, err := grpcx.Call(ctx, c.peer, "", func(ctx context.Context, o ...grpc.CallOption) (*licensingv1.GetLicensesResponse, error) {
			return c.rpc.GetLicenses(ctx, &licensingv1.GetLicensesRequest{Keys: keys}, o...)
		}, codes.Unimplemented)
		return resp.GetResults(), err
	}
	return c
}

// CacheLicenses makes License answer from a cache whose entries live ttl (0: no cache),
// emptied of every license licensing announces as changed on nc. Call it before serving;
// stop ends the subscription.
func (c *Client) CacheLicenses(nc *nats.Conn, ttl time.Duration) (stop func(), err error) {
	return c.CacheLicensesLive(nc, ttl, 0)
}

// CacheLicensesLive is CacheLicenses whose entries live liveTTL (LICENSE_CACHE_LIVE_TTL)
// while the cache is proven live (pkg/licensecache's liveness: it has seen every change
// event licensing published), as the gateway's caches do; past ttl, only while that proof
// holds. A revocation or deletion still drops the key as soon as NATS delivers it.
func (c *Client) CacheLicensesLive(nc *nats.Conn, ttl, liveTTL time.Duration) (stop func(), err error) {
	cache := licensecache.NewLive[*licensingv1.License](ttl, liveTTL)
	if stop, err = cache.Subscribe(nc); err != nil {
		return nil, err
	}
	c.licenses = cache
	return stop, nil
}

// License finds the license of key in tenant, or in any tenant when tenant is "" (public
// routes); the license carries its tenant_id either way. The key may be typed the way a
// person would (licensing canonicalizes it). An unknown key is license.ErrNotFound. The
// answer may come from the cache (see CacheLicenses): callers must not modify it.
//
// Looked up in any tenant, the license's tenant is named in the answer of the call ctx
// serves (licensecache.TenantHeader), so that the gateway learns whose license a request
// is about from every route that names a key, not only from verify-license.
func (c *Client) License(ctx context.Context, tenant, key string) (*licensingv1.License, error) {
	l, err := c.find(ctx, tenant, key)
	if err == nil && tenant == "" {
		licensecache.AnnounceTenant(ctx, l.GetKey(), l.GetTenantId())
	}
	return l, err
}

// find is License without the announcement.
func (c *Client) find(ctx context.Context, tenant, key string) (*licensingv1.License, error) {
	switch {
	case c.licenses == nil && tenant == "":
		return c.batchedLicense(ctx, key)
	case c.licenses == nil:
		return c.license(ctx, tenant, key)
	}
	// Keys are unique across tenants: one entry, looked up in any tenant, serves all.
	l, err := c.licenses.Get(license.CanonicalKey(key), func() (*licensingv1.License, error) {
		return c.batchedLicense(ctx, key)
	})
	if err != nil {
		return nil, err
	}
	if tenant != "" && l.GetTenantId() != tenant {
		return nil, license.ErrNotFound
	}
	return l, nil
}

func (c *Client) license(ctx context.Context, tenant, key string) (*licensingv1.License, error) {
	resp, err := grpcx.Call(ctx, c.peer, tenant, func(ctx context.Context, o ...grpc.CallOption) (*licensingv1.GetLicenseResponse, error) {
		return c.rpc.GetLicense(ctx, &licensingv1.GetLicenseRequest{Key: key}, o...)
	}, codes.NotFound)
	switch {
	case apierr.Is(err, codes.NotFound), err == nil && resp.GetLicense() == nil:
		return nil, license.ErrNotFound
	case err != nil:
		return nil, err
	}
	return resp.GetLicense(), nil
}

// batchedLicense is license in any tenant, asked together with the other misses that
// arrive while a batch is out (GetLicenses); from a licensing without that call, alone.
// The caller keeps its own deadline and cancellation.
func (c *Client) batchedLicense(ctx context.Context, key string) (*licensingv1.License, error) {
	answer, err := c.misses.Do(ctx, key)
	switch {
	case apierr.Is(err, codes.Unimplemented):
		return c.license(ctx, "", key)
	case err != nil:
		// A caller's own deadline or cancellation reads as its call alone would.
		return nil, c.peer.Downstream(err)
	case answer.GetLicense() == nil:
		return nil, license.ErrNotFound
	}
	return answer.GetLicense(), nil
}

// ClaimProduct binds productID to tenant (the claim issue-license makes too); a product
// owned by another tenant is 403 "product_id is owned by a different tenant", a blank
// product_id licensing's 400 "product_id is required".
func (c *Client) ClaimProduct(ctx context.Context, tenant, productID string) error {
	_, err := grpcx.Call(ctx, c.peer, tenant, func(ctx context.Context, o ...grpc.CallOption) (*licensingv1.ClaimProductResponse, error) {
		return c.rpc.ClaimProduct(ctx, &licensingv1.ClaimProductRequest{ProductId: productID}, o...)
	}, productRefusals...)
	return err
}

// ProductOwned is ClaimProduct's answer without the claim, for reads and for requests
// that may yet be refused: true when tenant owns productID, false when no tenant does yet
// (it stays free), and ClaimProduct's refusals otherwise.
func (c *Client) ProductOwned(ctx context.Context, tenant, productID string) (bool, error) {
	resp, err := grpcx.Call(ctx, c.peer, tenant, func(ctx context.Context, o ...grpc.CallOption) (*licensingv1.CheckProductOwnerResponse, error) {
		return c.rpc.CheckProductOwner(ctx, &licensingv1.CheckProductOwnerRequest{ProductId: productID}, o...)
	}, productRefusals...)
	if err != nil {
		return false, err
	}
	return resp.GetOwned(), nil
}

// productRefusals are the answers licensing gives about a product on purpose: another
// tenant's product (PermissionDenied) and a blank product_id (InvalidArgument). They keep
// their message; anything else is the 503.
var productRefusals = []codes.Code{codes.PermissionDenied, codes.InvalidArgument}

// ResolvePortalToken returns the tenant and key of an end-user portal token (addendum
// §9), checked live: an unknown token, a revoked or deleted license or a switched-off
// portal is NotFound "Not found".
func (c *Client) ResolvePortalToken(ctx context.Context, token string) (tenant, key string, err error) {
	resp, err := grpcx.Call(ctx, c.peer, "", func(ctx context.Context, o ...grpc.CallOption) (*licensingv1.ResolvePortalTokenResponse, error) {
		return c.portal.ResolvePortalToken(ctx, &licensingv1.ResolvePortalTokenRequest{Token: token}, o...)
	}, codes.NotFound)
	if err != nil {
		return "", "", err
	}
	return resp.GetTenantId(), resp.GetKey(), nil
}

// PortalLink is the license's end-user portal link (PUBLIC_BASE_URL/portal/{token}) for
// the buyer email, or "" when the tenant switched the portal off.
func (c *Client) PortalLink(ctx context.Context, tenant, key string) (string, error) {
	resp, err := grpcx.Call(ctx, c.peer, tenant, func(ctx context.Context, o ...grpc.CallOption) (*licensingv1.GetPortalLinkInternalResponse, error) {
		return c.portal.GetPortalLinkInternal(ctx, &licensingv1.GetPortalLinkInternalRequest{Key: key}, o...)
	}, codes.NotFound)
	if err != nil {
		return "", err
	}
	return resp.GetLink().GetUrl(), nil
}

// IssueLicense issues a license for tenant (storefront fulfillment, which holds no
// tenant API key) through LicensingInternalService.IssueLicenseForTenant: issue-license's
// validation, subscription and quota checks, product claim and Idempotency-Key (idemKey,
// sent as the idempotency-key metadata). Licensing's refusals come back with its message:
// 400 invalid input, 403 quota / subscription / ownership, 409 key reused with another
// request; anything else is the 503.
func (c *Client) IssueLicense(ctx context.Context, tenant, idemKey string, req *licensingv1.IssueLicenseRequest) (string, error) {
	ctx = metadata.AppendToOutgoingContext(ctx, idempotency.Header, idemKey)
	resp, err := grpcx.Call(ctx, c.peer, tenant, func(ctx context.Context, o ...grpc.CallOption) (*licensingv1.IssueLicenseForTenantResponse, error) {
		return c.rpc.IssueLicenseForTenant(ctx, &licensingv1.IssueLicenseForTenantRequest{License: req}, o...)
	}, codes.InvalidArgument, codes.PermissionDenied, codes.AlreadyExists)
	if err != nil {
		return "", err
	}
	return resp.GetKey(), nil
}

// SetRevoked revokes (true) or reactivates (false) a license of tenant (storefront
// refunds and disputes). Licensing's refusals come back with its message: 409 already in
// that state, 403 quota on reactivation, 400 an expired license; anything else is the 503.
func (c *Client) SetRevoked(ctx context.Context, tenant, key string, revoked bool) error {
	_, err := grpcx.Call(ctx, c.peer, tenant, func(ctx context.Context, o ...grpc.CallOption) (*licensingv1.RevokeLicenseForTenantResponse, error) {
		return c.rpc.RevokeLicenseForTenant(ctx, &licensingv1.RevokeLicenseForTenantRequest{
			Revoke: &licensingv1.RevokeLicenseRequest{Key: key, Revoked: &revoked}}, o...)
	}, codes.NotFound, codes.AlreadyExists, codes.PermissionDenied, codes.InvalidArgument, codes.FailedPrecondition)
	return err
}

// SetExpiry sets a license's expires_at (storefront: a subscription's paid period).
func (c *Client) SetExpiry(ctx context.Context, tenant, key string, expiresAt time.Time) error {
	_, err := grpcx.Call(ctx, c.peer, tenant, func(ctx context.Context, o ...grpc.CallOption) (*licensingv1.UpdateLicenseTermsForTenantResponse, error) {
		return c.rpc.UpdateLicenseTermsForTenant(ctx, &licensingv1.UpdateLicenseTermsForTenantRequest{
			Terms: &licensingv1.UpdateLicenseTermsRequest{Key: key, ExpiresAt: structpb.NewStringValue(expiresAt.UTC().Format(time.RFC3339))}}, o...)
	}, codes.NotFound, codes.InvalidArgument)
	return err
}

// DeletedKeys lists the tenant's licenses deleted lately (license.EventRetention), whose
// seats activations may not have purged yet.
func (c *Client) DeletedKeys(ctx context.Context, tenant string) ([]string, error) {
	resp, err := grpcx.Call(ctx, c.peer, tenant, func(ctx context.Context, o ...grpc.CallOption) (*licensingv1.ListDeletedLicensesResponse, error) {
		return c.rpc.ListDeletedLicenses(ctx, &licensingv1.ListDeletedLicensesRequest{}, o...)
	})
	if err != nil {
		return nil, err
	}
	return resp.GetKeys(), nil
}

// CountActive is the tenant's number of active licenses (its quota usage).
func (c *Client) CountActive(ctx context.Context, tenant string) (int, error) {
	resp, err := grpcx.Call(ctx, c.peer, tenant, func(ctx context.Context, o ...grpc.CallOption) (*licensingv1.CountActiveLicensesResponse, error) {
		return c.rpc.CountActiveLicenses(ctx, &licensingv1.CountActiveLicensesRequest{}, o...)
	})
	if err != nil {
		return 0, err
	}
	return int(resp.GetActive()), nil
}

// Keyring is the installation's signing material. It is fetched once and kept: it
// changes only when the operator replaces it or promotes its next key (docs/licensing.md,
// Rotating); a caller that meets a value sealed under a newer keyring meanwhile asks
// RefreshKeyring, and one about to sign asks CurrentKeyring.
func (c *Client) Keyring(ctx context.Context) (*signing.Keyring, error) {
	if k := c.keyring.Load(); k != nil {
		return k, nil
	}
	c.fetch.Lock()
	defer c.fetch.Unlock()
	if k := c.keyring.Load(); k != nil {
		return k, nil
	}
	return c.fetchKeyring(ctx)
}

// RefreshKeyring fetches the keyring again and keeps it in place of the one kept: for a
// caller that could not open a value with that one, which may be older than licensing's
// (licensing restarted on a replaced keyring after this process fetched it).
func (c *Client) RefreshKeyring(ctx context.Context) (*signing.Keyring, error) {
	c.fetch.Lock()
	defer c.fetch.Unlock()
	return c.fetchKeyring(ctx)
}

// CurrentKeyring is Keyring checked against the RSA key licensing signs with now, the one
// GET /v1/public-key serves: when they differ (licensing restarted on a promoted next key
// or a replaced keyring after this process kept its keyring), the keyring is fetched
// again and kept. A service that signs with it (releases' manifests) thus signs with the
// key /v1/public-key advertises, and follows a rotation within KeyCheckInterval without
// a restart. One caller a KeyCheckInterval asks; the others meanwhile sign with the kept
// keyring, as does every caller while licensing does not answer, as before this check
// existed.
func (c *Client) CurrentKeyring(ctx context.Context) (*signing.Keyring, error) {
	kept, err := c.Keyring(ctx)
	if err != nil {
		return nil, err
	}
	last, now := c.keyChecked.Load(), c.now().UnixNano()
	if now-last < int64(KeyCheckInterval) || !c.keyChecked.CompareAndSwap(last, now) {
		return kept, nil // checked within the interval, or another caller checks now
	}
	resp, err := grpcx.Call(ctx, c.peer, "", func(ctx context.Context, o ...grpc.CallOption) (*licensingv1.GetPublicKeyResponse, error) {
		return c.public.GetPublicKey(ctx, &licensingv1.GetPublicKeyRequest{}, o...)
	})
	if err != nil || resp.GetPublicKey() == kept.PublicKeyPEM() {
		return kept, nil
	}
	c.fetch.Lock()
	defer c.fetch.Unlock()
	if k := c.keyring.Load(); k != nil && k.PublicKeyPEM() == resp.GetPublicKey() {
		return k, nil // a refresh meanwhile (RefreshKeyring) already fetched it
	}
	k, err := c.fetchKeyring(ctx)
	if err != nil {
		// Not kept: the next caller asks again rather than signing a second on with a key
		// licensing no longer serves.
		c.keyChecked.Store(last)
		return nil, err
	}
	return k, nil
}

// fetchKeyring asks licensing for the keyring and keeps it; the caller holds c.fetch.
func (c *Client) fetchKeyring(ctx context.Context) (*signing.Keyring, error) {
	resp, err := grpcx.Call(ctx, c.peer, "", func(ctx context.Context, o ...grpc.CallOption) (*licensingv1.GetSigningKeysResponse, error) {
		return c.rpc.GetSigningKeys(ctx, &licensingv1.GetSigningKeysRequest{}, o...)
	})
	if err != nil {
		return nil, err
	}
	k, err := signing.ParseKeyring(resp.GetKeyring())
	if err != nil {
		return nil, err
	}
	c.keyring.Store(k)
	return k, nil
}

// Prefetch fetches the keyring in the background until it has it or ctx ends, so the
// first requests after a start do not wait for it; licensing may start later than the
// caller.
func (c *Client) Prefetch(ctx context.Context, log *slog.Logger) {
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
		k, err := c.Keyring(ctx)
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

// UpdateClass is license.UpdateClass of a license licensing returned: what the services
// name with an answer that found it usable, for the gateway's check-update answers.
func UpdateClass(l *licensingv1.License) string {
	return license.UpdateClass(l.GetTenantId(), l.GetProductId())
}

// Usable applies license.Usable to a license licensing returned: nil, or
// license.ErrNotActive / license.ErrExpired with api.md's messages.
func Usable(l *licensingv1.License, now time.Time) error {
	var expires *time.Time
	if l.GetExpiresAt() != nil {
		t := l.GetExpiresAt().AsTime()
		expires = &t
	}
	return license.Usable(l.GetStatus(), expires, now)
}
