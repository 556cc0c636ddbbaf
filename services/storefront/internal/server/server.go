// Package server holds the storefront's gRPC handlers: webhooks, mappings, deliveries,
// and the provider callback that records an event and queues it for fulfillment.
package server

import (
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"strings"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/auth"
	"github.com/keyhouse/keyhouse/pkg/idempotency"
	"github.com/keyhouse/keyhouse/pkg/input"
	"github.com/keyhouse/keyhouse/pkg/signing"
	storefrontv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/storefront/v1"
	"github.com/keyhouse/keyhouse/services/storefront/internal/store"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// ProviderStripe is the one implemented provider (api.md Events rule 7).
const ProviderStripe = "stripe"

// CallbackPath is the callback route; the webhook id follows it.
const CallbackPath = "/v1/webhooks/storefront/"

// Licensing is what the handlers ask the licensing service.
type Licensing interface {
	ClaimProduct(ctx context.Context, tenant, productID string) error
	ProductOwned(ctx context.Context, tenant, productID string) (bool, error)
	Keyring(ctx context.Context) (*signing.Keyring, error)
}

// Config is the server's configuration.
type Config struct {
	// PublicBaseURL prefixes callback URLs (no trailing slash).
	PublicBaseURL string
}

// Server implements StorefrontService.
type Server struct {
	storefrontv1.UnimplementedStorefrontServiceServer
	cfg       Config
	store     *store.Store
	licensing Licensing
	// notify wakes the outbox relay after a commit that enqueued.
	notify func()
	log    *slog.Logger
}

// New returns a Server.
func New(cfg Config, st *store.Store, licensing Licensing, notify func(), log *slog.Logger) *Server {
	if notify == nil {
		notify = func() {}
	}
	return &Server{cfg: cfg, store: st, licensing: licensing, notify: notify, log: log}
}

// Register adds the service to g.
func Register(g *grpc.Server, s *Server) { storefrontv1.RegisterStorefrontServiceServer(g, s) }

var (
	errWebhookNotFound  = apierr.NotFound("Webhook not found")
	errWebhookNotActive = apierr.Invalid("Webhook is not active")
	errInvalidSignature = apierr.Invalid("Invalid signature")
)

// webhookIDAlphabet is Crockford base32 in lower case: ids read well in a URL.
const webhookIDAlphabet = "0123456789abcdefghjkmnpqrstvwxyz"

// newWebhookID returns "wh_" and 26 random characters (130 bits). The id routes the
// callback; it is not a secret (the signature is what authenticates).
func newWebhookID() string {
	var b [26]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	for i, c := range b {
		b[i] = webhookIDAlphabet[c%32]
	}
	return "wh_" + string(b[:])
}

// validWebhookID is a cheap filter before any query: anything else is not found.
func validWebhookID(id string) bool {
	if len(id) != 29 || !strings.HasPrefix(id, "wh_") {
		return false
	}
	for _, c := range id[3:] {
		if !strings.ContainsRune(webhookIDAlphabet, c) {
			return false
		}
	}
	return true
}

func (s *Server) webhookPB(w *store.Webhook) *storefrontv1.Webhook {
	return &storefrontv1.Webhook{
		WebhookId:   w.ID,
		Provider:    w.Provider,
		State:       w.State,
		CallbackUrl: s.cfg.PublicBaseURL + CallbackPath + w.ID,
		CreatedAt:   timestamppb.New(w.CreatedAt),
	}
}

// ConnectWebhook creates a pending webhook. Under an Idempotency-Key (addendum §8) a
// retry of the same request answers the first webhook and creates nothing.
func (s *Server) ConnectWebhook(ctx context.Context, req *storefrontv1.ConnectWebhookRequest) (*storefrontv1.ConnectWebhookResponse, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	idemKey, err := idempotency.Key(ctx)
	if err != nil {
		return nil, err
	}
	switch strings.TrimSpace(req.GetProvider()) {
	case "":
		return nil, apierr.Invalid("provider is required")
	case ProviderStripe:
	default:
		return nil, input.NotOneOf("provider", ProviderStripe)
	}
	raw, err := s.store.CreateWebhook(ctx, idemKey, idempotency.RequestHash("ConnectWebhook", req), tenant, newWebhookID(), ProviderStripe,
		func(w *store.Webhook) ([]byte, error) {
			return proto.Marshal(&storefrontv1.ConnectWebhookResponse{Webhook: s.webhookPB(w)})
		})
	if errors.Is(err, store.ErrNotFound) {
		return nil, errActiveExists
	}
	if err != nil {
		return nil, err
	}
	resp := &storefrontv1.ConnectWebhookResponse{}
	return resp, proto.Unmarshal(raw, resp)
}

var errActiveExists = apierr.Conflict("An active webhook already exists for this provider; disable it first")

// ListWebhooks lists the tenant's webhooks.
func (s *Server) ListWebhooks(ctx context.Context, _ *storefrontv1.ListWebhooksRequest) (*storefrontv1.ListWebhooksResponse, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	ws, err := s.store.Webhooks(ctx, tenant)
	if err != nil {
		return nil, err
	}
	out := &storefrontv1.ListWebhooksResponse{Webhooks: []*storefrontv1.Webhook{}}
	for _, w := range ws {
		out.Webhooks = append(out.Webhooks, s.webhookPB(w))
	}
	return out, nil
}

// maxSecretLen bounds a signing secret (Stripe's are about 40 characters).
const maxSecretLen = 200

// SaveWebhookSecret seals and stores the signing secret; the webhook becomes active.
func (s *Server) SaveWebhookSecret(ctx context.Context, req *storefrontv1.SaveWebhookSecretRequest) (*storefrontv1.SaveWebhookSecretResponse, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	if !validWebhookID(req.GetWebhookId()) {
		return nil, errWebhookNotFound
	}
	secret := strings.TrimSpace(req.GetSigningSecret())
	switch {
	case secret == "":
		return nil, apierr.Invalid("signing_secret is required")
	case !strings.HasPrefix(secret, "whsec_") || len(secret) < 10 || len(secret) > maxSecretLen ||
		strings.ContainsAny(secret, " \t\r\n\x00"):
		return nil, apierr.Invalid("signing_secret must be the endpoint's Stripe signing secret (whsec_…)")
	}
	k, err := s.licensing.Keyring(ctx)
	if err != nil {
		return nil, err
	}
	sealed, err := sealSecret(k, secret)
	if err != nil {
		return nil, err
	}
	w, err := s.store.SaveSecret(ctx, tenant, req.GetWebhookId(), sealed)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, errWebhookNotFound
	case errors.Is(err, store.ErrNotActive):
		return nil, apierr.Conflict("Webhook is disabled; connect a new one")
	case errors.Is(err, store.ErrConflict):
		return nil, errActiveExists
	case err != nil:
		return nil, err
	}
	return &storefrontv1.SaveWebhookSecretResponse{Webhook: s.webhookPB(w)}, nil
}

// DisableWebhook disables a webhook: its callback answers 404 from now on.
func (s *Server) DisableWebhook(ctx context.Context, req *storefrontv1.DisableWebhookRequest) (*storefrontv1.DisableWebhookResponse, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	if !validWebhookID(req.GetWebhookId()) {
		return nil, errWebhookNotFound
	}
	w, err := s.store.Disable(ctx, tenant, req.GetWebhookId())
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, errWebhookNotFound
	case errors.Is(err, store.ErrNotActive):
		return nil, apierr.Conflict("Webhook is already disabled")
	case err != nil:
		return nil, err
	}
	return &storefrontv1.DisableWebhookResponse{Webhook: s.webhookPB(w)}, nil
}
