package server

import (
	"context"
	"errors"
	"strings"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/auth"
	"github.com/keyhouse/keyhouse/pkg/license"
	"github.com/keyhouse/keyhouse/pkg/signing"
	"github.com/keyhouse/keyhouse/pkg/tenantpurge"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	"github.com/keyhouse/keyhouse/services/licensing/internal/store"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// GetLicense serves the other services' lookups: scoped to the tenant in the call's
// metadata, or (no tenant: public routes such as activate-license) in any tenant.
func (s *Server) GetLicense(ctx context.Context, req *licensingv1.GetLicenseRequest) (*licensingv1.GetLicenseResponse, error) {
	p, _ := auth.FromContext(ctx)
	l, err := s.lookup(ctx, p.TenantID, req.GetKey())
	if err != nil {
		return nil, err
	}
	return &licensingv1.GetLicenseResponse{License: licenseMessage(l)}, nil
}

// licenseMessage is the internal view of l.
func licenseMessage(l *store.License) *licensingv1.License {
	return &licensingv1.License{
		TenantId: l.TenantID, Key: l.Key, Tier: l.Tier, ProductId: l.ProductID, IssuedTo: l.IssuedTo,
		IssuedAt: timestamppb.New(l.IssuedAt), ExpiresAt: timestampOrNil(l.ExpiresAt), Status: l.Status,
		Limits: limitsStruct(l.Limits), MaxActivations: capOrNil(l.MaxActivations), RevokedAt: timestampOrNil(l.RevokedAt),
	}
}

// GetLicenses is GetLicense for several keys, with one store read for them all.
func (s *Server) GetLicenses(ctx context.Context, req *licensingv1.GetLicensesRequest) (*licensingv1.GetLicensesResponse, error) {
	if len(req.GetKeys()) > maxLookupBatch {
		return nil, apierr.Invalid("at most %d keys in a call", maxLookupBatch)
	}
	p, _ := auth.FromContext(ctx)
	keys := make([]string, len(req.GetKeys()))
	for i, key := range req.GetKeys() {
		keys[i] = canonicalKey(key)
	}
	found, err := s.store.GetMany(ctx, keys)
	if err != nil {
		return nil, err
	}
	resp := &licensingv1.GetLicensesResponse{Results: make([]*licensingv1.GetLicenseResponse, len(keys))}
	for i, key := range keys {
		answer := &licensingv1.GetLicenseResponse{}
		if l := found[key]; l != nil && (p.TenantID == "" || l.TenantID == p.TenantID) {
			answer.License = licenseMessage(l)
		}
		resp.Results[i] = answer
	}
	return resp, nil
}

// ClaimProduct is the one product-ownership claim, shared with register-release. The
// tenant comes from the internal caller's metadata, so one billing does not have (deleted,
// or a made-up name) is refused (404 "Tenant not found"): a claim for it would take the
// product from the tenant that later uses it, and outlive the purge.
func (s *Server) ClaimProduct(ctx context.Context, req *licensingv1.ClaimProductRequest) (*licensingv1.ClaimProductResponse, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(req.GetProductId()) == "" {
		return nil, errProductRequired
	}
	if s.cfg.MultiTenant {
		known, err := s.entitlements.TenantExists(ctx, tenant)
		if err != nil {
			return nil, err
		}
		if !known {
			return nil, tenantpurge.ErrTenantNotFound
		}
	}
	err = s.store.ClaimProduct(ctx, tenant, req.GetProductId())
	if errors.Is(err, store.ErrProductOwned) {
		return nil, license.ErrProductOwned
	}
	if err != nil {
		return nil, err
	}
	return &licensingv1.ClaimProductResponse{}, nil
}

// CheckProductOwner is ClaimProduct's answer without the claim: owned when the calling
// tenant owns the product, not owned when no tenant does, PermissionDenied when another
// tenant does.
func (s *Server) CheckProductOwner(ctx context.Context, req *licensingv1.CheckProductOwnerRequest) (*licensingv1.CheckProductOwnerResponse, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(req.GetProductId()) == "" {
		return nil, errProductRequired
	}
	owned, err := s.ownedBy(ctx, tenant, req.GetProductId())
	if err != nil {
		return nil, err
	}
	return &licensingv1.CheckProductOwnerResponse{Owned: owned}, nil
}

// GetSigningKeys hands the keyring to the other signing services (releases).
func (s *Server) GetSigningKeys(context.Context, *licensingv1.GetSigningKeysRequest) (*licensingv1.GetSigningKeysResponse, error) {
	doc, err := signing.MarshalKeyring(s.cfg.Keyring)
	if err != nil {
		return nil, err
	}
	return &licensingv1.GetSigningKeysResponse{Keyring: doc}, nil
}

// CountActiveLicenses is the tenant's quota usage.
func (s *Server) CountActiveLicenses(ctx context.Context, _ *licensingv1.CountActiveLicensesRequest) (*licensingv1.CountActiveLicensesResponse, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	n, err := s.store.CountActive(ctx, tenant)
	if err != nil {
		return nil, err
	}
	return &licensingv1.CountActiveLicensesResponse{Active: int32(n)}, nil
}

// ListDeletedLicenses tells activations which of the caller's licenses were deleted
// lately, so its tenant-wide readers leave their seats out until the purge ran.
func (s *Server) ListDeletedLicenses(ctx context.Context, _ *licensingv1.ListDeletedLicensesRequest) (*licensingv1.ListDeletedLicensesResponse, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	keys, err := s.store.DeletedKeys(ctx, tenant)
	if err != nil {
		return nil, err
	}
	return &licensingv1.ListDeletedLicensesResponse{Keys: keys}, nil
}

// IssueLicenseForTenant is issue-license on behalf of the tenant in metadata (storefront
// fulfillment holds no tenant API key): the same validation, subscription and quota
// checks, product claim and Idempotency-Key. A tenant billing does not have (deleted, a
// made-up name, "default" hosted) is refused by the subscription check: 404 "Tenant not
// found".
func (s *Server) IssueLicenseForTenant(ctx context.Context, req *licensingv1.IssueLicenseForTenantRequest) (*licensingv1.IssueLicenseForTenantResponse, error) {
	resp, err := s.IssueLicense(ctx, req.GetLicense())
	if err != nil {
		return nil, err
	}
	return &licensingv1.IssueLicenseForTenantResponse{Key: resp.GetKey()}, nil
}

// RevokeLicenseForTenant is RevokeLicense on behalf of the tenant in metadata (storefront:
// refunds and disputes revoke, a dispute won reactivates under the same quota check).
func (s *Server) RevokeLicenseForTenant(ctx context.Context, req *licensingv1.RevokeLicenseForTenantRequest) (*licensingv1.RevokeLicenseForTenantResponse, error) {
	resp, err := s.RevokeLicense(ctx, req.GetRevoke())
	if err != nil {
		return nil, err
	}
	return &licensingv1.RevokeLicenseForTenantResponse{Status: resp.GetStatus()}, nil
}

// UpdateLicenseTermsForTenant is UpdateLicenseTerms on behalf of the tenant in metadata
// (storefront: a subscription's paid period moves the expiry).
func (s *Server) UpdateLicenseTermsForTenant(ctx context.Context, req *licensingv1.UpdateLicenseTermsForTenantRequest) (*licensingv1.UpdateLicenseTermsForTenantResponse, error) {
	resp, err := s.UpdateLicenseTerms(ctx, req.GetTerms())
	if err != nil {
		return nil, err
	}
	return &licensingv1.UpdateLicenseTermsForTenantResponse{ExpiresAt: resp.GetExpiresAt()}, nil
}
