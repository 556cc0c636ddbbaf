package server

import (
	"context"
	"crypto/ed25519"
	cryptorand "crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/auth"
	"github.com/keyhouse/keyhouse/pkg/idempotency"
	"github.com/keyhouse/keyhouse/pkg/input"
	"github.com/keyhouse/keyhouse/pkg/license"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
	"github.com/keyhouse/keyhouse/pkg/signing"
	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	"github.com/keyhouse/keyhouse/services/activations/internal/store"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// LeaseStore is the SQL of leases, policies and lease keys (store.Store).
type LeaseStore interface {
	PutPolicy(ctx context.Context, tenant string, p store.Policy) (store.Policy, error)
	Policies(ctx context.Context, tenant, productID string) ([]store.Policy, error)
	Policy(ctx context.Context, tenant, productID, tier string) (*store.Policy, error)
	DeletePolicy(ctx context.Context, tenant, productID, tier string) (bool, error)
	PolicyFor(ctx context.Context, tenant, productID, tier string) (*store.Policy, error)
	LongestLeaseTTL(ctx context.Context, tenant string) (time.Duration, error)
	LeaseBasis(ctx context.Context, tenant, key, productID, tier string, tokenHash []byte, instance string) (store.LeaseBasis, error)
	LeaseBases(ctx context.Context, asks []store.LeaseAsk) ([]store.LeaseBasis, error)
	LapsedWithin(ctx context.Context, tenant, key string, tokenHash []byte, within time.Duration) (bool, error)
	RenewLease(ctx context.Context, r store.LeaseRenewal) (bool, error)
	RenewLeases(ctx context.Context, rs []store.LeaseRenewal) ([]bool, error)
	ActiveLeaseKey(ctx context.Context, tenant string) (*store.LeaseKey, error)
	AddFirstLeaseKey(ctx context.Context, tenant string, k store.LeaseKey) (*store.LeaseKey, error)
	LeaseKeys(ctx context.Context, tenant string) ([]store.LeaseKey, error)
	RotateLeaseKey(ctx context.Context, idemKey string, requestHash []byte, tenant string, next store.LeaseKey, retireAfter time.Duration,
		answer func(retired *store.LeaseKey) ([]byte, error)) ([]byte, error)
	ReplaceLeaseKey(ctx context.Context, tenant, kid string, next store.LeaseKey, retireAfter time.Duration) (bool, error)
	SeatLeases(ctx context.Context, tenant, key string) ([]store.LeaseSeat, error)
}

// Products checks product ownership (licensingclient.Client).
type Products interface {
	// ClaimProduct binds a product no tenant owns yet to tenant: a write's claim.
	ClaimProduct(ctx context.Context, tenant, productID string) error
	// ProductOwned says whether tenant owns productID (false: no tenant does), claiming
	// nothing.
	ProductOwned(ctx context.Context, tenant, productID string) (bool, error)
}

// LeaseConfig is what the leases service needs besides its store.
type LeaseConfig struct {
	// Issuer is the iss claim (PUBLIC_BASE_URL).
	Issuer      string
	MultiTenant bool
	// MinLeaseTTL is the shortest lease_ttl a policy may set (addendum §12: 60 s; tests
	// lower it with LEASE_MIN_TTL to see leases lapse within a test's time).
	MinLeaseTTL time.Duration
	// Keyring seals and opens the lease keys' private halves (licensing's AES key).
	Keyring func(ctx context.Context) (*signing.Keyring, error)
	// RefreshKeyring fetches the keyring again (licensingclient.Client.RefreshKeyring):
	// asked when a lease key does not open under the one kept, which may only be older
	// than licensing's. Nil: the one kept is the only one.
	RefreshKeyring func(ctx context.Context) (*signing.Keyring, error)
	// Tenants says which tenant ids exist (billingclient.Client), so a public read of an
	// unknown tenant's JWKS makes no key; hosted only.
	Tenants Tenants
	// Log is where the items of a CreateLeaseBatch are logged, as calls of their own.
	Log *slog.Logger
}

// Tenants is the directory of hosted tenants (billingclient.Client.TenantExists).
type Tenants interface {
	TenantExists(ctx context.Context, tenant string) (bool, error)
}

// Policy bounds and built-in defaults (addendum §12).
const (
	maxLeaseTTL         = 90 * 24 * time.Hour
	defaultLeaseTTL     = 7 * 24 * time.Hour
	maxEntitlements     = 64
	maxComponents       = 16
	maxComponentValue   = 128
	maxNonce            = 128
	maxRetireAfter      = 100 * 24 * time.Hour
	lapseRemembered     = 24 * time.Hour
	leaseTokenType      = "keyhouse-lease+jwt"
	defaultPolicyTier   = "*"
	matchNone           = "none"
	maxLeaseAttempts    = 3
	retireAfterExtraDay = 24 * time.Hour
)

var (
	entitlementPattern   = regexp.MustCompile(`^[a-z0-9._:-]{1,64}$`)
	componentNamePattern = regexp.MustCompile(`^[a-z0-9_]{1,32}$`)
	fingerprintMatches   = []string{"none", "any", "most", "all"}

	// Addendum §12's messages, verbatim.
	errProductNotFound = apierr.NotFound("Product not found")
	errPolicyNotFound  = apierr.NotFound("Policy not found")
	errLeaseLapsed     = apierr.Forbidden("Seat lease has expired")
	errNeedComponents  = apierr.Invalid("components are required by this product's policy")
	errFingerprint     = apierr.Forbidden("Machine fingerprint does not match")
)

// Leases implements LeasesService.
type Leases struct {
	activationsv1.UnimplementedLeasesServiceServer
	store    LeaseStore
	licenses Licenses
	products Products
	cfg      LeaseConfig
	now      func() time.Time
	// private holds opened private keys (*leaseSigner) by kid, so a lease costs no
	// decryption.
	private sync.Map
}

// NewLeases returns the leases service.
func NewLeases(st LeaseStore, l Licenses, p Products, cfg LeaseConfig) *Leases {
	return &Leases{store: st, licenses: l, products: p, cfg: cfg, now: time.Now}
}

// RegisterLeases adds LeasesService to g.
func RegisterLeases(g *grpc.Server, l *Leases) { activationsv1.RegisterLeasesServiceServer(g, l) }

// effectivePolicy is the policy a license follows: p, or the built-in defaults.
func effectivePolicy(p *store.Policy) store.Policy {
	if p != nil {
		return *p
	}
	return store.Policy{Tier: defaultPolicyTier, LeaseTTL: defaultLeaseTTL, RenewAfter: defaultLeaseTTL / 2, FingerprintMatch: matchNone}
}

// productTenant is the caller's tenant once it may use the product's policies: the
// product is the caller's, or no tenant's yet. Another tenant's product is "not found".
// Only claim (a PUT whose policy is valid, the claim issue-license and register-release
// make) binds a product no tenant owns to the caller: a read, or a request refused later,
// leaves it free for whichever tenant writes first.
func (x *Leases) productTenant(ctx context.Context, productID string, claim bool) (string, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return "", err
	}
	if err := checkLicenseField("product_id", productID); err != nil {
		return "", err
	}
	if claim {
		err = x.products.ClaimProduct(ctx, tenant, productID)
	} else {
		_, err = x.products.ProductOwned(ctx, tenant, productID)
	}
	if apierr.Is(err, codes.PermissionDenied) {
		return "", errProductNotFound
	}
	if err != nil {
		return "", err
	}
	return tenant, nil
}

// checkPolicyPath checks the path of a policy's route (/v1/products/{product_id}/policies/
// {tier}) in its order: a product_id or tier of white space only is 400 "<name> is
// required", as licensing answers a blank tier or product_id; no license has such a tier.
func checkPolicyPath(productID, tier string) error {
	if err := checkLicenseField("product_id", productID); err != nil {
		return err
	}
	return checkLicenseField("tier", tier)
}

// maxLicenseFieldLen is licensing's cap on a license's product_id and tier (api.md's
// 200 characters): a policy's may be no longer, or it could never match a license.
const maxLicenseFieldLen = 200

// checkLicenseField is checkRequired for a policy's product_id or tier, under the cap a
// license's has.
func checkLicenseField(name, v string) error {
	if strings.TrimSpace(v) != "" && utf8.RuneCountInString(v) > maxLicenseFieldLen {
		return apierr.Invalid("%s must be at most %d characters", name, maxLicenseFieldLen)
	}
	return checkRequired(name, v)
}

// PutLeasePolicy sets the policy of a product's tier after checking every bound.
func (x *Leases) PutLeasePolicy(ctx context.Context, req *activationsv1.PutLeasePolicyRequest) (*activationsv1.PutLeasePolicyResponse, error) {
	if err := checkPolicyPath(req.GetProductId(), req.GetTier()); err != nil {
		return nil, err
	}
	p, err := x.policyOf(req)
	if err != nil {
		return nil, err
	}
	tenant, err := x.productTenant(ctx, req.GetProductId(), true)
	if err != nil {
		return nil, err
	}
	saved, err := x.store.PutPolicy(ctx, tenant, p)
	if err != nil {
		return nil, err
	}
	return &activationsv1.PutLeasePolicyResponse{Policy: policyMessage(saved)}, nil
}

// policyOf checks a policy's bounds (400 naming the field) and fills in the defaults.
func (x *Leases) policyOf(req *activationsv1.PutLeasePolicyRequest) (store.Policy, error) {
	p := effectivePolicy(nil)
	p.ProductID, p.Tier, p.Floating = req.GetProductId(), req.GetTier(), req.GetFloating()
	if req.LeaseTtlSeconds != nil {
		ttl := int64(req.GetLeaseTtlSeconds())
		if ttl < int64(x.cfg.MinLeaseTTL/time.Second) || ttl > int64(maxLeaseTTL/time.Second) {
			return p, apierr.Invalid("lease_ttl_seconds must be between %d and %d", int64(x.cfg.MinLeaseTTL/time.Second), int64(maxLeaseTTL/time.Second))
		}
		p.LeaseTTL = time.Duration(ttl) * time.Second
		p.RenewAfter = p.LeaseTTL / 2
	}
	if req.RenewAfterSeconds != nil {
		renew := int64(req.GetRenewAfterSeconds())
		if renew < 0 || renew >= int64(p.LeaseTTL/time.Second) {
			return p, apierr.Invalid("renew_after_seconds must be at least 0 and less than lease_ttl_seconds (%d)", int64(p.LeaseTTL/time.Second))
		}
		p.RenewAfter = time.Duration(renew) * time.Second
	}
	if req.FingerprintMatch != nil {
		p.FingerprintMatch = req.GetFingerprintMatch()
		if !containsString(fingerprintMatches, p.FingerprintMatch) {
			return p, input.NotOneOf("fingerprint_match", fingerprintMatches...)
		}
	}
	if len(req.GetEntitlements()) > maxEntitlements {
		return p, apierr.Invalid("entitlements must have at most %d entries", maxEntitlements)
	}
	p.Entitlements = []string{}
	for i, e := range req.GetEntitlements() {
		if !entitlementPattern.MatchString(e) {
			return p, apierr.Invalid("entitlements[%d] must be 1 to 64 characters of a-z, 0-9, '.', '_', ':' and '-'", i)
		}
		if !containsString(p.Entitlements, e) {
			p.Entitlements = append(p.Entitlements, e)
		}
	}
	return p, nil
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func policyMessage(p store.Policy) *activationsv1.LeasePolicy {
	return &activationsv1.LeasePolicy{ProductId: p.ProductID, Tier: p.Tier, Floating: p.Floating,
		LeaseTtlSeconds: int32(p.LeaseTTL / time.Second), RenewAfterSeconds: int32(p.RenewAfter / time.Second),
		FingerprintMatch: p.FingerprintMatch, Entitlements: p.Entitlements, UpdatedAt: timestamppb.New(p.UpdatedAt)}
}

// ListLeasePolicies lists a product's policies: none for a product no tenant owns yet.
func (x *Leases) ListLeasePolicies(ctx context.Context, req *activationsv1.ListLeasePoliciesRequest) (*activationsv1.ListLeasePoliciesResponse, error) {
	tenant, err := x.productTenant(ctx, req.GetProductId(), false)
	if err != nil {
		return nil, err
	}
	policies, err := x.store.Policies(ctx, tenant, req.GetProductId())
	if err != nil {
		return nil, err
	}
	resp := &activationsv1.ListLeasePoliciesResponse{Policies: []*activationsv1.LeasePolicy{}}
	for _, p := range policies {
		resp.Policies = append(resp.Policies, policyMessage(p))
	}
	return resp, nil
}

// GetLeasePolicy is one tier's own policy, checked and answered as DeleteLeasePolicy
// finds it: a product no tenant owns has none, and stays free.
func (x *Leases) GetLeasePolicy(ctx context.Context, req *activationsv1.GetLeasePolicyRequest) (*activationsv1.GetLeasePolicyResponse, error) {
	if err := checkPolicyPath(req.GetProductId(), req.GetTier()); err != nil {
		return nil, err
	}
	tenant, err := x.productTenant(ctx, req.GetProductId(), false)
	if err != nil {
		return nil, err
	}
	p, err := x.store.Policy(ctx, tenant, req.GetProductId(), req.GetTier())
	if err != nil {
		return nil, err
	}
	if p == nil {
		return nil, errPolicyNotFound
	}
	return &activationsv1.GetLeasePolicyResponse{Policy: policyMessage(*p)}, nil
}

// DeleteLeasePolicy removes a tier's policy; its licenses follow the product's default
// (or the built-in one) from their next lease on. A product no tenant owns has no policy
// to delete, and stays free.
func (x *Leases) DeleteLeasePolicy(ctx context.Context, req *activationsv1.DeleteLeasePolicyRequest) (*activationsv1.DeleteLeasePolicyResponse, error) {
	if err := checkPolicyPath(req.GetProductId(), req.GetTier()); err != nil {
		return nil, err
	}
	tenant, err := x.productTenant(ctx, req.GetProductId(), false)
	if err != nil {
		return nil, err
	}
	deleted, err := x.store.DeletePolicy(ctx, tenant, req.GetProductId(), req.GetTier())
	if err != nil {
		return nil, err
	}
	if !deleted {
		return nil, errPolicyNotFound
	}
	return &activationsv1.DeleteLeasePolicyResponse{ProductId: req.GetProductId(), Tier: req.GetTier(), Deleted: true}, nil
}

// checkLeaseRequest checks the shape of a lease request (400 naming the field).
func checkLeaseRequest(req *activationsv1.CreateLeaseRequest) error {
	if req.GetKey() == "" {
		return errMissingKey
	}
	if req.GetToken() == "" && req.GetInstanceId() == "" {
		return errMissingToken
	}
	if req.GetToken() == "" {
		if err := checkField("instance_id", req.GetInstanceId()); err != nil {
			return err
		}
	}
	if len(req.GetComponents()) > maxComponents {
		return apierr.Invalid("components must have at most %d entries", maxComponents)
	}
	for name, value := range req.GetComponents() {
		if !componentNamePattern.MatchString(name) {
			return apierr.Invalid("components names must be 1 to 32 characters of a-z, 0-9 and '_'")
		}
		if utf8.RuneCountInString(value) > maxComponentValue || pgxx.HasNUL(value) {
			return apierr.Invalid("components.%s must be at most %d characters, without NUL", name, maxComponentValue)
		}
	}
	if req.Nonce != nil && (utf8.RuneCountInString(req.GetNonce()) > maxNonce || pgxx.HasNUL(req.GetNonce())) {
		return apierr.Invalid("nonce must be at most %d characters, without NUL", maxNonce)
	}
	return nil
}

// matches says whether the components sent match the bound ones under strategy: any one
// equal, more than half equal, or all equal (a bound name missing from sent is unequal).
func matches(strategy string, bound, sent map[string]string) bool {
	equal := 0
	for name, value := range bound {
		if v, ok := sent[name]; ok && v == value {
			equal++
		}
	}
	switch strategy {
	case "any":
		return equal >= 1
	case "most":
		return 2*equal > len(bound)
	default: // all; also a reinstall under a policy that is none now
		return equal == len(bound)
	}
}

// CreateLease signs a lease for a seat: the seat the token holds, or (a reinstall) the
// bound seat of instance_id whose components match, which then gets a new token. The
// seat, its policy and the signing key are one read; a write follows only when the lease
// changes the seat (a floating seat's lease end, a first binding, a reinstall's token).
func (x *Leases) CreateLease(ctx context.Context, req *activationsv1.CreateLeaseRequest) (*activationsv1.CreateLeaseResponse, error) {
	l, err := x.leaseLicense(ctx, req, inAnyTenant(x.licenses))
	if err != nil {
		return nil, err
	}
	return x.leaseAlone(ctx, l, req, x.now())
}

// leaseLicense checks a lease request's shape and finds its license, usable now.
func (x *Leases) leaseLicense(ctx context.Context, req *activationsv1.CreateLeaseRequest, find findLicense) (*licensingv1.License, error) {
	if err := checkLeaseRequest(req); err != nil {
		return nil, err
	}
	l, err := find(ctx, req.GetKey())
	if err != nil {
		return nil, err
	}
	if err := usableAt(l, x.now()); err != nil {
		return nil, err
	}
	return l, nil
}

// leaseAlone signs the lease of req for license l at now, reading its basis and writing
// its seat on its own, and looking again (up to maxLeaseAttempts) when the seat changed
// between the two.
func (x *Leases) leaseAlone(ctx context.Context, l *licensingv1.License, req *activationsv1.CreateLeaseRequest, now time.Time) (*activationsv1.CreateLeaseResponse, error) {
	ask := leaseAsk(l, req)
	for attempt := 0; ; attempt++ {
		if attempt == maxLeaseAttempts {
			return nil, errSeatChanged
		}
		basis, err := x.store.LeaseBasis(ctx, ask.Tenant, ask.Key, ask.ProductID, ask.Tier, ask.TokenHash, ask.Instance)
		if err != nil {
			return nil, err
		}
		plan, err := x.planLease(ctx, l, req, ask.TokenHash, now, basis)
		if err != nil {
			return nil, err
		}
		if plan.writes {
			renewed, err := x.store.RenewLease(ctx, plan.renewal)
			if err != nil {
				return nil, err
			}
			if !renewed {
				continue
			}
		}
		return x.signPlan(ctx, plan)
	}
}

// errSeatChanged: the seat changed under every attempt of a lease.
var errSeatChanged = apierr.Retry("The seat was changed by a concurrent request; please retry")

// leaseAsk is what a lease of req for license l reads (store.LeaseBasis's arguments).
func leaseAsk(l *licensingv1.License, req *activationsv1.CreateLeaseRequest) store.LeaseAsk {
	ask := store.LeaseAsk{Tenant: l.GetTenantId(), Key: l.GetKey(), ProductID: l.GetProductId(), Tier: l.GetTier()}
	if req.GetToken() != "" {
		ask.TokenHash = hashToken(req.GetToken())
	} else {
		ask.Instance = req.GetInstanceId()
	}
	return ask
}

// leasePlan is a lease decided from its basis: what it signs and what it writes first.
type leasePlan struct {
	l                    *licensingv1.License
	req                  *activationsv1.CreateLeaseRequest
	tenant               string
	key                  *store.LeaseKey
	policy               store.Policy
	seat                 *store.LeaseSeat
	iat, exp, renewAfter time.Time
	// writes: renewal must be applied before the lease is signed.
	writes   bool
	renewal  store.LeaseRenewal
	newToken string
}

// planLease decides the lease of req (license l, token hash tokenHash, nil for a
// reinstall) at now from what was read of its seat, policy and key.
func (x *Leases) planLease(ctx context.Context, l *licensingv1.License, req *activationsv1.CreateLeaseRequest, tokenHash []byte, now time.Time, basis store.LeaseBasis) (leasePlan, error) {
	p := leasePlan{l: l, req: req, tenant: l.GetTenantId(), key: basis.Key, policy: effectivePolicy(basis.Policy)}
	p.iat = now.Truncate(time.Second)
	p.exp = p.iat.Add(p.policy.LeaseTTL)
	p.renewAfter = p.iat.Add(p.policy.RenewAfter)
	if e := l.GetExpiresAt(); e != nil && e.AsTime().Before(p.exp) {
		p.exp = e.AsTime().Truncate(time.Second)
		p.renewAfter = p.iat.Add(shortenedRenewAfter(p.exp.Sub(p.iat), p.policy))
	}
	var err error
	p.seat, p.renewal, p.newToken, err = x.leaseSeat(ctx, p.tenant, l.GetKey(), tokenHash, basis.Seat, req, p.policy)
	if err != nil {
		return p, err
	}
	if p.policy.Floating {
		p.renewal.LeaseExpiresAt = &p.exp
	}
	if p.writes = changesSeat(p.seat, p.renewal); p.writes {
		p.renewal.ProductID = l.GetProductId()
	}
	return p, nil
}

// shortenedRenewAfter is when, after iat, a lease that the license's expiry cut to life
// is to be renewed: the policy's share of its lease_ttl (renew_after_seconds of
// lease_ttl_seconds, half by default) of life, in whole seconds. The policy's
// renew_after_seconds itself would fall at or past the shorter lease's exp, and an app
// would then never renew ahead, nor learn of its license's extension while its lease ran.
func shortenedRenewAfter(life time.Duration, policy store.Policy) time.Duration {
	lifeSeconds, ttlSeconds := int64(life/time.Second), int64(policy.LeaseTTL/time.Second)
	if ttlSeconds <= 0 {
		return 0
	}
	return time.Duration(lifeSeconds*int64(policy.RenewAfter/time.Second)/ttlSeconds) * time.Second
}

// signPlan signs a planned lease whose write (if any) was applied.
func (x *Leases) signPlan(ctx context.Context, p leasePlan) (*activationsv1.CreateLeaseResponse, error) {
	seat := p.seat
	if p.writes && p.renewal.Bind != nil {
		bound := *seat
		bound.Components = p.renewal.Bind
		seat = &bound
	}
	signer, err := x.signingKey(ctx, p.tenant, p.key)
	if err != nil {
		return nil, err
	}
	claimTenant := ""
	if x.cfg.MultiTenant {
		claimTenant = p.tenant
	}
	claims, err := appendLeaseClaims(make([]byte, 0, 512), x.cfg.Issuer, claimTenant, p.l, p.policy, seat, p.iat, p.exp, p.renewAfter, p.req.Nonce, randomID())
	if err != nil {
		return nil, err
	}
	resp := &activationsv1.CreateLeaseResponse{Lease: signer.sign(claims), ExpiresAt: timestamppb.New(p.exp), RenewAfter: timestamppb.New(p.renewAfter)}
	if p.newToken != "" {
		resp.Token = proto.String(p.newToken)
	}
	return resp, nil
}

// changesSeat says whether a lease must write its seat: to move a floating seat's lease
// end, to make a once-floating seat not floating, to bind it or to replace its token. A
// lease of a seat it leaves as it is only reads it (as validate-license does): against a
// concurrent deactivation it is simply the earlier of the two.
func changesSeat(seat *store.LeaseSeat, r store.LeaseRenewal) bool {
	return r.LeaseExpiresAt != nil || seat.LeaseExpiresAt != nil || r.Bind != nil || r.NewTokenHash != nil
}

// usableAt is pkg/license's rule for a license licensing returned.
func usableAt(l *licensingv1.License, now time.Time) error {
	var expires *time.Time
	if l.GetExpiresAt() != nil {
		t := l.GetExpiresAt().AsTime()
		expires = &t
	}
	return license.Usable(l.GetStatus(), expires, now)
}

// leaseSeat checks the seat a lease request proves (seat, as read; nil: none), decides
// the binding and returns the renewal that would commit it (and, for a reinstall, the new
// token).
func (x *Leases) leaseSeat(ctx context.Context, tenant, key string, tokenHash []byte, seat *store.LeaseSeat, req *activationsv1.CreateLeaseRequest, policy store.Policy) (*store.LeaseSeat, store.LeaseRenewal, string, error) {
	r := store.LeaseRenewal{Tenant: tenant, Key: key, TokenHash: tokenHash}
	reinstall := tokenHash == nil
	switch {
	case seat == nil && !reinstall:
		lapsed, err := x.store.LapsedWithin(ctx, tenant, key, tokenHash, lapseRemembered)
		if err != nil {
			return nil, r, "", err
		}
		if lapsed {
			return nil, r, "", errLeaseLapsed
		}
		return nil, r, "", errBadToken
	case seat == nil, reinstall && seat.Components == nil:
		// A reinstall needs a bound seat: an unbound one still needs its token.
		return nil, r, "", errBadToken
	case !seat.Live:
		return nil, r, "", errLeaseLapsed
	}
	r.Instance, r.SeenComponents = seat.Instance, seat.Components
	sent := req.GetComponents()
	if policy.FingerprintMatch != matchNone || reinstall {
		if len(sent) == 0 {
			return nil, r, "", errNeedComponents
		}
		if seat.Components == nil {
			r.Bind = sent
		} else if !matches(policy.FingerprintMatch, seat.Components, sent) {
			return nil, r, "", errFingerprint
		}
	}
	if !reinstall {
		return seat, r, "", nil
	}
	// The seat's token is not known (only its hash is stored): the renewal names the seat
	// by instance and replaces whatever token it holds, if it is still bound to the
	// components compared against.
	tok, newHash := newToken()
	r.NewTokenHash = newHash
	return seat, r, tok, nil
}

func randomID() string {
	b := make([]byte, 16)
	if _, err := cryptorand.Read(b); err != nil {
		panic(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// thumbprint is a key's kid: its RFC 7638 JWK thumbprint (SHA-256 over the required
// members in lexical order), so any verifier can recompute it from the JWK.
func thumbprint(pub ed25519.PublicKey) string {
	sum := sha256.Sum256([]byte(`{"crv":"Ed25519","kty":"OKP","x":"` + base64.RawURLEncoding.EncodeToString(pub) + `"}`))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// newLeaseKey makes an Ed25519 key, its private half sealed with the installation's key.
func (x *Leases) newLeaseKey(ctx context.Context) (store.LeaseKey, error) {
	ring, err := x.cfg.Keyring(ctx)
	if err != nil {
		return store.LeaseKey{}, err
	}
	pub, priv, err := ed25519.GenerateKey(cryptorand.Reader)
	if err != nil {
		return store.LeaseKey{}, err
	}
	sealed, err := ring.Seal(priv.Seed())
	if err != nil {
		return store.LeaseKey{}, err
	}
	return store.LeaseKey{Kid: thumbprint(pub), PublicKey: pub, SealedPrivate: sealed}, nil
}

// signingKey is the tenant's active key (active, as read; nil: none yet, then it is made
// here), opened, with its JWS header, once per process and kid. An active key whose
// private half no longer opens is replaced (replaceUnreadable), so leases go on being
// signed after the installation keyring was replaced.
func (x *Leases) signingKey(ctx context.Context, tenant string, active *store.LeaseKey) (*leaseSigner, error) {
	k := active
	if k == nil {
		fresh, err := x.newLeaseKey(ctx)
		if err != nil {
			return nil, err
		}
		if k, err = x.store.AddFirstLeaseKey(ctx, tenant, fresh); err != nil {
			return nil, err
		}
		if k == nil {
			return nil, errors.New("lease key: no active key after adding one")
		}
	}
	signer, err := x.open(ctx, k, x.cfg.Keyring)
	if !errors.Is(err, errUnreadableLeaseKey) {
		return signer, err
	}
	return x.replaceUnreadable(ctx, tenant, k)
}

// errUnreadableLeaseKey: a lease key's private half does not open under the keyring (it
// was sealed under another one), or opens to something that is not an Ed25519 seed.
var errUnreadableLeaseKey = errors.New("lease key does not open under the installation keyring")

// errLeaseKeyUnavailable answers a lease whose active key still does not open after this
// replica replaced it: another replica, holding another keyring, replaced it in turn (a
// rotation whose restarts are not finished). Retrying reaches a replica, or a moment, with
// one keyring: the 503 of any dependency that could not take the call.
var errLeaseKeyUnavailable = apierr.Unavailable(apierr.UnavailableMessage)

// open returns the signer of k, opened with ring's keyring (kept by kid once opened).
func (x *Leases) open(ctx context.Context, k *store.LeaseKey, ring func(context.Context) (*signing.Keyring, error)) (*leaseSigner, error) {
	if signer, ok := x.private.Load(k.Kid); ok {
		return signer.(*leaseSigner), nil
	}
	keys, err := ring(ctx)
	if err != nil {
		return nil, err
	}
	seed, err := keys.Open(k.SealedPrivate)
	if errors.Is(err, signing.ErrTampered) || errors.Is(err, signing.ErrMalformed) || (err == nil && len(seed) != ed25519.SeedSize) {
		return nil, fmt.Errorf("lease key %s: %w", k.Kid, errUnreadableLeaseKey)
	}
	if err != nil {
		return nil, fmt.Errorf("lease key %s: %w", k.Kid, err)
	}
	signer, err := newLeaseSigner(k.Kid, ed25519.NewKeyFromSeed(seed))
	if err != nil {
		return nil, err
	}
	x.private.Store(k.Kid, signer)
	return signer, nil
}

// replaceUnreadable handles an active key that does not open. It first asks licensing for
// the keyring again: this process may hold an older one than the replica that sealed the
// key (a rotation, restarts under way), and then nothing is wrong with the key. If the key
// still does not open, it was sealed under a keyring that is gone: its private half is
// lost, but its public half is not, so the key is retired as a rotation retires one (it
// stays in the JWKS, "retiring", until every lease it signed has expired: apps holding
// them see no change), a new key made under the current keyring signs from now on, and
// lease_key.rotated is emitted; apps fetch the JWKS again when they meet its kid. This is
// what an operator would otherwise do by hand (POST /v1/lease-keys/rotate) after
// replacing the keyring (docs/licensing.md, Rotating).
func (x *Leases) replaceUnreadable(ctx context.Context, tenant string, k *store.LeaseKey) (*leaseSigner, error) {
	if x.cfg.RefreshKeyring != nil {
		signer, err := x.open(ctx, k, x.cfg.RefreshKeyring)
		if !errors.Is(err, errUnreadableLeaseKey) {
			return signer, err
		}
	}
	retireAfter, err := x.defaultRetireAfter(ctx, tenant)
	if err != nil {
		return nil, err
	}
	next, err := x.newLeaseKey(ctx)
	if err != nil {
		return nil, err
	}
	replaced, err := x.store.ReplaceLeaseKey(ctx, tenant, k.Kid, next, retireAfter)
	if err != nil {
		return nil, err
	}
	if replaced && x.cfg.Log != nil {
		x.cfg.Log.WarnContext(ctx, "lease key replaced: its private half does not open under the installation keyring, which was replaced since it was made",
			"tenant_id", tenant, "retired_kid", k.Kid, "kid", next.Kid, "retire_after", retireAfter.String(),
			"effect", "the retired key keeps verifying the leases it signed until retire_at; new leases carry the new kid (lease_key.rotated emitted)",
			"docs", "docs/licensing.md#rotating")
	}
	// The active key now: this replica's, or the one a replica that got there first made.
	active, err := x.store.ActiveLeaseKey(ctx, tenant)
	if err != nil {
		return nil, err
	}
	if active == nil {
		return nil, errors.New("lease key: no active key after replacing one")
	}
	signer, err := x.open(ctx, active, x.cfg.Keyring)
	if errors.Is(err, errUnreadableLeaseKey) {
		if x.cfg.Log != nil {
			x.cfg.Log.ErrorContext(ctx, "lease key does not open after its replacement: replicas hold different keyrings; restart licensing, then every other service, so all hold licensing's (docs/licensing.md#rotating)",
				"tenant_id", tenant, "kid", active.Kid)
		}
		return nil, errLeaseKeyUnavailable
	}
	return signer, err
}

// ListLeaseKeys is the JWKS of the tenant's lease keys. A tenant that has none yet gets
// its first one here, so an app can ship with the JWKS pinned before any lease exists;
// replicas making it at once agree on one (store.AddFirstLeaseKey). Hosted, an unknown
// tenant_id lists none and makes nothing.
func (x *Leases) ListLeaseKeys(ctx context.Context, req *activationsv1.ListLeaseKeysRequest) (*activationsv1.ListLeaseKeysResponse, error) {
	tenant := auth.SelfHostedTenant
	if x.cfg.MultiTenant {
		tenant = req.GetTenantId()
		if err := checkField("tenant_id", tenant); err != nil {
			return nil, err
		}
	}
	keys, err := x.store.LeaseKeys(ctx, tenant)
	if err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		if keys, err = x.firstLeaseKeys(ctx, tenant); err != nil {
			return nil, err
		}
	}
	resp := &activationsv1.ListLeaseKeysResponse{Keys: []*activationsv1.LeaseKey{}}
	for _, k := range keys {
		jwk := &activationsv1.LeaseKey{Kty: "OKP", Crv: "Ed25519", X: base64.RawURLEncoding.EncodeToString(k.PublicKey),
			Kid: k.Kid, Use: "sig", Alg: "EdDSA", Status: k.Status}
		if k.RetireAt != nil {
			jwk.RetireAt = timestamppb.New(*k.RetireAt)
		}
		resp.Keys = append(resp.Keys, jwk)
	}
	return resp, nil
}

// firstLeaseKeys makes the tenant's first lease key, if the tenant exists, and lists its
// keys again (none for an unknown tenant).
func (x *Leases) firstLeaseKeys(ctx context.Context, tenant string) ([]store.LeaseKey, error) {
	if x.cfg.MultiTenant {
		known, err := x.cfg.Tenants.TenantExists(ctx, tenant)
		if err != nil || !known {
			return nil, err
		}
	}
	active, err := x.store.ActiveLeaseKey(ctx, tenant)
	if err != nil {
		return nil, err
	}
	if _, err := x.signingKey(ctx, tenant, active); err != nil {
		return nil, err
	}
	return x.store.LeaseKeys(ctx, tenant)
}

// RotateLeaseKeys makes a new key sign the tenant's leases; the one before keeps verifying
// until retire_at (by default the longest lease_ttl in use plus a day, so every lease it
// signed has expired by then). Under an Idempotency-Key (addendum §8) a retry of the same
// request answers the first rotation and rotates nothing.
func (x *Leases) RotateLeaseKeys(ctx context.Context, req *activationsv1.RotateLeaseKeysRequest) (*activationsv1.RotateLeaseKeysResponse, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	idemKey, err := idempotency.Key(ctx)
	if err != nil {
		return nil, err
	}
	var retireAfter time.Duration
	if req.RetireAfterSeconds != nil {
		secs := req.GetRetireAfterSeconds()
		if secs < 0 || secs > int64(maxRetireAfter/time.Second) {
			return nil, apierr.Invalid("retire_after_seconds must be between 0 and %d", int64(maxRetireAfter/time.Second))
		}
		retireAfter = time.Duration(secs) * time.Second
	} else if retireAfter, err = x.defaultRetireAfter(ctx, tenant); err != nil {
		return nil, err
	}
	next, err := x.newLeaseKey(ctx)
	if err != nil {
		return nil, err
	}
	raw, err := x.store.RotateLeaseKey(ctx, idemKey, idempotency.RequestHash("RotateLeaseKeys", req), tenant, next, retireAfter,
		func(retired *store.LeaseKey) ([]byte, error) {
			resp := &activationsv1.RotateLeaseKeysResponse{Kid: next.Kid}
			if retired != nil {
				resp.RetiringKid = wrapperspb.String(retired.Kid)
				resp.RetireAt = timestamppb.New(*retired.RetireAt)
			}
			return proto.Marshal(resp)
		})
	if err != nil {
		return nil, err
	}
	resp := &activationsv1.RotateLeaseKeysResponse{}
	return resp, proto.Unmarshal(raw, resp)
}

// defaultRetireAfter is how long a rotated key keeps verifying unless the rotation says:
// the longest lease_ttl in use plus a day, so every lease it signed has expired by then.
func (x *Leases) defaultRetireAfter(ctx context.Context, tenant string) (time.Duration, error) {
	longest, err := x.store.LongestLeaseTTL(ctx, tenant)
	if err != nil {
		return 0, err
	}
	// Licenses without a policy follow the built-in 7 days.
	return max(longest, defaultLeaseTTL) + retireAfterExtraDay, nil
}

// ListSeatLeases lists the caller's license's seats with their lease ends and bindings.
func (x *Leases) ListSeatLeases(ctx context.Context, req *activationsv1.ListSeatLeasesRequest) (*activationsv1.ListSeatLeasesResponse, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	if req.GetKey() == "" {
		return nil, errMissingKey
	}
	if utf8.RuneCountInString(req.GetKey()) > maxFieldLen {
		return nil, license.ErrNotFound
	}
	l, err := x.licenses.License(ctx, tenant, req.GetKey())
	if err != nil {
		return nil, err
	}
	seats, err := x.store.SeatLeases(ctx, tenant, l.GetKey())
	if err != nil {
		return nil, err
	}
	return &activationsv1.ListSeatLeasesResponse{Seats: SeatLeaseMessages(seats)}, nil
}

// SeatLeaseMessages are seats' lease states as messages.
func SeatLeaseMessages(seats []store.LeaseSeat) []*activationsv1.SeatLease {
	out := make([]*activationsv1.SeatLease, 0, len(seats))
	for _, seat := range seats {
		m := &activationsv1.SeatLease{InstanceId: seat.Instance, Components: seat.Components}
		if seat.LeaseExpiresAt != nil {
			m.LeaseExpiresAt = timestamppb.New(*seat.LeaseExpiresAt)
		}
		out = append(out, m)
	}
	return out
}
