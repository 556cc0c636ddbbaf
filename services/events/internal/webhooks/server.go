package webhooks

import (
	"context"
	"errors"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/auth"
	"github.com/keyhouse/keyhouse/pkg/idempotency"
	"github.com/keyhouse/keyhouse/pkg/input"
	"github.com/keyhouse/keyhouse/pkg/paging"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
	"github.com/keyhouse/keyhouse/pkg/seal"
	"github.com/keyhouse/keyhouse/pkg/webhook"
	eventsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/events/v1"
)

// Roll overlap bounds (seconds).
const (
	DefaultRollOverlap = 86400
	MaxRollOverlap     = 604800
)

const maxDescriptionLen = 512

var (
	errEndpointNotFound = apierr.NotFound("Webhook endpoint not found")
	errEventNotFound    = apierr.NotFound("Event not found")
	errEndpointLimit    = apierr.Invalid("A tenant may have at most %d webhook endpoints: delete one first", MaxEndpoints)
	// The endpoint's state, not the request, is in the way: a conflict, as acting on a
	// disabled storefront webhook is.
	errEndpointDisabled = apierr.Conflict("Webhook endpoint is disabled")
	errOldSecretLimit   = apierr.Invalid("Too many old secrets still signing (at most %d): roll with expire_old_after_seconds 0, or after one expires", MaxOldSecrets)
)

// Server is WebhookEndpointsService.
type Server struct {
	eventsv1.UnimplementedWebhookEndpointsServiceServer
	Store *Store
	Keys  Keys
	// AllowPrivate: self-hosted, or WEBHOOK_ALLOW_PRIVATE_NETWORKS=true.
	AllowPrivate bool
	Resolver     webhook.Resolver
	Now          func() time.Time
	// Wake tells the worker a delivery is due now (ping, redeliver).
	Wake func()
}

// Register adds the service to a gRPC server.
func Register(s grpc.ServiceRegistrar, srv *Server) {
	eventsv1.RegisterWebhookEndpointsServiceServer(s, srv)
}

func (s *Server) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func (s *Server) checkURL(ctx context.Context, url string) error {
	if url == "" {
		return apierr.Invalid("url is required")
	}
	if err := webhook.CheckURL(ctx, s.Resolver, url, s.AllowPrivate); err != nil {
		return apierr.Invalid("%s", err.Error())
	}
	return nil
}

func checkDescription(d *wrapperspb.StringValue) (*string, error) {
	if d == nil {
		return nil, nil
	}
	v := d.GetValue()
	if utf8.RuneCountInString(v) > maxDescriptionLen || pgxx.HasNUL(v) {
		return nil, apierr.Invalid("description must be at most %d characters", maxDescriptionLen)
	}
	return &v, nil
}

// newSealedSecret returns a fresh secret and its sealed form.
func (s *Server) newSealedSecret(ctx context.Context) (string, []byte, error) {
	k, err := s.Keys.Keyring(ctx)
	if err != nil {
		return "", nil, err
	}
	secret := NewSecret()
	sealed, err := seal.Seal(k, seal.PurposeEndpointSecret, []byte(secret))
	return secret, sealed, err
}

// CreateWebhookEndpoint stores an endpoint and shows its secret, once: under an
// Idempotency-Key (addendum §8) a retry of the same request shows that first answer
// again, secret included, and creates nothing.
func (s *Server) CreateWebhookEndpoint(ctx context.Context, req *eventsv1.CreateWebhookEndpointRequest) (*eventsv1.CreateWebhookEndpointResponse, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	idemKey, err := idempotency.Key(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.checkURL(ctx, req.GetUrl()); err != nil {
		return nil, err
	}
	if err := checkSubscriptions(req.GetEvents()); err != nil {
		return nil, err
	}
	desc, err := checkDescription(req.GetDescription())
	if err != nil {
		return nil, err
	}
	secret, sealed, err := s.newSealedSecret(ctx)
	if err != nil {
		return nil, err
	}
	idem := Idempotency{Keys: s.Keys, Key: idemKey, RequestHash: idempotency.RequestHash("CreateWebhookEndpoint", req)}
	n := NewEndpoint{URL: req.GetUrl(), Events: req.GetEvents(), Description: desc, SealedSecret: sealed}
	raw, err := s.Store.CreateEndpoint(ctx, idem, tenant, n, s.now(), func(ep *Endpoint) ([]byte, error) {
		return proto.Marshal(&eventsv1.CreateWebhookEndpointResponse{Endpoint: withSecret(ep, secret)})
	})
	if errors.Is(err, ErrEndpointLimit) {
		return nil, errEndpointLimit
	}
	if err != nil {
		return nil, err
	}
	resp := &eventsv1.CreateWebhookEndpointResponse{}
	return resp, proto.Unmarshal(raw, resp)
}

func (s *Server) ListWebhookEndpoints(ctx context.Context, _ *eventsv1.ListWebhookEndpointsRequest) (*eventsv1.ListWebhookEndpointsResponse, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	eps, err := s.Store.ListEndpoints(ctx, tenant)
	if err != nil {
		return nil, err
	}
	out := &eventsv1.ListWebhookEndpointsResponse{Endpoints: make([]*eventsv1.WebhookEndpoint, 0, len(eps))}
	for i := range eps {
		out.Endpoints = append(out.Endpoints, endpointPB(&eps[i]))
	}
	return out, nil
}

func (s *Server) UpdateWebhookEndpoint(ctx context.Context, req *eventsv1.UpdateWebhookEndpointRequest) (*eventsv1.UpdateWebhookEndpointResponse, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	var u EndpointUpdate
	if req.Url != nil {
		if err := s.checkURL(ctx, req.GetUrl().GetValue()); err != nil {
			return nil, err
		}
		v := req.GetUrl().GetValue()
		u.URL = &v
	}
	if req.Events != nil {
		u.Events = make([]string, 0, len(req.GetEvents().GetValues()))
		for _, v := range req.GetEvents().GetValues() {
			if _, ok := v.GetKind().(*structpb.Value_StringValue); !ok {
				return nil, apierr.Invalid("events must be a list of strings")
			}
			u.Events = append(u.Events, v.GetStringValue())
		}
		if err := checkSubscriptions(u.Events); err != nil {
			return nil, err
		}
	}
	if u.Description, err = checkDescription(req.GetDescription()); err != nil {
		return nil, err
	}
	if req.Enabled != nil {
		v := req.GetEnabled().GetValue()
		u.Enabled = &v
	}
	ep, err := s.Store.UpdateEndpoint(ctx, tenant, req.GetId(), u)
	if errors.Is(err, ErrNotFound) {
		return nil, errEndpointNotFound
	}
	if err != nil {
		return nil, err
	}
	return &eventsv1.UpdateWebhookEndpointResponse{Endpoint: endpointPB(ep)}, nil
}

// RollWebhookEndpointSecret gives the endpoint a new secret and shows it, once: under an
// Idempotency-Key (addendum §8) a retry of the same request shows that first answer
// again, secret included, and rolls nothing, as a create does.
func (s *Server) RollWebhookEndpointSecret(ctx context.Context, req *eventsv1.RollWebhookEndpointSecretRequest) (*eventsv1.RollWebhookEndpointSecretResponse, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	idemKey, err := idempotency.Key(ctx)
	if err != nil {
		return nil, err
	}
	overlap := int64(DefaultRollOverlap)
	if req.ExpireOldAfterSeconds != nil {
		overlap = req.GetExpireOldAfterSeconds().GetValue()
		if overlap < 0 || overlap > MaxRollOverlap {
			return nil, apierr.Invalid("expire_old_after_seconds must be between 0 and %d", MaxRollOverlap)
		}
	}
	secret, sealed, err := s.newSealedSecret(ctx)
	if err != nil {
		return nil, err
	}
	now := s.now()
	idem := Idempotency{Keys: s.Keys, Key: idemKey, RequestHash: idempotency.RequestHash("RollWebhookEndpointSecret", req)}
	raw, err := s.Store.RollSecret(ctx, idem, tenant, req.GetId(), sealed, now, now.Add(time.Duration(overlap)*time.Second),
		func(ep *Endpoint) ([]byte, error) {
			return proto.Marshal(&eventsv1.RollWebhookEndpointSecretResponse{Endpoint: withSecret(ep, secret)})
		})
	if errors.Is(err, ErrNotFound) {
		return nil, errEndpointNotFound
	}
	if errors.Is(err, ErrOldSecretLimit) {
		return nil, errOldSecretLimit
	}
	if err != nil {
		return nil, err
	}
	resp := &eventsv1.RollWebhookEndpointSecretResponse{}
	return resp, proto.Unmarshal(raw, resp)
}

func (s *Server) PingWebhookEndpoint(ctx context.Context, req *eventsv1.PingWebhookEndpointRequest) (*eventsv1.PingWebhookEndpointResponse, error) {
	tenant, ep, err := s.endpoint(ctx, req.GetId())
	if err != nil {
		return nil, err
	}
	if !ep.Enabled {
		return nil, errEndpointDisabled
	}
	now := s.now()
	id, body, err := pingEnvelope(ctx, tenant, now)
	if err != nil {
		return nil, err
	}
	if _, err := s.Store.Enqueue(ctx, tenant, ep.ID, id, PingType, body, false, now); errors.Is(err, ErrNotFound) {
		return nil, errEndpointNotFound // deleted meanwhile
	} else if err != nil {
		return nil, err
	}
	s.wake()
	return &eventsv1.PingWebhookEndpointResponse{EventId: id}, nil
}

func (s *Server) wake() {
	if s.Wake != nil {
		s.Wake()
	}
}

func (s *Server) DeleteWebhookEndpoint(ctx context.Context, req *eventsv1.DeleteWebhookEndpointRequest) (*eventsv1.DeleteWebhookEndpointResponse, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.Store.DeleteEndpoint(ctx, tenant, req.GetId()); errors.Is(err, ErrNotFound) {
		return nil, errEndpointNotFound
	} else if err != nil {
		return nil, err
	}
	return &eventsv1.DeleteWebhookEndpointResponse{Id: req.GetId(), Deleted: true}, nil
}

func (s *Server) ListWebhookDeliveries(ctx context.Context, req *eventsv1.ListWebhookDeliveriesRequest) (*eventsv1.ListWebhookDeliveriesResponse, error) {
	f, err := deliveryFilter(req.GetLimit(), req.GetStatus(), req.GetStartingAfter())
	if err != nil {
		return nil, err
	}
	tenant, ep, err := s.endpoint(ctx, req.GetId())
	if err != nil {
		return nil, err
	}
	ds, more, err := s.Store.ListDeliveries(ctx, tenant, req.GetId(), f)
	if errors.Is(err, ErrNotFound) {
		return nil, apierr.Invalid("starting_after must be a delivery of this endpoint")
	}
	if err != nil {
		return nil, err
	}
	out := &eventsv1.ListWebhookDeliveriesResponse{Deliveries: make([]*eventsv1.WebhookDelivery, 0, len(ds)), HasMore: more}
	for i := range ds {
		out.Deliveries = append(out.Deliveries, deliveryPB(&ds[i], ep.Enabled))
	}
	return out, nil
}

// deliveryFilter reads a deliveries list's query (400 naming the field refused).
func deliveryFilter(limit, status, startingAfter string) (DeliveryFilter, error) {
	n, _, err := paging.Parse(limit, "")
	if err != nil {
		return DeliveryFilter{}, err
	}
	switch status {
	case "", StatusPending, StatusSucceeded, StatusFailed:
	default:
		return DeliveryFilter{}, input.NotOneOf("status", StatusPending, StatusSucceeded, StatusFailed)
	}
	return DeliveryFilter{Status: status, StartingAfter: startingAfter, Limit: n}, nil
}

// GetWebhookEndpoint is one of the tenant's endpoints, as listed (never its secret).
func (s *Server) GetWebhookEndpoint(ctx context.Context, req *eventsv1.GetWebhookEndpointRequest) (*eventsv1.GetWebhookEndpointResponse, error) {
	_, ep, err := s.endpoint(ctx, req.GetId())
	if err != nil {
		return nil, err
	}
	return &eventsv1.GetWebhookEndpointResponse{Endpoint: endpointPB(ep)}, nil
}

// endpoint is the caller's tenant and its endpoint id, or 404 Webhook endpoint not found.
func (s *Server) endpoint(ctx context.Context, id string) (string, *Endpoint, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return "", nil, err
	}
	ep, err := s.Store.GetEndpoint(ctx, tenant, id)
	if errors.Is(err, ErrNotFound) {
		return "", nil, errEndpointNotFound
	}
	return tenant, ep, err
}

func (s *Server) RedeliverEvent(ctx context.Context, req *eventsv1.RedeliverEventRequest) (*eventsv1.RedeliverEventResponse, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	if req.GetEndpointId() == "" {
		return nil, apierr.Invalid("endpoint_id is required")
	}
	typ, body, err := s.Store.LoggedEvent(ctx, tenant, req.GetEventId())
	if errors.Is(err, ErrNotFound) {
		return nil, errEventNotFound
	}
	if err != nil {
		return nil, err
	}
	ep, err := s.Store.GetEndpoint(ctx, tenant, req.GetEndpointId())
	if errors.Is(err, ErrNotFound) {
		return nil, errEndpointNotFound
	}
	if err != nil {
		return nil, err
	}
	if !ep.Enabled {
		return nil, errEndpointDisabled
	}
	d, err := s.Store.Enqueue(ctx, tenant, ep.ID, req.GetEventId(), typ, body, true, s.now())
	if errors.Is(err, ErrNotFound) {
		return nil, errEndpointNotFound
	}
	if err != nil {
		return nil, err
	}
	s.wake()
	return &eventsv1.RedeliverEventResponse{Delivery: deliveryPB(d, ep.Enabled)}, nil
}

// ListEventDeliveries is a page of one logged event's deliveries, to every endpoint,
// newest first; an event GET /v1/events/{id} does not find (another tenant's, a ping's)
// is not found here either.
func (s *Server) ListEventDeliveries(ctx context.Context, req *eventsv1.ListEventDeliveriesRequest) (*eventsv1.ListEventDeliveriesResponse, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	f, err := deliveryFilter(req.GetLimit(), req.GetStatus(), req.GetStartingAfter())
	if err != nil {
		return nil, err
	}
	if _, _, err := s.Store.LoggedEvent(ctx, tenant, req.GetEventId()); errors.Is(err, ErrNotFound) {
		return nil, errEventNotFound
	} else if err != nil {
		return nil, err
	}
	ds, more, err := s.Store.ListEventDeliveries(ctx, tenant, req.GetEventId(), f)
	if errors.Is(err, ErrNotFound) {
		return nil, apierr.Invalid("starting_after must be a delivery of this event")
	}
	if err != nil {
		return nil, err
	}
	eps, err := s.Store.ListEndpoints(ctx, tenant)
	if err != nil {
		return nil, err
	}
	enabled := make(map[string]bool, len(eps))
	for _, ep := range eps {
		enabled[ep.ID] = ep.Enabled
	}
	out := &eventsv1.ListEventDeliveriesResponse{Deliveries: make([]*eventsv1.WebhookDelivery, 0, len(ds)), HasMore: more}
	for i := range ds {
		out.Deliveries = append(out.Deliveries, deliveryPB(&ds[i], enabled[ds[i].EndpointID]))
	}
	return out, nil
}

// LoggedEvent returns the type and exact body of an event of the tenant's log: the event
// GET /v1/events/{id} finds, or ErrNotFound. A ping is in no log, so it is not found:
// it goes to the one endpoint it was sent to, and redeliver sends only logged events.
func (s *Store) LoggedEvent(ctx context.Context, tenant, id string) (string, []byte, error) {
	var typ string
	var body []byte
	err := s.db.QueryRow(ctx, `SELECT type, body FROM events WHERE tenant_id = $1 AND id = $2`, tenant, id).Scan(&typ, &body)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil, ErrNotFound
	}
	return typ, body, err
}

func optString(s *string) *wrapperspb.StringValue {
	if s == nil {
		return nil
	}
	return wrapperspb.String(*s)
}

func endpointPB(e *Endpoint) *eventsv1.WebhookEndpoint {
	return &eventsv1.WebhookEndpoint{
		Id: e.ID, Url: e.URL, Events: e.Events, Description: optString(e.Description),
		Enabled: e.Enabled, DisabledReason: optString(e.DisabledReason), CreatedAt: timestamppb.New(e.CreatedAt),
	}
}

func withSecret(e *Endpoint, secret string) *eventsv1.WebhookEndpointWithSecret {
	return &eventsv1.WebhookEndpointWithSecret{
		Id: e.ID, Url: e.URL, Events: e.Events, Description: optString(e.Description),
		Enabled: e.Enabled, DisabledReason: optString(e.DisabledReason), CreatedAt: timestamppb.New(e.CreatedAt),
		Secret: secret,
	}
}

// deliveryPB is a delivery as the routes answer it. A pending delivery of a disabled
// endpoint shows no next attempt: none is made until the endpoint is enabled again, and
// the time it was due (passed, as a rule) would say otherwise.
func deliveryPB(d *Delivery, endpointEnabled bool) *eventsv1.WebhookDelivery {
	out := &eventsv1.WebhookDelivery{
		Id: d.ID, EventId: d.EventID, EndpointId: d.EndpointID, Status: d.Status,
		Attempts: make([]*eventsv1.WebhookAttempt, 0, len(d.Attempts)),
	}
	if d.NextAttemptAt != nil && endpointEnabled {
		out.NextAttemptAt = timestamppb.New(*d.NextAttemptAt)
	}
	for _, a := range d.Attempts {
		pa := &eventsv1.WebhookAttempt{At: timestamppb.New(a.At), Error: optString(a.Error), DurationMs: int32(min(a.DurationMS, 1<<31-1))}
		if a.StatusCode != nil {
			pa.StatusCode = wrapperspb.Int32(int32(*a.StatusCode))
		}
		out.Attempts = append(out.Attempts, pa)
	}
	return out
}
