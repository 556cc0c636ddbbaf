package console

import (
	"net/http"

	billingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/billing/v1"
)

type billingData struct {
	S *billingv1.GetBillingStatusResponse
	// Pro is true while the tenant holds a paid subscription.
	Pro bool
	// UsedPercent fills the quota bar.
	UsedPercent int
}

func (h *Handler) billingPage(w http.ResponseWriter, r *http.Request, s *session) {
	v := pageView(s, "Billing", "billing")
	v.Notice = notice(r)
	h.showBilling(w, r, s, v, http.StatusOK)
}

func (h *Handler) showBilling(w http.ResponseWriter, r *http.Request, s *session, v *view, code int) {
	ctx, cancel := withCredential(r.Context(), s.token)
	defer cancel()
	st, err := h.billing.GetBillingStatus(ctx, &billingv1.GetBillingStatusRequest{})
	if err != nil {
		h.errorPage(w, r, s, asAPIError(err))
		return
	}
	d := &billingData{S: st, Pro: st.GetPlan().GetValue() == "pro"}
	if limit := st.GetLicenseLimit().GetValue(); limit > 0 {
		d.UsedPercent = min(100, int(100*st.GetLicensesUsed().GetValue()/limit))
	}
	v.Data = d
	h.render(w, code, "billing", v)
}

// checkout sends the person to Stripe: Checkout to upgrade, the Billing Portal to manage
// or cancel a subscription (what POST /v1/billing/checkout answers).
func (h *Handler) checkout(w http.ResponseWriter, r *http.Request, s *session) {
	ctx, cancel := withCredential(r.Context(), s.token)
	defer cancel()
	resp, err := h.billing.CreateCheckout(ctx, &billingv1.CreateCheckoutRequest{Plan: r.PostForm.Get("plan"), Interval: r.PostForm.Get("interval")})
	if err != nil {
		v := pageView(s, "Billing", "billing")
		v.Form = r.PostForm
		code := v.showError(err, "interval")
		h.showBilling(w, r, s, v, code)
		return
	}
	http.Redirect(w, r, resp.GetUrl(), http.StatusSeeOther)
}
