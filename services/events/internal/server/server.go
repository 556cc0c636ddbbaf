// Package server is the events service's gRPC API: the event log (addendum §11).
package server

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/auth"
	"github.com/keyhouse/keyhouse/pkg/events"
	"github.com/keyhouse/keyhouse/pkg/input"
	"github.com/keyhouse/keyhouse/pkg/license"
	"github.com/keyhouse/keyhouse/pkg/paging"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
	eventsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/events/v1"
	"github.com/keyhouse/keyhouse/services/events/internal/store"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
)

// Server implements EventsService.
type Server struct {
	eventsv1.UnimplementedEventsServiceServer
	st *store.Store
}

// New returns the server.
func New(st *store.Store) *Server { return &Server{st: st} }

// Register adds the service to g.
func Register(g *grpc.Server, s *Server) { eventsv1.RegisterEventsServiceServer(g, s) }

var errNotFound = apierr.NotFound("Event not found")

// maxKeyLen bounds the license_key filter: no key is longer, and the value reaches SQL.
const maxKeyLen = 256

// ListEvents is GET /v1/events: the tenant's events, newest first, one page.
func (s *Server) ListEvents(ctx context.Context, req *eventsv1.ListEventsRequest) (*eventsv1.ListEventsResponse, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	f, err := filter(req)
	if err != nil {
		return nil, err
	}
	rows, more, err := s.st.List(ctx, tenant, f)
	if errors.Is(err, store.ErrUnknownCursor) {
		return nil, apierr.Invalid("starting_after must be the id of an event in the log")
	}
	if err != nil {
		return nil, err
	}
	out := &eventsv1.ListEventsResponse{Events: make([]*eventsv1.EventRecord, 0, len(rows)), HasMore: more}
	for _, r := range rows {
		rec, err := record(r)
		if err != nil {
			return nil, err
		}
		out.Events = append(out.Events, rec)
	}
	return out, nil
}

// GetEvent is GET /v1/events/{id}.
func (s *Server) GetEvent(ctx context.Context, req *eventsv1.GetEventRequest) (*eventsv1.GetEventResponse, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	if !events.IsID(req.GetId()) {
		return nil, errNotFound
	}
	r, err := s.st.Get(ctx, tenant, req.GetId())
	if errors.Is(err, store.ErrNotFound) {
		return nil, errNotFound
	}
	if err != nil {
		return nil, err
	}
	rec, err := record(r)
	if err != nil {
		return nil, err
	}
	return &eventsv1.GetEventResponse{Event: rec}, nil
}

// RedactEvents is POST /v1/events/redact: the personal data of one license's events
// replaced with null in the log and in the stored webhook deliveries of them
// (store.Redact). It emits no event. An unknown key redacts nothing: zeros, as the log's
// license_key filter lists nothing for it.
func (s *Server) RedactEvents(ctx context.Context, req *eventsv1.RedactEventsRequest) (*eventsv1.RedactEventsResponse, error) {
	tenant, err := auth.TenantID(ctx)
	if err != nil {
		return nil, err
	}
	k := req.GetLicenseKey()
	if k == "" {
		return nil, apierr.Invalid("license_key is required")
	}
	key, err := licenseKey(k)
	if err != nil {
		return nil, err
	}
	n, err := s.st.Redact(ctx, tenant, key)
	if err != nil {
		return nil, err
	}
	return &eventsv1.RedactEventsResponse{LicenseKey: key, EventsRedacted: int32(n.Events), DeliveriesRedacted: int32(n.Deliveries)}, nil
}

// licenseKey is a license_key parameter as the log stores keys: every spelling that finds
// the license on the other routes (case, dashes, look-alikes) finds its events.
func licenseKey(k string) (string, error) {
	if len(k) > maxKeyLen || pgxx.HasNUL(k) {
		return "", apierr.Invalid("license_key must be a license key")
	}
	key := license.CanonicalKey(k)
	if strings.TrimSpace(key) == "" {
		return "", apierr.Invalid("license_key must be a license key")
	}
	return key, nil
}

// record is a stored event as the routes answer it: the stored JSON, decoded, so the
// REST edge prints those same bytes again. An event stored before created_at had one
// form (events.TimeLayout) is answered in that form.
func record(r store.Event) (*eventsv1.EventRecord, error) {
	rec := &eventsv1.EventRecord{}
	if err := protojson.Unmarshal(r.Body, rec); err != nil {
		return nil, err
	}
	rec.CreatedAt = events.NormalizeTime(rec.CreatedAt)
	return rec, nil
}

// filter checks the query parameters, each refused with a message naming it.
func filter(req *eventsv1.ListEventsRequest) (store.Filter, error) {
	var f store.Filter
	limit, _, err := paging.Parse(req.GetLimit(), "")
	if err != nil {
		return f, err
	}
	f.Limit = limit
	if t := req.GetType(); t != "" {
		if !knownType(t) {
			return f, input.NotOneOf("type", events.LoggedTypeOrPrefix)
		}
		f.Type = t
	}
	if k := req.GetLicenseKey(); k != "" {
		if f.LicenseKey, err = licenseKey(k); err != nil {
			return f, err
		}
	}
	if f.Since, err = parseTime("since", req.GetSince()); err != nil {
		return f, err
	}
	if f.Until, err = parseTime("until", req.GetUntil()); err != nil {
		return f, err
	}
	if a := req.GetStartingAfter(); a != "" {
		if !events.IsID(a) {
			return f, apierr.Invalid("starting_after must be the id of an event in the log")
		}
		f.StartingAfter = a
	}
	return f, nil
}

// knownType: a type of the log, or a prefix of some that ends in "." (as an endpoint's
// events list takes them).
func knownType(t string) bool { return events.IsLoggedTypeOrPrefix(t) }

func parseTime(name, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	t, err := input.ParseRFC3339(v)
	if err != nil {
		return time.Time{}, apierr.Invalid("%s must be an RFC 3339 time", name)
	}
	return t, nil
}
