package server

import (
	"context"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/auth"
	"github.com/keyhouse/keyhouse/pkg/idempotency"
	"github.com/keyhouse/keyhouse/pkg/input"
	accountsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/accounts/v1"
	"github.com/keyhouse/keyhouse/services/billing/internal/store"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// APIKeys implements ApiKeysService: a tenant's extra API keys, in both modes (self-hosted
// under the implicit tenant, next to the admin key).
type APIKeys struct {
	accountsv1.UnimplementedApiKeysServiceServer
	store *store.Store
	keys  idempotency.Keys
	now   func() time.Time
}

// NewAPIKeys returns the API keys service; keys (the installation keyring, which licensing
// holds) seals the answers an Idempotency-Key replays.
func NewAPIKeys(s *store.Store, keys idempotency.Keys) *APIKeys {
	return &APIKeys{store: s, keys: keys, now: time.Now}
}

// CreateApiKey stores a key and shows it, once: under an Idempotency-Key (addendum §8) a
// retry of the same request shows that first answer again, key included, and creates
// nothing.
func (a *APIKeys) CreateApiKey(ctx context.Context, req *accountsv1.CreateApiKeyRequest) (*accountsv1.CreateApiKeyResponse, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	idemKey, err := idempotency.Key(ctx)
	if err != nil {
		return nil, err
	}
	name := strings.TrimSpace(req.GetName())
	switch {
	case name == "":
		return nil, apierr.Invalid("name is required")
	case utf8.RuneCountInString(name) > 200:
		return nil, apierr.Invalid("name must be at most 200 characters")
	}
	scope := req.GetScope()
	if scope != store.ScopeFull && scope != store.ScopeRead {
		// The addendum's text, byte for byte: its values quoted, unlike input.NotOneOf's.
		return nil, apierr.Invalid(`scope must be "full" or "read"`)
	}
	expires, err := a.expiry(req.GetExpiresAt())
	if err != nil {
		return nil, err
	}
	idem := store.Idempotency{Keys: a.keys, Key: idemKey, RequestHash: idempotency.RequestHash("CreateApiKey", req)}
	raw, err := a.store.CreateAPIKey(ctx, idem, tenant, name, scope, expires, func(k store.APIKey, key string) ([]byte, error) {
		v := apiKeyMessage(k)
		return proto.Marshal(&accountsv1.CreateApiKeyResponse{
			Id: v.Id, Name: v.Name, Prefix: v.Prefix, Scope: v.Scope,
			CreatedAt: v.CreatedAt, LastUsedAt: v.LastUsedAt, ExpiresAt: v.ExpiresAt, ApiKey: key,
		})
	})
	if err != nil {
		return nil, err
	}
	resp := &accountsv1.CreateApiKeyResponse{}
	return resp, proto.Unmarshal(raw, resp)
}

// ListApiKeys lists the tenant's extra keys, never the keys themselves.
func (a *APIKeys) ListApiKeys(ctx context.Context, _ *accountsv1.ListApiKeysRequest) (*accountsv1.ListApiKeysResponse, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	keys, err := a.store.ListAPIKeys(ctx, tenant)
	if err != nil {
		return nil, err
	}
	resp := &accountsv1.ListApiKeysResponse{ApiKeys: make([]*accountsv1.ApiKey, 0, len(keys))}
	for _, k := range keys {
		resp.ApiKeys = append(resp.ApiKeys, apiKeyMessage(k))
	}
	return resp, nil
}

// DeleteApiKey deletes one of the tenant's extra keys; it stops working at once.
func (a *APIKeys) DeleteApiKey(ctx context.Context, req *accountsv1.DeleteApiKeyRequest) (*accountsv1.DeleteApiKeyResponse, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	if err := a.store.DeleteAPIKey(ctx, tenant, req.GetId()); err != nil {
		return nil, err
	}
	return &accountsv1.DeleteApiKeyResponse{Id: req.GetId(), Deleted: true}, nil
}

// expiry reads expires_at: absent or null (no expiry), or an RFC 3339 time in the future.
func (a *APIKeys) expiry(v *structpb.Value) (*time.Time, error) {
	t, err := input.OptionalTime("expires_at", v)
	if err != nil || t == nil {
		return nil, err
	}
	if !t.After(a.now()) {
		return nil, apierr.Invalid("expires_at must be in the future")
	}
	return t, nil
}

func apiKeyMessage(k store.APIKey) *accountsv1.ApiKey {
	return &accountsv1.ApiKey{
		Id: k.ID, Name: k.Name, Prefix: k.Prefix, Scope: k.Scope,
		CreatedAt: timestamppb.New(k.CreatedAt), LastUsedAt: optionalTime(k.LastUsedAt), ExpiresAt: optionalTime(k.ExpiresAt),
	}
}

func optionalTime(t *time.Time) *timestamppb.Timestamp {
	if t == nil {
		return nil
	}
	return timestamppb.New(*t)
}
