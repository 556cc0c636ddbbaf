package server

import (
	"context"
	"errors"
	"math"
	"strings"
	"unicode/utf8"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/auth"
	"github.com/keyhouse/keyhouse/pkg/idempotency"
	"github.com/keyhouse/keyhouse/pkg/input"
	"github.com/keyhouse/keyhouse/pkg/license"
	"github.com/keyhouse/keyhouse/pkg/paging"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
	storefrontv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/storefront/v1"
	"github.com/keyhouse/keyhouse/services/storefront/internal/store"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Field caps, the same as issue-license's for the fields that become license fields.
const (
	maxIDLen = 200
	// maxDurationDays keeps an expiry inside what every export can print (year 9999).
	maxDurationDays = 100 * 366
	// reservedProductPrefix is licensing's self-license prefix: never sold.
	reservedProductPrefix = "_service_"
)

var errMappingNotFound = apierr.NotFound("Mapping not found")

// CreateMapping validates and stores a mapping. Hosted, the product_id is claimed for the
// tenant exactly as issue-license claims it, but only once the mapping is stored: a
// mapping refused (409, or an Idempotency-Key reused) leaves a product no tenant owns
// free. Under an Idempotency-Key (addendum §8) a retry of the same request answers the
// first mapping and creates nothing.
func (s *Server) CreateMapping(ctx context.Context, req *storefrontv1.CreateMappingRequest) (*storefrontv1.CreateMappingResponse, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	idemKey, err := idempotency.Key(ctx)
	if err != nil {
		return nil, err
	}
	m, err := parseMapping(tenant, req)
	if err != nil {
		return nil, err
	}
	// Another tenant's product is refused before the mapping's own conflicts, as it was
	// when the claim came first; the check claims nothing.
	owned, err := s.licensing.ProductOwned(ctx, tenant, m.ProductID)
	if err != nil {
		return nil, err
	}
	raw, _, err := s.store.CreateMapping(ctx, idemKey, idempotency.RequestHash("CreateMapping", req), m, func(out *store.Mapping) ([]byte, error) {
		// Inside the mapping's transaction, after its insert: a claim lost to another
		// tenant meanwhile (403) stores no mapping either. A product the tenant owns
		// already needs no claim (as register-release skips it).
		if !owned {
			if err := s.licensing.ClaimProduct(ctx, tenant, m.ProductID); err != nil {
				return nil, err
			}
		}
		return proto.Marshal(&storefrontv1.CreateMappingResponse{Mapping: mappingPB(out)})
	})
	if errors.Is(err, store.ErrConflict) {
		if m.PaymentLink != nil {
			return nil, apierr.Conflict("A mapping for this payment_link already exists")
		}
		return nil, apierr.Conflict("A mapping for this service_ref already exists")
	}
	if err != nil {
		return nil, err
	}
	resp := &storefrontv1.CreateMappingResponse{}
	if err := proto.Unmarshal(raw, resp); err != nil {
		return nil, err
	}
	return resp, nil
}

func parseMapping(tenant string, req *storefrontv1.CreateMappingRequest) (*store.Mapping, error) {
	m := &store.Mapping{TenantID: tenant, Seats: 1}
	link, ref := strings.TrimSpace(req.GetPaymentLink()), strings.TrimSpace(req.GetServiceRef())
	switch {
	case link == "" && ref == "":
		return nil, apierr.Invalid("payment_link or service_ref is required")
	case link != "" && ref != "":
		return nil, apierr.Invalid("give exactly one of payment_link and service_ref")
	case link != "":
		if !strings.HasPrefix(link, "plink_") || len(link) > maxIDLen || !token(link) {
			return nil, apierr.Invalid("payment_link must be a Stripe payment link id (plink_…)")
		}
		m.PaymentLink = &link
	default:
		if err := text("service_ref", ref); err != nil {
			return nil, err
		}
		m.ServiceRef = &ref
	}
	if err := text("product_id", req.GetProductId()); err != nil {
		return nil, err
	}
	if strings.HasPrefix(req.GetProductId(), reservedProductPrefix) {
		return nil, apierr.Invalid("product_id uses a reserved prefix")
	}
	if err := text("tier", req.GetTier()); err != nil {
		return nil, err
	}
	m.ProductID, m.Tier = req.GetProductId(), req.GetTier()
	if v := req.GetSeats(); v != nil {
		n, ok := positiveInt(v, math.MaxInt32)
		if !ok {
			return nil, apierr.Invalid("seats must be a positive integer")
		}
		m.Seats = n
	}
	if v := req.GetDurationDays(); v != nil {
		if _, null := v.GetKind().(*structpb.Value_NullValue); !null {
			n, ok := positiveInt(v, maxDurationDays)
			if !ok {
				return nil, apierr.Invalid("duration_days must be a positive integer (at most %d) or null for a perpetual license", maxDurationDays)
			}
			m.DurationDays = &n
		}
	}
	limits, err := license.ParseLimits(req.GetLimits())
	if err != nil {
		return nil, err
	}
	m.Limits = limits
	return m, parseFollowUp(m, req)
}

// maxGraceDays bounds renewal_grace_days: a subscription that stopped paying should not
// keep a license for months.
const maxGraceDays = 90

// parseFollowUp reads what happens after the sale: the renewal grace and on_refund.
func parseFollowUp(m *store.Mapping, req *storefrontv1.CreateMappingRequest) error {
	m.RenewalGraceDays = defaultGraceDays
	if v := req.GetRenewalGraceDays(); v != nil {
		if _, null := v.GetKind().(*structpb.Value_NullValue); !null {
			n, ok := v.GetKind().(*structpb.Value_NumberValue)
			if !ok || n.NumberValue < 0 || n.NumberValue > maxGraceDays || n.NumberValue != math.Trunc(n.NumberValue) {
				return apierr.Invalid("renewal_grace_days must be an integer from 0 to %d", maxGraceDays)
			}
			m.RenewalGraceDays = int32(n.NumberValue)
		}
	}
	switch req.GetOnRefund() {
	case "", store.OnRefundRevoke:
		m.OnRefund = store.OnRefundRevoke
	case store.OnRefundKeep:
		m.OnRefund = store.OnRefundKeep
	default:
		return input.NotOneOf("on_refund", store.OnRefundRevoke, store.OnRefundKeep)
	}
	return nil
}

// defaultGraceDays is renewal_grace_days when a mapping does not say.
const defaultGraceDays = 3

func text(name, v string) error {
	switch {
	case strings.TrimSpace(v) == "":
		return apierr.Invalid("%s is required", name)
	case !utf8.ValidString(v) || utf8.RuneCountInString(v) > maxIDLen:
		return apierr.Invalid("%s must be at most %d characters", name, maxIDLen)
	case pgxx.HasNUL(v):
		return apierr.Invalid("%s must not contain NUL characters", name)
	}
	return nil
}

// token: a provider id, letters, digits and underscores.
func token(s string) bool {
	for _, c := range s {
		if !(c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return true
}

func positiveInt(v *structpb.Value, maxN int32) (int32, bool) {
	n, ok := v.GetKind().(*structpb.Value_NumberValue)
	if !ok || n.NumberValue < 1 || n.NumberValue > float64(maxN) || n.NumberValue != math.Trunc(n.NumberValue) {
		return 0, false
	}
	return int32(n.NumberValue), true
}

func mappingPB(m *store.Mapping) *storefrontv1.Mapping {
	out := &storefrontv1.Mapping{
		Id: m.ID, ProductId: m.ProductID, Tier: m.Tier, Seats: m.Seats,
		Limits: &structpb.Struct{Fields: map[string]*structpb.Value{}}, CreatedAt: timestamppb.New(m.CreatedAt),
		RenewalGraceDays: m.RenewalGraceDays, OnRefund: m.OnRefund,
	}
	if m.PaymentLink != nil {
		out.PaymentLink = wrapperspb.String(*m.PaymentLink)
	}
	if m.ServiceRef != nil {
		out.ServiceRef = wrapperspb.String(*m.ServiceRef)
	}
	for k, v := range m.Limits {
		out.Limits.Fields[k] = structpb.NewNumberValue(v)
	}
	if m.DurationDays != nil {
		out.DurationDays = wrapperspb.Int32(*m.DurationDays)
	}
	return out
}

// ListMappings lists the tenant's mappings, oldest first.
func (s *Server) ListMappings(ctx context.Context, _ *storefrontv1.ListMappingsRequest) (*storefrontv1.ListMappingsResponse, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	ms, err := s.store.Mappings(ctx, tenant)
	if err != nil {
		return nil, err
	}
	out := &storefrontv1.ListMappingsResponse{Mappings: []*storefrontv1.Mapping{}}
	for _, m := range ms {
		out.Mappings = append(out.Mappings, mappingPB(m))
	}
	return out, nil
}

// DeleteMapping deletes a mapping; sessions already fulfilled keep their licenses.
func (s *Server) DeleteMapping(ctx context.Context, req *storefrontv1.DeleteMappingRequest) (*storefrontv1.DeleteMappingResponse, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	id, ok := input.Decimal(req.GetId())
	if !ok || id < 1 || id > math.MaxInt32 {
		return nil, errMappingNotFound
	}
	if err := s.store.DeleteMapping(ctx, tenant, int32(id)); errors.Is(err, store.ErrNotFound) {
		return nil, errMappingNotFound
	} else if err != nil {
		return nil, err
	}
	return &storefrontv1.DeleteMappingResponse{Id: int32(id), Deleted: true}, nil
}

// ListDeliveries lists deliveries newest first.
func (s *Server) ListDeliveries(ctx context.Context, req *storefrontv1.ListDeliveriesRequest) (*storefrontv1.ListDeliveriesResponse, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	limit, offset, err := paging.Parse(req.GetLimit(), req.GetOffset())
	if err != nil {
		return nil, err
	}
	outcome := req.GetOutcome()
	if outcome != "" && !validOutcome(outcome) {
		return nil, input.NotOneOf("outcome", store.Outcomes...)
	}
	filter := store.DeliveryFilter{Outcome: outcome}
	for _, f := range []struct {
		name, value string
		into        *string
	}{{"checkout_session_id", req.GetCheckoutSessionId(), &filter.CheckoutSessionID}, {"customer", req.GetCustomer(), &filter.Customer}} {
		// The callback stores these as Stripe sent them (at most 255 printable ASCII): any
		// other value matches nothing, and says so rather than listing nothing.
		if f.value != "" && (len(f.value) > 255 || !token(f.value)) {
			return nil, apierr.Invalid("%s must be a Stripe id (letters, digits and underscores)", f.name)
		}
		*f.into = f.value
	}
	ds, total, err := s.store.Deliveries(ctx, tenant, filter, limit, offset)
	if err != nil {
		return nil, err
	}
	out := &storefrontv1.ListDeliveriesResponse{Deliveries: make([]*storefrontv1.Delivery, 0, len(ds)), Total: int32(total)}
	for _, d := range ds {
		out.Deliveries = append(out.Deliveries, deliveryPB(d))
	}
	return out, nil
}

func validOutcome(o string) bool {
	for _, v := range store.Outcomes {
		if v == o {
			return true
		}
	}
	return false
}

func deliveryPB(d *store.Delivery) *storefrontv1.Delivery {
	return &storefrontv1.Delivery{
		Id: d.ID, EventId: d.EventID, EventType: d.EventType, CheckoutSessionId: d.CheckoutSessionID,
		Outcome: d.Outcome, EmailStatus: str(d.EmailStatus), LicenseKey: str(d.LicenseKey), Error: str(d.Error),
		CreatedAt: timestamppb.New(d.CreatedAt), UpdatedAt: timestamppb.New(d.UpdatedAt),
	}
}

func str(p *string) *wrapperspb.StringValue {
	if p == nil {
		return nil
	}
	return wrapperspb.String(*p)
}
