package console

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	storefrontv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/storefront/v1"
	"google.golang.org/protobuf/types/known/structpb"
)

// deliveryOutcomes are the delivery outcomes (api.md's, then those of the events that
// follow a sale: docs/storefront.md), for the filter.
var deliveryOutcomes = []string{"issued", "processing", "awaiting_payment", "unmapped", "over_quota", "invalid_input", "error",
	"held", "expiry_set", "renewed", "canceled", "revoked_refund", "revoked_dispute", "reactivated", "kept", "ignored"}

type storefrontData struct {
	Webhooks   []*storefrontv1.Webhook
	CanConnect bool
	Mappings   []*storefrontv1.Mapping
	Deliveries []*storefrontv1.Delivery
	Total      int
	Page       int
	Pages      int
	Outcome    string
	Outcomes   []string
	LimitKeys  []string
	Query      url.Values
	// Paid purchases that got no license, shown first with what to do.
	OverQuota, Unmapped int
}

var storefrontNotices = map[string]string{
	"connected":       "Webhook connected. Add its callback URL in Stripe, then save the signing secret Stripe shows.",
	"secret-saved":    "Signing secret saved: the webhook is active.",
	"disabled":        "Webhook disabled.",
	"mapping-added":   "Mapping added.",
	"mapping-deleted": "Mapping deleted.",
}

func (h *Handler) storefrontPage(w http.ResponseWriter, r *http.Request, s *session) {
	v := pageView(s, "Storefront", "storefront")
	v.Notice = storefrontNotices[r.URL.Query().Get("notice")]
	h.showStorefront(w, r, s, v, http.StatusOK)
}

func (h *Handler) showStorefront(w http.ResponseWriter, r *http.Request, s *session, v *view, code int) {
	q := r.URL.Query()
	page, _ := strconv.Atoi(q.Get("page"))
	page = max(page, 1)
	d := &storefrontData{Page: page, Outcome: q.Get("outcome"), Outcomes: deliveryOutcomes, LimitKeys: limitKeys, Query: url.Values{}}
	if d.Outcome != "" {
		d.Query.Set("outcome", d.Outcome)
	}
	v.Data = d
	ctx, cancel := withCredential(r.Context(), s.token)
	defer cancel()
	hooks, err := h.storefront.ListWebhooks(ctx, &storefrontv1.ListWebhooksRequest{})
	if err != nil {
		h.errorPage(w, r, s, asAPIError(err))
		return
	}
	d.Webhooks, d.CanConnect = hooks.GetWebhooks(), true
	for _, wh := range d.Webhooks {
		if wh.GetState() != "disabled" {
			d.CanConnect = false
		}
	}
	maps, err := h.storefront.ListMappings(ctx, &storefrontv1.ListMappingsRequest{})
	if err != nil {
		h.errorPage(w, r, s, asAPIError(err))
		return
	}
	d.Mappings = maps.GetMappings()
	dels, err := h.storefront.ListDeliveries(ctx, &storefrontv1.ListDeliveriesRequest{
		Limit: strconv.Itoa(pageSize), Offset: strconv.Itoa((page - 1) * pageSize), Outcome: d.Outcome,
	})
	if err != nil {
		e := asAPIError(err)
		v.Fields["outcome"] = e.Message
		h.render(w, max(code, e.Status), "storefront", v)
		return
	}
	d.Deliveries, d.Total = dels.GetDeliveries(), int(dels.GetTotal())
	if d.OverQuota, d.Unmapped, err = h.unfulfilled(ctx); err != nil {
		h.errorPage(w, r, s, asAPIError(err))
		return
	}
	d.Pages = max(1, (d.Total+pageSize-1)/pageSize)
	h.render(w, code, "storefront", v)
}

// afterStorefrontForm redirects with a notice, or shows the page again with the API's
// message beside the field it names.
func (h *Handler) afterStorefrontForm(w http.ResponseWriter, r *http.Request, s *session, err error, noticeCode string, fields ...string) {
	if err == nil {
		http.Redirect(w, r, "/console/storefront?notice="+noticeCode, http.StatusSeeOther)
		return
	}
	if isUnauthenticated(err) {
		h.clearSession(w)
		h.toLogin(w, r, "expired")
		return
	}
	v := pageView(s, "Storefront", "storefront")
	v.Form = r.PostForm
	code := placeError(v, err, fields...)
	h.showStorefront(w, r, s, v, code)
}

func (h *Handler) connectWebhook(w http.ResponseWriter, r *http.Request, s *session) {
	ctx, cancel := withCredential(r.Context(), s.token)
	defer cancel()
	_, err := h.storefront.ConnectWebhook(ctx, &storefrontv1.ConnectWebhookRequest{Provider: "stripe"})
	h.afterStorefrontForm(w, r, s, err, "connected")
}

func (h *Handler) saveWebhookSecret(w http.ResponseWriter, r *http.Request, s *session) {
	ctx, cancel := withCredential(r.Context(), s.token)
	defer cancel()
	_, err := h.storefront.SaveWebhookSecret(ctx, &storefrontv1.SaveWebhookSecretRequest{
		WebhookId: r.PathValue("id"), SigningSecret: strings.TrimSpace(r.PostForm.Get("signing_secret")),
	})
	h.afterStorefrontForm(w, r, s, err, "secret-saved", "signing_secret")
}

func (h *Handler) disableWebhook(w http.ResponseWriter, r *http.Request, s *session) {
	ctx, cancel := withCredential(r.Context(), s.token)
	defer cancel()
	_, err := h.storefront.DisableWebhook(ctx, &storefrontv1.DisableWebhookRequest{WebhookId: r.PathValue("id")})
	h.afterStorefrontForm(w, r, s, err, "disabled")
}

var mappingFields = []string{"payment_link", "service_ref", "product_id", "tier", "seats", "duration_days", "renewal_grace_days", "on_refund", "limits"}

func (h *Handler) createMapping(w http.ResponseWriter, r *http.Request, s *session) {
	f := r.PostForm
	v := pageView(s, "Storefront", "storefront")
	v.Form = f
	limits, ok := limitsValue(f, v)
	if !ok {
		h.showStorefront(w, r, s, v, http.StatusBadRequest)
		return
	}
	req := &storefrontv1.CreateMappingRequest{
		ProductId: strings.TrimSpace(f.Get("product_id")), Tier: strings.TrimSpace(f.Get("tier")), Limits: limits,
	}
	ref := strings.TrimSpace(f.Get("reference"))
	if f.Get("kind") == "service_ref" {
		req.ServiceRef = ref
	} else {
		req.PaymentLink = ref
	}
	if seats := strings.TrimSpace(f.Get("seats")); seats != "" {
		req.Seats = capValue(seats)
	}
	if days := strings.TrimSpace(f.Get("duration_days")); days != "" {
		req.DurationDays = capValue(days)
	}
	if grace := strings.TrimSpace(f.Get("renewal_grace_days")); grace != "" {
		req.RenewalGraceDays = capValue(grace)
	}
	req.OnRefund = f.Get("on_refund")
	if len(limits.GetFields()) == 0 {
		req.Limits = &structpb.Struct{Fields: map[string]*structpb.Value{}}
	}
	ctx, cancel := withCredential(r.Context(), s.token)
	defer cancel()
	_, err := h.storefront.CreateMapping(ctx, req)
	if err != nil && (strings.Contains(err.Error(), "payment_link") || strings.Contains(err.Error(), "service_ref")) {
		// Both name the one reference input.
		v.Fields["reference"] = asAPIError(err).Message
		h.showStorefront(w, r, s, v, asAPIError(err).Status)
		return
	}
	h.afterStorefrontForm(w, r, s, err, "mapping-added", mappingFields...)
}

func (h *Handler) deleteMapping(w http.ResponseWriter, r *http.Request, s *session) {
	ctx, cancel := withCredential(r.Context(), s.token)
	defer cancel()
	_, err := h.storefront.DeleteMapping(ctx, &storefrontv1.DeleteMappingRequest{Id: r.PathValue("id")})
	h.afterStorefrontForm(w, r, s, err, "mapping-deleted")
}

// unfulfilled counts the deliveries of paid purchases that got no license and wait for
// the vendor: over the plan's quota, or matching no mapping.
func (h *Handler) unfulfilled(ctx context.Context) (overQuota, unmapped int, err error) {
	count := func(outcome string) (int, error) {
		resp, err := h.storefront.ListDeliveries(ctx, &storefrontv1.ListDeliveriesRequest{Limit: "1", Outcome: outcome})
		return int(resp.GetTotal()), err
	}
	if overQuota, err = count("over_quota"); err != nil {
		return 0, 0, err
	}
	unmapped, err = count("unmapped")
	return overQuota, unmapped, err
}
