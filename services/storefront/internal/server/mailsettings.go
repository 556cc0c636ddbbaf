package server

import (
	"context"
	"strings"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/auth"
	"github.com/keyhouse/keyhouse/pkg/mail"
	storefrontv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/storefront/v1"
	"github.com/keyhouse/keyhouse/services/storefront/internal/store"
	"google.golang.org/grpc"
)

// GetMailSettings returns the tenant's buyer-email settings.
func (s *Server) GetMailSettings(ctx context.Context, _ *storefrontv1.GetMailSettingsRequest) (*storefrontv1.GetMailSettingsResponse, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	m, err := s.store.MailSettings(ctx, tenant)
	if err != nil {
		return nil, err
	}
	return &storefrontv1.GetMailSettingsResponse{Settings: mailSettingsPB(m)}, nil
}

// UpdateMailSettings validates and replaces the tenant's buyer-email settings. The names
// go into a header and a subject, so a line break (header injection) or any other
// control character is refused, as is a reply-to that is not one plain address.
func (s *Server) UpdateMailSettings(ctx context.Context, req *storefrontv1.UpdateMailSettingsRequest) (*storefrontv1.UpdateMailSettingsResponse, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	m := store.MailSettings{
		SenderName:  strings.TrimSpace(req.GetSenderName()),
		ReplyTo:     strings.TrimSpace(req.GetReplyTo()),
		ProductName: strings.TrimSpace(req.GetProductName()),
	}
	for _, f := range []struct{ name, value string }{{"sender_name", m.SenderName}, {"product_name", m.ProductName}} {
		if f.value != "" && !mail.ValidDisplayName(f.value) {
			return nil, apierr.Invalid("%s must be at most %d characters with no line break or other control character", f.name, mail.MaxDisplayNameLen)
		}
	}
	if m.ReplyTo != "" && !mail.ValidAddress(m.ReplyTo) {
		return nil, apierr.Invalid("reply_to must be one email address, like support@example.com")
	}
	if err := s.store.SaveMailSettings(ctx, tenant, m); err != nil {
		return nil, err
	}
	return &storefrontv1.UpdateMailSettingsResponse{Settings: mailSettingsPB(m)}, nil
}

func mailSettingsPB(m store.MailSettings) *storefrontv1.MailSettings {
	return &storefrontv1.MailSettings{SenderName: m.SenderName, ReplyTo: m.ReplyTo, ProductName: m.ProductName}
}

// PortalTokens resolves an end-user portal token to its tenant and license, asking
// licensing on every call (licensingclient.Client): NotFound for every token the portal
// refuses.
type PortalTokens interface {
	ResolvePortalToken(ctx context.Context, token string) (tenant, key string, err error)
}

// Portal implements StorefrontPortalService: the product's name on the tenant's portal
// pages, the one its buyer emails use.
type Portal struct {
	storefrontv1.UnimplementedStorefrontPortalServiceServer
	store  *store.Store
	tokens PortalTokens
}

// NewPortal returns the portal service.
func NewPortal(st *store.Store, tokens PortalTokens) *Portal {
	return &Portal{store: st, tokens: tokens}
}

// RegisterPortal adds the portal service to g.
func RegisterPortal(g *grpc.Server, p *Portal) {
	storefrontv1.RegisterStorefrontPortalServiceServer(g, p)
}

// GetPortalProductName answers the mail settings' product_name of the token's tenant.
func (p *Portal) GetPortalProductName(ctx context.Context, req *storefrontv1.GetPortalProductNameRequest) (*storefrontv1.GetPortalProductNameResponse, error) {
	tenant, _, err := p.tokens.ResolvePortalToken(ctx, req.GetToken())
	if err != nil {
		return nil, err
	}
	m, err := p.store.MailSettings(ctx, tenant)
	if err != nil {
		return nil, err
	}
	return &storefrontv1.GetPortalProductNameResponse{ProductName: m.ProductName}, nil
}
