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

// SenderSettings are a tenant's buyer-email settings as its emails go out
// (fulfill.Worker.SenderSettings: hosted, its name and account email where it set none).
type SenderSettings interface {
	SenderSettings(ctx context.Context, tenant string) (store.MailSettings, error)
}

// Portal implements StorefrontPortalService: the product's name on the tenant's portal
// pages, the one its buyer emails use, and whom the buyer email answers to.
type Portal struct {
	storefrontv1.UnimplementedStorefrontPortalServiceServer
	tokens  PortalTokens
	senders SenderSettings
	// replyTo is EMAIL_REPLY_TO: the address a buyer email answers to when the tenant's
	// settings name none (self-hosted; hosted, the tenant's own address comes first).
	replyTo string
}

// NewPortal returns the portal service.
func NewPortal(tokens PortalTokens, senders SenderSettings, replyTo string) *Portal {
	return &Portal{tokens: tokens, senders: senders, replyTo: replyTo}
}

// RegisterPortal adds the portal service to g.
func RegisterPortal(g *grpc.Server, p *Portal) {
	storefrontv1.RegisterStorefrontPortalServiceServer(g, p)
}

// GetPortalVendor answers the token's tenant's product name and the sender and reply-to
// of its buyer emails.
func (p *Portal) GetPortalVendor(ctx context.Context, req *storefrontv1.GetPortalVendorRequest) (*storefrontv1.GetPortalVendorResponse, error) {
	tenant, _, err := p.tokens.ResolvePortalToken(ctx, req.GetToken())
	if err != nil {
		return nil, err
	}
	m, err := p.senders.SenderSettings(ctx, tenant)
	if err != nil {
		return nil, err
	}
	replyTo := m.ReplyTo
	if replyTo == "" {
		replyTo = p.replyTo
	}
	return &storefrontv1.GetPortalVendorResponse{ProductName: m.ProductName, VendorName: m.SenderName, SupportEmail: replyTo}, nil
}
