// Package server holds the licensing service's gRPC handlers and the rules of the license
// lifecycle (api.md: License, License status, issue-license … verify-license-file-base64).
package server

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/license"
	"github.com/keyhouse/keyhouse/pkg/signing"
	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	"github.com/keyhouse/keyhouse/services/licensing/internal/store"
	"google.golang.org/grpc"
)

// Store is the SQL the handlers need (store.Store; a plain Go fake in unit tests).
type Store interface {
	// Get finds a license of tenant, or of any tenant when tenant is "" (store.ErrNotFound).
	Get(ctx context.Context, tenant, key string) (*store.License, error)
	// GetMany is Get in any tenant for several keys: the licenses found, by key.
	GetMany(ctx context.Context, keys []string) (map[string]*store.License, error)
	// GetLive is Get never served from a cache (verify-license-file's live check).
	GetLive(ctx context.Context, tenant, key string) (*store.License, error)
	InTx(ctx context.Context, fn func(store.Tx) error) error
	// Issue stores a new license and its event in one round trip (no quota, no key).
	Issue(ctx context.Context, l *store.License) error
	// Idempotent runs create once per tenant and Idempotency-Key (pkg/idempotency).
	Idempotent(ctx context.Context, tenant, idemKey string, requestHash []byte, create func(store.Tx) ([]byte, error)) ([]byte, bool, error)
	UpdateNotes(ctx context.Context, tenant, key, notes string) (*store.License, error)
	List(ctx context.Context, tenant string, f store.Filter) ([]*store.License, int, error)
	Counts(ctx context.Context, tenant string) (store.Counts, error)
	CountActive(ctx context.Context, tenant string) (int, error)
	// DeletedKeys lists the tenant's licenses deleted lately (store.DeletedKeys).
	DeletedKeys(ctx context.Context, tenant string) ([]string, error)
	// ClaimProduct binds a product to tenant (store.ErrProductOwned).
	ClaimProduct(ctx context.Context, tenant, productID string) error
	// ProductOwner is the tenant owning a product, "" for none; it claims nothing.
	ProductOwner(ctx context.Context, productID string) (string, error)
}

// Entitlements is the billing service (billingclient.Client).
type Entitlements interface {
	// ActivePlan is the hosted tenant's active-license quota (0: unlimited), or
	// billingclient.ErrSubscriptionInactive.
	ActivePlan(ctx context.Context, tenant string) (int, error)
	// TenantExists says whether the installation has the tenant (a deleted one: no).
	TenantExists(ctx context.Context, tenant string) (bool, error)
}

// Seats supplies seat counts and usage for the admin views (the activations service).
type Seats interface {
	Summaries(ctx context.Context, tenant string, keys []string) (map[string]*activationsv1.SeatSummary, error)
	// Stats leaves out the seats of the exclude keys (deleted licenses not yet purged).
	Stats(ctx context.Context, tenant string, recent int, exclude []string) (*activationsv1.GetActivationStatsResponse, error)
	// ImportUsage sets the starting usage of imported licenses; totals already there stay.
	ImportUsage(ctx context.Context, tenant string, usage []*activationsv1.ImportedUsage) error
}

// Config is what the handlers need besides their collaborators.
type Config struct {
	MultiTenant bool
	Keyring     *signing.Keyring
	// Log receives the lines of the items of a batch call (grpcx.ObserveCall); nil: none.
	Log *slog.Logger
}

// Server implements LicensingService and LicensingInternalService.
type Server struct {
	licensingv1.UnimplementedLicensingServiceServer
	licensingv1.UnimplementedLicensingInternalServiceServer
	cfg          Config
	store        Store
	entitlements Entitlements
	seats        Seats
	now          func() time.Time
}

// New returns a Server.
func New(cfg Config, s Store, e Entitlements, seats Seats) *Server {
	return &Server{cfg: cfg, store: s, entitlements: e, seats: seats, now: time.Now}
}

// Register adds both services to g.
func Register(g *grpc.Server, s *Server) {
	licensingv1.RegisterLicensingServiceServer(g, s)
	licensingv1.RegisterLicensingInternalServiceServer(g, s)
}

// Messages of api.md and the addendum, verbatim.
var (
	errNotFound          = license.ErrNotFound
	errQuota             = apierr.Forbidden("License issuance quota exceeded")
	errReservedProduct   = apierr.Invalid("product_id uses a reserved prefix")
	errProductRequired   = apierr.Invalid("product_id is required")
	errSelfLicenseExpiry = apierr.Invalid("expires_at is required for self-license credentials")
	errMissingKey        = apierr.Invalid("key is required")
	errNoTerms           = apierr.Invalid("No updatable fields provided (expires_at, max_activations, limits)")
)

// lookup finds a license: tenant "" in any tenant (public routes). The key is put in its
// issued form first, so a key typed by hand still matches.
func (s *Server) lookup(ctx context.Context, tenant, key string) (*store.License, error) {
	l, err := s.store.Get(ctx, tenant, canonicalKey(key))
	if errors.Is(err, store.ErrNotFound) {
		return nil, errNotFound
	}
	return l, err
}

// checkEntitlements refuses issuance or reactivation for a hosted tenant whose
// subscription is not active, and returns its license quota (0 = unlimited).
func (s *Server) checkEntitlements(ctx context.Context, tenant string) (int, error) {
	if !s.cfg.MultiTenant {
		return 0, nil
	}
	return s.entitlements.ActivePlan(ctx, tenant)
}

// holdsQuota tells whether an issuance under quota (the plan's active-license quota, 0:
// unlimited) must lock and count the tenant's active licenses first.
func holdsQuota(quota int) bool { return quota > 0 }

// holdQuota takes the tenant's quota lock and refuses when another active license would
// pass quota. Called inside the transaction that makes the license active.
func holdQuota(ctx context.Context, tx store.Tx, tenant string, quota int) error {
	if !holdsQuota(quota) {
		return nil
	}
	if err := tx.LockQuota(ctx, tenant); err != nil {
		return err
	}
	n, err := tx.CountActive(ctx, tenant)
	if err != nil {
		return err
	}
	if n >= quota {
		return errQuota
	}
	return nil
}

// mustClaim reads, claiming nothing, whether a write of tenant for productID must claim
// the product (hosted, and no tenant owns it yet); another tenant's product is
// license.ErrProductOwned. The claim itself is claimIn, in the transaction of the write.
func (s *Server) mustClaim(ctx context.Context, tenant, productID string) (bool, error) {
	if !s.cfg.MultiTenant {
		return false, nil
	}
	owned, err := s.ownedBy(ctx, tenant, productID)
	return !owned && err == nil, err
}

// ownedBy reads, claiming nothing, whether tenant owns productID: false when no tenant
// does yet, license.ErrProductOwned when another does.
func (s *Server) ownedBy(ctx context.Context, tenant, productID string) (bool, error) {
	owner, err := s.store.ProductOwner(ctx, productID)
	switch {
	case err != nil:
		return false, err
	case owner != "" && owner != tenant:
		return false, license.ErrProductOwned
	}
	return owner != "", nil
}

// claimIn claims productID for tenant inside tx, the transaction that writes the
// tenant's first license for it: license.ErrProductOwned when another tenant's claim
// committed first.
func claimIn(ctx context.Context, tx store.Tx, tenant, productID string) error {
	err := tx.ClaimProduct(ctx, tenant, productID)
	if errors.Is(err, store.ErrProductOwned) {
		return license.ErrProductOwned
	}
	return err
}

// seatSummaries fetches activations_count and usage for keys; the map may lack keys
// without seats or usage.
func (s *Server) seatSummaries(ctx context.Context, tenant string, keys []string) (map[string]*activationsv1.SeatSummary, error) {
	if len(keys) == 0 {
		return map[string]*activationsv1.SeatSummary{}, nil
	}
	return s.seats.Summaries(ctx, tenant, keys)
}
