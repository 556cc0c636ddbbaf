package server

import (
	"context"
	"errors"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/auth"
	"github.com/keyhouse/keyhouse/pkg/idempotency"
	"github.com/keyhouse/keyhouse/pkg/input"
	"github.com/keyhouse/keyhouse/pkg/license"
	"github.com/keyhouse/keyhouse/pkg/licensecache"
	"github.com/keyhouse/keyhouse/pkg/paging"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	"github.com/keyhouse/keyhouse/services/licensing/internal/store"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// IssueLicense issues a license, once per Idempotency-Key. Hosted, the tenant's first
// license for a product claims the product, in the license's transaction: a request
// refused (quota, a reused Idempotency-Key) or failed claims nothing.
func (s *Server) IssueLicense(ctx context.Context, req *licensingv1.IssueLicenseRequest) (*licensingv1.IssueLicenseResponse, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	idemKey, err := idempotency.Key(ctx)
	if err != nil {
		return nil, err
	}
	l, err := s.newLicense(tenant, req)
	if err != nil {
		return nil, err
	}
	// The subscription first: a tenant that may not issue must not claim products either.
	quota, err := s.checkEntitlements(ctx, tenant)
	if err != nil {
		return nil, err
	}
	// Another tenant's product is refused here, before the quota and the Idempotency-Key,
	// as it was when the claim came first; the read claims nothing.
	claim, err := s.mustClaim(ctx, tenant, l.ProductID)
	if err != nil {
		return nil, err
	}
	if idemKey == "" && !holdsQuota(quota) && !claim {
		// Nothing to read first: the license and its event go in one round trip.
		if err := s.store.Issue(ctx, l); err != nil {
			return nil, err
		}
		return &licensingv1.IssueLicenseResponse{Key: l.Key, Status: "issued"}, nil
	}
	raw, _, err := s.store.Idempotent(ctx, tenant, idemKey, idempotency.RequestHash("IssueLicense", req), func(tx store.Tx) ([]byte, error) {
		if err := holdQuota(ctx, tx, tenant, quota); err != nil {
			return nil, err
		}
		if claim {
			// After every check that can refuse, with the insert: both commit or neither.
			// Another tenant's first license racing for the product makes this wait for
			// its transaction; if it committed, this one is refused and inserts nothing.
			if err := claimIn(ctx, tx, tenant, l.ProductID); err != nil {
				return nil, err
			}
		}
		if err := tx.Insert(ctx, l); err != nil {
			return nil, err
		}
		return proto.Marshal(&licensingv1.IssueLicenseResponse{Key: l.Key, Status: "issued"})
	})
	if err != nil {
		return nil, err
	}
	resp := &licensingv1.IssueLicenseResponse{}
	if err := proto.Unmarshal(raw, resp); err != nil {
		return nil, err
	}
	return resp, nil
}

// newLicense validates an issue-license request into the row to insert.
func (s *Server) newLicense(tenant string, req *licensingv1.IssueLicenseRequest) (*store.License, error) {
	tier, err := requireText("tier", req.GetTier(), maxIDLen)
	if err != nil {
		return nil, err
	}
	product, err := requireText("product_id", req.GetProductId(), maxIDLen)
	if err != nil {
		return nil, err
	}
	issuedTo, err := requireText("issued_to", req.GetIssuedTo(), maxTextLen)
	if err != nil {
		return nil, err
	}
	expires, err := input.OptionalTime("expires_at", req.GetExpiresAt())
	if err != nil {
		return nil, err
	}
	selfLicense := strings.HasPrefix(product, ReservedProductPrefix)
	switch {
	case selfLicense && s.cfg.MultiTenant:
		return nil, errReservedProduct
	case selfLicense && expires == nil:
		return nil, errSelfLicenseExpiry
	}
	limits, err := parseLimits(req.GetLimits())
	if err != nil {
		return nil, err
	}
	maxActivations := int32(1)
	capPtr := &maxActivations
	if req.GetMaxActivations() != nil {
		if capPtr, err = optionalCap(req.GetMaxActivations()); err != nil {
			return nil, err
		}
	}
	var notes *string
	switch k := req.GetNotes().GetKind().(type) {
	case nil, *structpb.Value_NullValue:
	case *structpb.Value_StringValue:
		if utf8Len(k.StringValue) > maxNotesLen {
			return nil, apierr.Invalid("notes must be at most %d characters", maxNotesLen)
		}
		if err := checkNUL("notes", k.StringValue); err != nil {
			return nil, err
		}
		if k.StringValue != "" {
			notes = &k.StringValue
		}
	default:
		return nil, apierr.Invalid("notes must be a string or null")
	}
	return &store.License{
		TenantID: tenant, Key: newLicenseKey(), Tier: tier, ProductID: product, IssuedTo: issuedTo,
		ExpiresAt: expires, Limits: limits, MaxActivations: capPtr, Notes: notes,
	}, nil
}

// VerifyLicense is the public check; every failure carries "valid": false.
func (s *Server) VerifyLicense(ctx context.Context, req *licensingv1.VerifyLicenseRequest) (*licensingv1.VerifyLicenseResponse, error) {
	var l *store.License
	var err error = errMissingKey
	if req.Key != nil {
		if l, err = s.lookup(ctx, "", req.GetKey()); err == nil {
			// The gateway's admission control shares capacity by the key's tenant.
			licensecache.AnnounceTenant(ctx, l.Key, l.TenantID)
		}
	}
	return s.verifyAnswer(l, err)
}

// verifyAnswer is verify-license's answer about l, the license found (or the lookup's
// error).
func (s *Server) verifyAnswer(l *store.License, err error) (*licensingv1.VerifyLicenseResponse, error) {
	if err == nil {
		err = s.usable(l)
	}
	var ae *apierr.Error
	if errors.As(err, &ae) {
		return nil, ae.WithBefore("valid", false)
	}
	if err != nil {
		return nil, err
	}
	return &licensingv1.VerifyLicenseResponse{
		Valid: true, Tier: l.Tier, ProductId: l.ProductID, Limits: limitsStruct(l.Limits),
		ExpiresAt: timestampOrNil(l.ExpiresAt), IssuedAt: timestamppb.New(l.IssuedAt), Status: l.Status,
	}, nil
}

// usable is pkg/license's rule, at the server's clock.
func (s *Server) usable(l *store.License) error {
	return license.Usable(l.Status, l.ExpiresAt, s.now())
}

// RevokeLicense moves a license between active and revoked.
func (s *Server) RevokeLicense(ctx context.Context, req *licensingv1.RevokeLicenseRequest) (*licensingv1.RevokeLicenseResponse, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	if req.Revoked == nil {
		return nil, apierr.Invalid("revoked is required (true revokes, false reactivates)")
	}
	key := canonicalKey(req.GetKey())
	want := license.StatusActive
	quota := 0
	if req.GetRevoked() {
		want = license.StatusRevoked
	} else if quota, err = s.checkEntitlements(ctx, tenant); err != nil {
		return nil, err
	}
	err = s.store.InTx(ctx, func(tx store.Tx) error {
		// The quota lock comes before the row lock, in the same order as issuance.
		if want == license.StatusActive {
			if err := holdQuota(ctx, tx, tenant, quota); err != nil {
				return err
			}
		}
		l, err := tx.GetForUpdate(ctx, tenant, key)
		if err != nil {
			return err
		}
		if l.Status == want {
			return apierr.Conflict("License is already %s", want)
		}
		if want == license.StatusActive && license.Expired(l.ExpiresAt, s.now()) {
			return license.ErrExpired
		}
		return tx.SetStatus(ctx, tenant, key, want)
	})
	if errors.Is(err, store.ErrNotFound) {
		return nil, errNotFound
	}
	if err != nil {
		return nil, err
	}
	return &licensingv1.RevokeLicenseResponse{Key: key, Status: want}, nil
}

// DeleteLicense deletes the license; the deletion's license.deleted event, in the same
// transaction, makes activations forget its seats, even if activations is down now.
func (s *Server) DeleteLicense(ctx context.Context, req *licensingv1.DeleteLicenseRequest) (*licensingv1.DeleteLicenseResponse, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	key := canonicalKey(req.GetKey())
	if key == "" {
		return nil, errMissingKey
	}
	err = s.store.InTx(ctx, func(tx store.Tx) error {
		return tx.Delete(ctx, tenant, key)
	})
	if errors.Is(err, store.ErrNotFound) {
		return nil, errNotFound
	}
	if err != nil {
		return nil, err
	}
	return &licensingv1.DeleteLicenseResponse{Key: key, Deleted: true}, nil
}

// UpdateLicenseTerms changes expiry, activation cap and limits; omitted fields stay.
// Hosted, an update that makes an expired active license unexpired again (a revival: it
// counts against the quota again) is reactivation's twin: it needs an active subscription
// and room in the quota, checked under the quota lock in the update's transaction. Any
// other update (an active license's terms, an expired one kept expired, a revoked one)
// never asks billing's verdict.
func (s *Server) UpdateLicenseTerms(ctx context.Context, req *licensingv1.UpdateLicenseTermsRequest) (*licensingv1.UpdateLicenseTermsResponse, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	if req.ExpiresAt == nil && req.MaxActivations == nil && req.Limits == nil {
		return nil, errNoTerms
	}
	var t store.Terms
	if req.ExpiresAt != nil {
		if t.ExpiresAt, err = input.OptionalTime("expires_at", req.GetExpiresAt()); err != nil {
			return nil, err
		}
		t.SetExpiry = true
	}
	if req.MaxActivations != nil {
		if t.MaxActivations, err = optionalCap(req.GetMaxActivations()); err != nil {
			return nil, err
		}
		t.SetMaxActivations = true
	}
	if req.Limits != nil {
		if t.Limits, err = parseLimits(req.GetLimits()); err != nil {
			return nil, err
		}
	}
	current, err := s.lookup(ctx, tenant, req.GetKey())
	if err != nil {
		return nil, err
	}
	if t.SetExpiry && t.ExpiresAt == nil && strings.HasPrefix(current.ProductID, ReservedProductPrefix) {
		return nil, errSelfLicenseExpiry
	}
	// The license read above may be stale (a cache, a concurrent update): it only says
	// whether to ask billing first. The row locked in the transaction decides.
	l, err := s.updateTerms(ctx, tenant, current.Key, t, s.revives(current, t))
	if errors.Is(err, errAskBillingFirst) {
		l, err = s.updateTerms(ctx, tenant, current.Key, t, true)
	}
	if errors.Is(err, store.ErrNotFound) {
		return nil, errNotFound
	}
	if err != nil {
		return nil, err
	}
	sums, err := s.seatSummaries(ctx, tenant, []string{l.Key})
	if err != nil {
		return nil, err
	}
	sum := sums[l.Key]
	return &licensingv1.UpdateLicenseTermsResponse{
		Key: l.Key, ExpiresAt: timestampOrNil(l.ExpiresAt), Limits: limitsStruct(l.Limits),
		MaxActivations: capOrNil(l.MaxActivations), Usage: usageOf(sum), Status: l.Status,
		ActivationsCount: sum.GetActivationsCount(),
	}, nil
}

// errAskBillingFirst: the locked row turned out to be a revival that billing was not
// asked about (the license read before the transaction was not expired yet); the update
// runs again, asking first. Never answered.
var errAskBillingFirst = errors.New("the update revives the license: ask billing first")

// revives says whether applying t to l makes it count against the quota again: hosted,
// l is active and expired, and t sets an expiry that is not (or none).
func (s *Server) revives(l *store.License, t store.Terms) bool {
	now := s.now()
	return s.cfg.MultiTenant && t.SetExpiry && !license.Expired(t.ExpiresAt, now) &&
		l.Status == license.StatusActive && license.Expired(l.ExpiresAt, now)
}

// updateTerms applies t in one transaction. With ask, billing's verdict is fetched first
// and, should the locked row be a revival, applied as reactivation applies it: the quota
// lock before the row lock, the count, then the update. Without ask, a revival is
// errAskBillingFirst. A verdict that refuses (or billing that does not answer) refuses
// only a revival.
func (s *Server) updateTerms(ctx context.Context, tenant, key string, t store.Terms, ask bool) (*store.License, error) {
	quota, verdict := 0, error(nil)
	if ask {
		quota, verdict = s.checkEntitlements(ctx, tenant)
	}
	var l *store.License
	err := s.store.InTx(ctx, func(tx store.Tx) error {
		if ask && verdict == nil && holdsQuota(quota) {
			if err := tx.LockQuota(ctx, tenant); err != nil {
				return err
			}
		}
		before, err := tx.GetForUpdate(ctx, tenant, key)
		if err != nil {
			return err
		}
		if s.revives(before, t) {
			switch {
			case !ask:
				return errAskBillingFirst
			case verdict != nil:
				return verdict
			}
			// The lock is held: the count is still true at commit. The license itself is
			// expired, so it is not among those counted.
			if holdsQuota(quota) {
				n, err := tx.CountActive(ctx, tenant)
				if err != nil {
					return err
				}
				if n >= quota {
					return errQuota
				}
			}
		}
		l, err = tx.UpdateTerms(ctx, before, t)
		return err
	})
	return l, err
}

// maxExpiringWithinDays bounds list-licenses' expiring_within_days (ten years).
const maxExpiringWithinDays = 3650

// ListLicenses pages through the tenant's licenses, newest first, or those expiring soon,
// soonest first.
func (s *Server) ListLicenses(ctx context.Context, req *licensingv1.ListLicensesRequest) (*licensingv1.ListLicensesResponse, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	limit, offset, err := paging.Parse(req.GetLimit(), req.GetOffset())
	if err != nil {
		return nil, err
	}
	// Absent filters nothing; present it must name a status (`?status=` is refused).
	if req.Status != nil && !license.ValidStatus(req.GetStatus()) {
		return nil, input.NotOneOf("status", license.StatusActive, license.StatusRevoked)
	}
	if pgxx.HasNUL(req.GetProductId(), req.GetIssuedTo(), req.GetKey()) {
		// No stored value holds U+0000 (Postgres text cannot), so nothing matches.
		return &licensingv1.ListLicensesResponse{Licenses: []*licensingv1.LicenseRow{}}, nil
	}
	f := store.Filter{
		ProductID: req.GetProductId(), Status: req.GetStatus(), IssuedTo: req.GetIssuedTo(), Key: strings.TrimSpace(req.GetKey()), Limit: limit, Offset: offset,
	}
	if k := canonicalKey(f.Key); k != f.Key {
		// A whole Keyhouse key in another spelling (lower case, without dashes, O for 0)
		// finds its license, as it does on every route that takes a key and in the event
		// log's license_key filter; the substring still finds an imported key as given.
		f.KeyAsIssued = k
	}
	if d := req.GetExpiringWithinDays(); d != "" {
		days, ok := input.Decimal(d)
		if !ok || days < 1 || days > maxExpiringWithinDays {
			return nil, apierr.Invalid("expiring_within_days must be an integer from 1 to %d", maxExpiringWithinDays)
		}
		from := s.now()
		until := from.AddDate(0, 0, int(days))
		f.ExpiringFrom, f.ExpiringUntil = &from, &until
	}
	rows, total, err := s.store.List(ctx, tenant, f)
	if err != nil {
		return nil, err
	}
	keys := make([]string, len(rows))
	for i, l := range rows {
		keys[i] = l.Key
	}
	sums, err := s.seatSummaries(ctx, tenant, keys)
	if err != nil {
		return nil, err
	}
	out := &licensingv1.ListLicensesResponse{Licenses: make([]*licensingv1.LicenseRow, len(rows)), Total: int32(total)}
	for i, l := range rows {
		sum := sums[l.Key]
		out.Licenses[i] = &licensingv1.LicenseRow{
			Key: l.Key, Tier: l.Tier, ProductId: l.ProductID, IssuedTo: l.IssuedTo,
			IssuedAt: timestamppb.New(l.IssuedAt), ExpiresAt: timestampOrNil(l.ExpiresAt), Status: l.Status,
			Limits: limitsStruct(l.Limits), Usage: usageOf(sum), MaxActivations: capOrNil(l.MaxActivations),
			RevokedAt: timestampOrNil(l.RevokedAt), ActivationsCount: sum.GetActivationsCount(),
		}
	}
	return out, nil
}

// GetLicenseDetails is the admin lookup, the one view with notes.
func (s *Server) GetLicenseDetails(ctx context.Context, req *licensingv1.GetLicenseDetailsRequest) (*licensingv1.GetLicenseDetailsResponse, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	l, err := s.lookup(ctx, tenant, req.GetKey())
	if err != nil {
		return nil, err
	}
	sums, err := s.seatSummaries(ctx, tenant, []string{l.Key})
	if err != nil {
		return nil, err
	}
	return &licensingv1.GetLicenseDetailsResponse{
		Key: l.Key, Tier: l.Tier, ProductId: l.ProductID, IssuedTo: l.IssuedTo,
		IssuedAt: timestamppb.New(l.IssuedAt), ExpiresAt: timestampOrNil(l.ExpiresAt), Status: l.Status,
		Limits: limitsStruct(l.Limits), Usage: usageOf(sums[l.Key]), MaxActivations: capOrNil(l.MaxActivations),
		RevokedAt: timestampOrNil(l.RevokedAt), Notes: stringOrNil(l.Notes),
	}, nil
}

// UpdateNotes replaces the internal notes; "" clears them.
func (s *Server) UpdateNotes(ctx context.Context, req *licensingv1.UpdateNotesRequest) (*licensingv1.UpdateNotesResponse, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	notes, ok := req.GetNotes().GetKind().(*structpb.Value_StringValue)
	if !ok {
		return nil, apierr.Invalid("notes is required and must be a string")
	}
	if utf8Len(notes.StringValue) > maxNotesLen {
		return nil, apierr.Invalid("notes must be at most %d characters", maxNotesLen)
	}
	if err := checkNUL("notes", notes.StringValue); err != nil {
		return nil, err
	}
	l, err := s.store.UpdateNotes(ctx, tenant, canonicalKey(req.GetKey()), notes.StringValue)
	if errors.Is(err, store.ErrNotFound) {
		return nil, errNotFound
	}
	if err != nil {
		return nil, err
	}
	return &licensingv1.UpdateNotesResponse{Key: l.Key, Notes: stringOrNil(l.Notes)}, nil
}

// recentInStats is how many recent activations admin/stats lists.
const recentInStats = 10

// GetStats counts the tenant's licenses and seats. Seats of licenses deleted lately are
// left out: activations forgets them when the license.deleted event reaches it, which may
// be later (activations or NATS down at delete time).
func (s *Server) GetStats(ctx context.Context, _ *licensingv1.GetStatsRequest) (*licensingv1.GetStatsResponse, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	c, err := s.store.Counts(ctx, tenant)
	if err != nil {
		return nil, err
	}
	deleted, err := s.store.DeletedKeys(ctx, tenant)
	if err != nil {
		return nil, err
	}
	st, err := s.seats.Stats(ctx, tenant, recentInStats, deleted)
	if err != nil {
		return nil, err
	}
	recent := st.GetRecent()
	if recent == nil {
		recent = []*activationsv1.RecentActivation{}
	}
	return &licensingv1.GetStatsResponse{
		TotalLicenses: int32(c.Total), ActiveLicenses: int32(c.Active), RevokedLicenses: int32(c.Revoked),
		TotalActivations: st.GetTotalActivations(), RecentActivations: recent,
	}, nil
}

func timestampOrNil(t *time.Time) *timestamppb.Timestamp {
	if t == nil {
		return nil
	}
	return timestamppb.New(*t)
}

func capOrNil(c *int32) *wrapperspb.Int32Value {
	if c == nil {
		return nil
	}
	return wrapperspb.Int32(*c)
}

func stringOrNil(s *string) *wrapperspb.StringValue {
	if s == nil {
		return nil
	}
	return wrapperspb.String(*s)
}

func usageOf(sum *activationsv1.SeatSummary) map[string]float64 {
	if u := sum.GetUsage(); u != nil {
		return u
	}
	return map[string]float64{}
}

func utf8Len(s string) int { return utf8.RuneCountInString(s) }
