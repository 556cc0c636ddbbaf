package console

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"

	eventsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/events/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The Webhooks pages (addendum §11): the tenant's outbound endpoints, each with its
// deliveries and their attempts; create (the secret shown once), roll, ping, enable,
// disable, delete, redeliver.

type webhooksData struct {
	Endpoints []*eventsv1.WebhookEndpoint
}

type webhookData struct {
	Endpoint   *eventsv1.WebhookEndpoint
	Deliveries []*eventsv1.WebhookDelivery
	HasMore    bool
	Status     string
	Statuses   []string
	Query      url.Values
	// After is the starting_after of the next page.
	After string
	// ConfirmDelete asks before the endpoint is deleted.
	ConfirmDelete bool
}

// secretData is the page that shows a new secret, once.
type secretData struct {
	Endpoint *eventsv1.WebhookEndpointWithSecret
	Rolled   bool
}

var webhookNotices = map[string]string{
	"pinged":      "Ping sent: it shows below as the newest delivery.",
	"enabled":     "Endpoint enabled.",
	"disabled":    "Endpoint disabled: it receives nothing until you enable it again.",
	"redelivered": "Redelivery queued: it shows below as the newest delivery.",
	"not-in-log":  "That event is not in the event log (a ping, or an event older than the log's retention), so it cannot be redelivered: nothing was sent. Send a new ping instead.",
	"deleted":     "Endpoint deleted.",
	"updated":     "Endpoint updated.",
}

var deliveryStatuses = []string{"pending", "succeeded", "failed"}

func (h *Handler) webhooksPage(w http.ResponseWriter, r *http.Request, s *session) {
	v := pageView(s, "Webhooks", "webhooks")
	v.Notice = webhookNotices[r.URL.Query().Get("notice")]
	h.showWebhooks(w, r, s, v, http.StatusOK)
}

func (h *Handler) showWebhooks(w http.ResponseWriter, r *http.Request, s *session, v *view, code int) {
	ctx, cancel := withCredential(r.Context(), s.token)
	defer cancel()
	list, err := h.webhooks.ListWebhookEndpoints(ctx, &eventsv1.ListWebhookEndpointsRequest{})
	if err != nil {
		h.errorPage(w, r, s, asAPIError(err))
		return
	}
	v.Data = &webhooksData{Endpoints: list.GetEndpoints()}
	h.render(w, code, "webhooks", v)
}

// subscriptions reads the events field: "*" or types and prefixes separated by commas,
// spaces or new lines.
func subscriptions(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\r' || r == '\t' })
}

func (h *Handler) createWebhookEndpoint(w http.ResponseWriter, r *http.Request, s *session) {
	req := &eventsv1.CreateWebhookEndpointRequest{
		Url:    strings.TrimSpace(r.PostForm.Get("url")),
		Events: subscriptions(r.PostForm.Get("events")),
	}
	if d := strings.TrimSpace(r.PostForm.Get("description")); d != "" {
		req.Description = wrapperspb.String(d)
	}
	ctx, cancel := withCredential(r.Context(), s.token)
	defer cancel()
	resp, err := h.webhooks.CreateWebhookEndpoint(ctx, req)
	if err != nil {
		if h.sessionEnded(w, r, err) {
			return
		}
		v := pageView(s, "Webhooks", "webhooks")
		v.Form = r.PostForm
		code := v.showError(err, "url", "events", "description")
		h.showWebhooks(w, r, s, v, code)
		return
	}
	v := pageView(s, "Webhook secret", "webhooks")
	v.Data = &secretData{Endpoint: resp.GetEndpoint()}
	h.render(w, http.StatusOK, "webhook_secret", v)
}

// sessionEnded sends a person whose session died to the sign-in page.
func (h *Handler) sessionEnded(w http.ResponseWriter, r *http.Request, err error) bool {
	if !isUnauthenticated(err) {
		return false
	}
	h.clearSession(w)
	h.toLogin(w, r, "expired")
	return true
}

func (h *Handler) webhookPage(w http.ResponseWriter, r *http.Request, s *session) {
	v := pageView(s, "Webhook endpoint", "webhooks")
	v.Notice = webhookNotices[r.URL.Query().Get("notice")]
	if n := r.URL.Query().Get("notice"); n == "redelivered" || n == "not-in-log" {
		v.NoticeIn = "deliveries" // the Redeliver buttons are there
	}
	h.showWebhook(w, r, s, v, http.StatusOK, nil)
}

// showWebhook renders the endpoint's page; decorate, when given, adds to its data (a
// question to confirm).
func (h *Handler) showWebhook(w http.ResponseWriter, r *http.Request, s *session, v *view, code int, decorate func(*webhookData)) {
	id := r.PathValue("id")
	q := r.URL.Query()
	d := &webhookData{Status: q.Get("status"), Statuses: deliveryStatuses, Query: url.Values{}}
	if d.Status != "" {
		d.Query.Set("status", d.Status)
	}
	ctx, cancel := withCredential(r.Context(), s.token)
	defer cancel()
	list, err := h.webhooks.ListWebhookEndpoints(ctx, &eventsv1.ListWebhookEndpointsRequest{})
	if err != nil {
		h.errorPage(w, r, s, asAPIError(err))
		return
	}
	for _, ep := range list.GetEndpoints() {
		if ep.GetId() == id {
			d.Endpoint = ep
		}
	}
	if d.Endpoint == nil {
		h.errorPage(w, r, s, &apiError{Status: http.StatusNotFound, Message: "Webhook endpoint not found"})
		return
	}
	if decorate != nil {
		decorate(d)
	}
	v.Data = d
	dels, err := h.webhooks.ListWebhookDeliveries(ctx, &eventsv1.ListWebhookDeliveriesRequest{
		Id: id, Limit: strconv.Itoa(pageSize), StartingAfter: q.Get("starting_after"), Status: d.Status,
	})
	if err != nil {
		e := asAPIError(err)
		v.Fields["status"] = e.Message
		h.render(w, max(code, e.Status), "webhook", v)
		return
	}
	d.Deliveries, d.HasMore = dels.GetDeliveries(), dels.GetHasMore()
	if d.HasMore && len(d.Deliveries) > 0 {
		d.After = d.Deliveries[len(d.Deliveries)-1].GetId()
	}
	h.render(w, code, "webhook", v)
}

// afterWebhookForm redirects to the endpoint's page with a notice, or shows it again with
// the API's message.
func (h *Handler) afterWebhookForm(w http.ResponseWriter, r *http.Request, s *session, err error, notice string, fields ...string) {
	if err == nil {
		http.Redirect(w, r, "/console/webhooks/"+url.PathEscape(r.PathValue("id"))+"?notice="+notice, http.StatusSeeOther)
		return
	}
	if h.sessionEnded(w, r, err) {
		return
	}
	v := pageView(s, "Webhook endpoint", "webhooks")
	v.Form = r.PostForm
	code := v.showError(err, fields...)
	if code == http.StatusNotFound {
		h.errorPage(w, r, s, asAPIError(err))
		return
	}
	h.showWebhook(w, r, s, v, code, nil)
}

func (h *Handler) pingWebhookEndpoint(w http.ResponseWriter, r *http.Request, s *session) {
	ctx, cancel := withCredential(r.Context(), s.token)
	defer cancel()
	_, err := h.webhooks.PingWebhookEndpoint(ctx, &eventsv1.PingWebhookEndpointRequest{Id: r.PathValue("id")})
	h.afterWebhookForm(w, r, s, err, "pinged")
}

func (h *Handler) setWebhookEndpointEnabled(on bool) func(http.ResponseWriter, *http.Request, *session) {
	notice := map[bool]string{true: "enabled", false: "disabled"}[on]
	return func(w http.ResponseWriter, r *http.Request, s *session) {
		ctx, cancel := withCredential(r.Context(), s.token)
		defer cancel()
		_, err := h.webhooks.UpdateWebhookEndpoint(ctx, &eventsv1.UpdateWebhookEndpointRequest{Id: r.PathValue("id"), Enabled: wrapperspb.Bool(on)})
		h.afterWebhookForm(w, r, s, err, notice)
	}
}

func (h *Handler) updateWebhookEndpoint(w http.ResponseWriter, r *http.Request, s *session) {
	subs := subscriptions(r.PostForm.Get("events"))
	vals := make([]any, len(subs))
	for i, e := range subs {
		vals[i] = e
	}
	events, _ := structpb.NewList(vals)
	ctx, cancel := withCredential(r.Context(), s.token)
	defer cancel()
	_, err := h.webhooks.UpdateWebhookEndpoint(ctx, &eventsv1.UpdateWebhookEndpointRequest{
		Id:          r.PathValue("id"),
		Url:         wrapperspb.String(strings.TrimSpace(r.PostForm.Get("url"))),
		Events:      events,
		Description: wrapperspb.String(strings.TrimSpace(r.PostForm.Get("description"))),
	})
	h.afterWebhookForm(w, r, s, err, "updated", "url", "events", "description")
}

func (h *Handler) rollWebhookSecret(w http.ResponseWriter, r *http.Request, s *session) {
	req := &eventsv1.RollWebhookEndpointSecretRequest{Id: r.PathValue("id")}
	if raw := strings.TrimSpace(r.PostForm.Get("expire_old_after_hours")); raw != "" {
		hours, err := strconv.ParseFloat(raw, 64)
		if err != nil || hours < 0 || hours > 168 {
			v := pageView(s, "Webhook endpoint", "webhooks")
			v.Form = r.PostForm
			v.Fields["expire_old_after_hours"] = "Keep the old secret between 0 and 168 hours"
			h.showWebhook(w, r, s, v, http.StatusBadRequest, nil)
			return
		}
		req.ExpireOldAfterSeconds = wrapperspb.Int64(int64(hours * 3600))
	}
	ctx, cancel := withCredential(r.Context(), s.token)
	defer cancel()
	resp, err := h.webhooks.RollWebhookEndpointSecret(ctx, req)
	if err != nil {
		h.afterWebhookForm(w, r, s, err, "", "expire_old_after_hours")
		return
	}
	v := pageView(s, "Webhook secret", "webhooks")
	v.Data = &secretData{Endpoint: resp.GetEndpoint(), Rolled: true}
	h.render(w, http.StatusOK, "webhook_secret", v)
}

func (h *Handler) deleteWebhookEndpointPage(w http.ResponseWriter, r *http.Request, s *session) {
	v := pageView(s, "Delete webhook endpoint", "webhooks")
	h.showWebhook(w, r, s, v, http.StatusOK, func(d *webhookData) { d.ConfirmDelete = true })
}

// deleteWebhookEndpoint deletes once confirmed; a post without the confirmation asks.
func (h *Handler) deleteWebhookEndpoint(w http.ResponseWriter, r *http.Request, s *session) {
	if !confirmed(r) {
		h.deleteWebhookEndpointPage(w, r, s)
		return
	}
	ctx, cancel := withCredential(r.Context(), s.token)
	defer cancel()
	_, err := h.webhooks.DeleteWebhookEndpoint(ctx, &eventsv1.DeleteWebhookEndpointRequest{Id: r.PathValue("id")})
	if err == nil {
		http.Redirect(w, r, "/console/webhooks?notice=deleted", http.StatusSeeOther)
		return
	}
	h.afterWebhookForm(w, r, s, err, "")
}

func (h *Handler) redeliverEvent(w http.ResponseWriter, r *http.Request, s *session) {
	ctx, cancel := withCredential(r.Context(), s.token)
	defer cancel()
	_, err := h.webhooks.RedeliverEvent(ctx, &eventsv1.RedeliverEventRequest{EventId: r.PostForm.Get("event_id"), EndpointId: r.PathValue("id")})
	if st := status.Convert(err); st.Code() == codes.NotFound && st.Message() == "Event not found" {
		// The endpoint's own page lists deliveries of pings and of events the log has
		// since dropped; redeliver takes only events in the log. Say so there, rather
		// than a 404 page for a button the page itself offered.
		http.Redirect(w, r, "/console/webhooks/"+url.PathEscape(r.PathValue("id"))+"?notice=not-in-log", http.StatusSeeOther)
		return
	}
	h.afterWebhookForm(w, r, s, err, "redelivered")
}
