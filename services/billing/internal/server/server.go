// Package server holds the billing service's gRPC handlers.
package server

import (
	"context"
	"log/slog"
	"net/mail"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/auth"
	"github.com/keyhouse/keyhouse/pkg/buildinfo"
	"github.com/keyhouse/keyhouse/pkg/idempotency"
	accountsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/accounts/v1"
	"github.com/keyhouse/keyhouse/services/billing/internal/plan"
	"github.com/keyhouse/keyhouse/services/billing/internal/store"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Server implements AccountsService.
type Server struct {
	accountsv1.UnimplementedAccountsServiceServer
	store       *store.Store
	keys        idempotency.Keys
	multiTenant bool
	// log takes the audit line of each tenant the operator creates.
	log *slog.Logger
}

// New returns a Server; keys (the installation keyring, which licensing holds) seals the
// answers an Idempotency-Key replays.
func New(s *store.Store, keys idempotency.Keys, multiTenant bool, log *slog.Logger) *Server {
	return &Server{store: s, keys: keys, multiTenant: multiTenant, log: log}
}

// Register adds the services to g.
func Register(g *grpc.Server, s *Server) {
	accountsv1.RegisterAccountsServiceServer(g, s)
}

// CreateTenant is the hosted operator route. Under an Idempotency-Key (addendum §8) a
// retry of the same request answers the first tenant, its API key included, and creates
// nothing.
func (s *Server) CreateTenant(ctx context.Context, req *accountsv1.CreateTenantRequest) (*accountsv1.CreateTenantResponse, error) {
	if !s.multiTenant {
		return nil, apierr.Invalid("Tenant management is only available for hosted deployments")
	}
	idemKey, err := idempotency.Key(ctx)
	if err != nil {
		return nil, err
	}
	name := strings.TrimSpace(req.GetName())
	email := strings.TrimSpace(req.GetEmail())
	if name == "" {
		return nil, apierr.Invalid("name is required")
	}
	if utf8.RuneCountInString(name) > 200 {
		return nil, apierr.Invalid("name must be at most 200 characters")
	}
	if email == "" {
		return nil, apierr.Invalid("email is required")
	}
	if addr, err := mail.ParseAddress(email); err != nil || addr.Address != email || len(email) > 320 {
		return nil, apierr.Invalid("email must be a valid email address")
	}
	idem := store.Idempotency{Keys: s.keys, Key: idemKey, RequestHash: idempotency.RequestHash("CreateTenant", req)}
	// created is the tenant this call made: a replay under an Idempotency-Key made none.
	var created string
	raw, err := s.store.CreateTenant(ctx, idem, name, email, func(t store.Tenant, key string) ([]byte, error) {
		created = t.ID
		return proto.Marshal(&accountsv1.CreateTenantResponse{TenantId: t.ID, Name: t.Name, Email: t.Email, ApiKey: key})
	})
	if err != nil {
		return nil, err
	}
	if created != "" {
		logOperatorAction(ctx, s.log, "create", created)
	}
	resp := &accountsv1.CreateTenantResponse{}
	return resp, proto.Unmarshal(raw, resp)
}

// RotateApiKey retires the caller's key at once and returns the new one, once.
func (s *Server) RotateApiKey(ctx context.Context, _ *accountsv1.RotateApiKeyRequest) (*accountsv1.RotateApiKeyResponse, error) {
	if !s.multiTenant {
		return nil, apierr.Invalid("API key rotation is only available for hosted accounts")
	}
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	old, _ := auth.Bearer(ctx)
	key, err := s.store.RotateAPIKey(ctx, tenant, old)
	if err != nil {
		return nil, err
	}
	return &accountsv1.RotateApiKeyResponse{ApiKey: key}, nil
}

// Authenticate resolves a tenant API key for the other services' auth interceptors.
func (s *Server) Authenticate(ctx context.Context, req *accountsv1.AuthenticateRequest) (*accountsv1.AuthenticateResponse, error) {
	// Self-hosted, console sessions and extra API keys are resolved here (the admin key is
	// checked by each interceptor itself; there are no tenants rows to match).
	if req.GetApiKey() == "" {
		return nil, apierr.Unauthorized
	}
	cred, err := s.store.ResolveAPIKey(ctx, req.GetApiKey())
	if err != nil {
		return nil, err
	}
	return &accountsv1.AuthenticateResponse{TenantId: cred.TenantID, ReadOnly: cred.ReadOnly}, nil
}

// GetEntitlements tells licensing (and releases) the caller's plan, read from the
// database on every call: a plan change is in force on every replica at once
// (docs/billing.md, "Quota").
func (s *Server) GetEntitlements(ctx context.Context, _ *accountsv1.GetEntitlementsRequest) (*accountsv1.GetEntitlementsResponse, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	if !s.multiTenant {
		return &accountsv1.GetEntitlementsResponse{SubscriptionActive: true}, nil
	}
	st, err := s.store.Plan(ctx, tenant, time.Now())
	if err != nil {
		return nil, err
	}
	name := st.Plan
	if name == "" {
		name = plan.Free
	}
	return &accountsv1.GetEntitlementsResponse{SubscriptionActive: st.Active(), LicenseLimit: int32(st.LicenseLimit()), Plan: name}, nil
}

// GetTenantContact tells an internal caller where to write to the tenant and what it is
// called: its email and name, hosted; nothing self-hosted (the single implicit tenant has
// none).
func (s *Server) GetTenantContact(ctx context.Context, _ *accountsv1.GetTenantContactRequest) (*accountsv1.GetTenantContactResponse, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	if !s.multiTenant {
		return &accountsv1.GetTenantContactResponse{}, nil
	}
	email, name, err := s.store.TenantContact(ctx, tenant)
	if err != nil {
		return nil, err
	}
	return &accountsv1.GetTenantContactResponse{Email: email, Name: name}, nil
}

// GetBuildInfo reports this build and the installation's watermark.
func (s *Server) GetBuildInfo(ctx context.Context, _ *accountsv1.GetBuildInfoRequest) (*accountsv1.GetBuildInfoResponse, error) {
	id, err := s.store.WatermarkID(ctx)
	if err != nil {
		return nil, err
	}
	return &accountsv1.GetBuildInfoResponse{WatermarkId: id, Fingerprint: buildinfo.Fingerprint(), Version: buildinfo.Version()}, nil
}
