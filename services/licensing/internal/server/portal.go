package server

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/auth"
	"github.com/keyhouse/keyhouse/pkg/signing"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	"github.com/keyhouse/keyhouse/services/licensing/internal/store"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Portal implements LicensingPortalService: the end-user portal's tokens (addendum §9).
type Portal struct {
	licensingv1.UnimplementedLicensingPortalServiceServer
	store   *store.Store
	keyring *signing.Keyring
	// baseURL is PUBLIC_BASE_URL without a trailing slash.
	baseURL string
}

// NewPortal returns the portal service.
func NewPortal(s *store.Store, keyring *signing.Keyring, publicBaseURL string) *Portal {
	return &Portal{store: s, keyring: keyring, baseURL: publicBaseURL}
}

// RegisterPortal adds the portal service to g.
func RegisterPortal(g *grpc.Server, p *Portal) {
	licensingv1.RegisterLicensingPortalServiceServer(g, p)
}

// errPortalNotFound is every refusal of a portal token: unknown, revoked, portal off.
var errPortalNotFound = apierr.NotFound("Not found")

// portalTokenContext separates the token's HMAC input from every signed export (those
// payloads are JSON objects and start with "{").
const portalTokenContext = "keyhouse-portal-v1\x00"

// token derives a license's portal token: 256 bits, URL-safe, reproducible from the
// installation's HMAC secret and the stored nonce, so only its hash needs storing.
func (p *Portal) token(tenant, key string) func(nonce []byte) string {
	return func(nonce []byte) string {
		sig := p.keyring.SignHMAC([]byte(portalTokenContext + tenant + "\x00" + key + "\x00" + hex.EncodeToString(nonce)))
		raw, _ := hex.DecodeString(sig)
		return base64.RawURLEncoding.EncodeToString(raw)
	}
}

func (p *Portal) link(ctx context.Context, tenant, rawKey string, reset bool) (*licensingv1.PortalLink, error) {
	key := canonicalKey(rawKey)
	enabled, err := p.store.PortalEnabled(ctx, tenant)
	if err != nil {
		return nil, err
	}
	derive := p.token(tenant, key)
	nonce, err := p.store.PortalLink(ctx, tenant, key, reset, derive)
	if errors.Is(err, store.ErrNotFound) {
		return nil, errNotFound
	}
	if err != nil {
		return nil, err
	}
	resp := &licensingv1.PortalLink{Key: key, Enabled: enabled}
	if enabled {
		resp.Url = p.baseURL + "/portal/" + derive(nonce)
	}
	return resp, nil
}

// callersLink is link for the tenant the call is authenticated as.
func (p *Portal) callersLink(ctx context.Context, key string, reset bool) (*licensingv1.PortalLink, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	return p.link(ctx, tenant, key, reset)
}

// GetPortalLink returns the license's link (creating it on first use).
func (p *Portal) GetPortalLink(ctx context.Context, req *licensingv1.GetPortalLinkRequest) (*licensingv1.GetPortalLinkResponse, error) {
	link, err := p.callersLink(ctx, req.GetKey(), false)
	if err != nil {
		return nil, err
	}
	return &licensingv1.GetPortalLinkResponse{Link: link}, nil
}

// GetPortalLinkInternal is GetPortalLink for service-to-service callers (storefront's
// buyer email), the tenant in x-keyhouse-tenant metadata.
func (p *Portal) GetPortalLinkInternal(ctx context.Context, req *licensingv1.GetPortalLinkInternalRequest) (*licensingv1.GetPortalLinkInternalResponse, error) {
	link, err := p.callersLink(ctx, req.GetKey(), false)
	if err != nil {
		return nil, err
	}
	return &licensingv1.GetPortalLinkInternalResponse{Link: link}, nil
}

// ResetPortalLink retires the current link and makes a new one.
func (p *Portal) ResetPortalLink(ctx context.Context, req *licensingv1.ResetPortalLinkRequest) (*licensingv1.ResetPortalLinkResponse, error) {
	link, err := p.callersLink(ctx, req.GetKey(), true)
	if err != nil {
		return nil, err
	}
	return &licensingv1.ResetPortalLinkResponse{Link: link}, nil
}

// GetPortalSettings reports the tenant's portal switch.
func (p *Portal) GetPortalSettings(ctx context.Context, _ *licensingv1.GetPortalSettingsRequest) (*licensingv1.GetPortalSettingsResponse, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	enabled, err := p.store.PortalEnabled(ctx, tenant)
	if err != nil {
		return nil, err
	}
	return &licensingv1.GetPortalSettingsResponse{Enabled: enabled}, nil
}

// SetPortalSettings sets the tenant's portal switch; off makes every link answer 404.
func (p *Portal) SetPortalSettings(ctx context.Context, req *licensingv1.SetPortalSettingsRequest) (*licensingv1.SetPortalSettingsResponse, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	if err := p.store.SetPortalEnabled(ctx, tenant, req.GetEnabled()); err != nil {
		return nil, err
	}
	return &licensingv1.SetPortalSettingsResponse{Enabled: req.GetEnabled()}, nil
}

// resolve checks a portal token: a known link, a license that is not revoked, a tenant
// with the portal on. An expired license is still shown (its holder should see that).
func (p *Portal) resolve(ctx context.Context, token string) (*store.License, error) {
	if len(token) < 16 || len(token) > 128 {
		return nil, errPortalNotFound
	}
	l, enabled, err := p.store.LicenseByPortalToken(ctx, token)
	if errors.Is(err, store.ErrNotFound) {
		return nil, errPortalNotFound
	}
	if err != nil {
		return nil, err
	}
	if !enabled || l.Status != "active" {
		return nil, errPortalNotFound
	}
	return l, nil
}

// GetPortalLicense is the portal page's license; the token is the credential.
func (p *Portal) GetPortalLicense(ctx context.Context, req *licensingv1.GetPortalLicenseRequest) (*licensingv1.GetPortalLicenseResponse, error) {
	l, err := p.resolve(ctx, req.GetToken())
	if err != nil {
		return nil, err
	}
	return &licensingv1.GetPortalLicenseResponse{
		Key: l.Key, Tier: l.Tier, ProductId: l.ProductID, IssuedAt: timestamppb.New(l.IssuedAt),
		ExpiresAt: timestampOrNil(l.ExpiresAt), Status: l.Status, Limits: limitsStruct(l.Limits),
		MaxActivations: capOrNil(l.MaxActivations),
	}, nil
}

// ResolvePortalToken tells activations whose seats a portal token may see.
func (p *Portal) ResolvePortalToken(ctx context.Context, req *licensingv1.ResolvePortalTokenRequest) (*licensingv1.ResolvePortalTokenResponse, error) {
	l, err := p.resolve(ctx, req.GetToken())
	if err != nil {
		return nil, err
	}
	return &licensingv1.ResolvePortalTokenResponse{TenantId: l.TenantID, Key: l.Key}, nil
}
