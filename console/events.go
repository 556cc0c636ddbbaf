package console

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	eventsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/events/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// The Events pages (addendum §11): the tenant's event log with its filters, and one
// event's JSON with its webhook deliveries.

type eventsData struct {
	Events  []*eventsv1.EventRecord
	HasMore bool
	After   string
	Query   url.Values
}

type eventData struct {
	Event      *eventsv1.EventRecord
	JSON       string
	Deliveries []*eventsv1.WebhookDelivery
	Endpoints  []*eventsv1.WebhookEndpoint
}

// eventFilters are the log's filters, as the form names them (the API's parameters).
var eventFilters = []string{"type", "license_key", "since", "until"}

func (h *Handler) eventsPage(w http.ResponseWriter, r *http.Request, s *session) {
	v := pageView(s, "Events", "events")
	q := r.URL.Query()
	d := &eventsData{Query: url.Values{}}
	req := &eventsv1.ListEventsRequest{Limit: strconv.Itoa(pageSize), StartingAfter: q.Get("starting_after")}
	for _, f := range eventFilters {
		val := strings.TrimSpace(q.Get(f))
		v.Form.Set(f, val)
		if val != "" {
			d.Query.Set(f, val)
		}
	}
	req.Type, req.LicenseKey, req.Since, req.Until = d.Query.Get("type"), d.Query.Get("license_key"), d.Query.Get("since"), d.Query.Get("until")
	v.Data = d
	ctx, cancel := withCredential(r.Context(), s.token)
	defer cancel()
	resp, err := h.events.ListEvents(ctx, req)
	if err != nil {
		if h.sessionEnded(w, r, err) {
			return
		}
		code := v.showError(err, eventFilters...)
		h.render(w, code, "events", v)
		return
	}
	d.Events, d.HasMore = resp.GetEvents(), resp.GetHasMore()
	if d.HasMore && len(d.Events) > 0 {
		d.After = d.Events[len(d.Events)-1].GetId()
	}
	h.render(w, http.StatusOK, "events", v)
}

// eventJSON prints an event as the API and a webhook delivery show it. protojson varies
// its spacing from build to build, so the page indents the compact form itself.
var eventJSON = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}

func indentedEventJSON(ev *eventsv1.EventRecord) string {
	b, err := eventJSON.Marshal(ev)
	if err != nil {
		return ""
	}
	var compact, out bytes.Buffer
	if json.Compact(&compact, b) != nil || json.Indent(&out, compact.Bytes(), "", "  ") != nil {
		return string(b)
	}
	return out.String()
}

func (h *Handler) eventPage(w http.ResponseWriter, r *http.Request, s *session) {
	v := pageView(s, "Event", "events")
	v.Notice = webhookNotices[r.URL.Query().Get("notice")]
	ctx, cancel := withCredential(r.Context(), s.token)
	defer cancel()
	id := r.PathValue("id")
	resp, err := h.events.GetEvent(ctx, &eventsv1.GetEventRequest{Id: id})
	if err != nil {
		if h.sessionEnded(w, r, err) {
			return
		}
		h.errorPage(w, r, s, asAPIError(err))
		return
	}
	d := &eventData{Event: resp.GetEvent()}
	d.JSON = indentedEventJSON(d.Event)
	// One delivery per endpoint (at most 16) and its redeliveries: the largest page holds
	// them all. The page lists them oldest first.
	dels, err := h.webhooks.ListEventDeliveries(ctx, &eventsv1.ListEventDeliveriesRequest{EventId: id, Limit: "1000"})
	if err != nil {
		h.errorPage(w, r, s, asAPIError(err))
		return
	}
	d.Deliveries = dels.GetDeliveries()
	slices.Reverse(d.Deliveries)
	eps, err := h.webhooks.ListWebhookEndpoints(ctx, &eventsv1.ListWebhookEndpointsRequest{})
	if err != nil {
		h.errorPage(w, r, s, asAPIError(err))
		return
	}
	for _, ep := range eps.GetEndpoints() {
		if ep.GetEnabled() {
			d.Endpoints = append(d.Endpoints, ep)
		}
	}
	v.Data = d
	h.render(w, http.StatusOK, "event", v)
}

// redeliverFromEvent sends a logged event to the endpoint chosen on the event's page.
func (h *Handler) redeliverFromEvent(w http.ResponseWriter, r *http.Request, s *session) {
	ctx, cancel := withCredential(r.Context(), s.token)
	defer cancel()
	id := r.PathValue("id")
	_, err := h.webhooks.RedeliverEvent(ctx, &eventsv1.RedeliverEventRequest{EventId: id, EndpointId: r.PostForm.Get("endpoint_id")})
	if err != nil {
		if h.sessionEnded(w, r, err) {
			return
		}
		h.errorPage(w, r, s, asAPIError(err))
		return
	}
	http.Redirect(w, r, "/console/events/"+url.PathEscape(id)+"?notice=redelivered", http.StatusSeeOther)
}
