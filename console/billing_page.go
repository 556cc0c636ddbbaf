package console

import (
	"net/http"

	billingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/billing/v1"
)

type billingData struct {
	S *billingv1.GetBillingStatusResponse
	// Pro is true while the tenant holds a paid subscription.
	Pro bool
	// PastDue is why S.Status is past_due, so the page says what is true of the case:
	// "payment_failed", "unpaid", "paused", or "" (not known: the page says what is true of
	// every past_due case).
	PastDue string
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
	details, err := h.billingDetails.GetBillingDetails(ctx, &billingv1.GetBillingDetailsRequest{})
	if err != nil {
		h.errorPage(w, r, s, asAPIError(err))
		return
	}
	st := details.GetStatus()
	d := &billingData{S: st, Pro: st.GetPlan().GetValue() == "pro", PastDue: pastDueReasons[details.GetPastDueReason()]}
	if limit := st.GetLicenseLimit().GetValue(); limit > 0 {
		d.UsedPercent = min(100, int(100*st.GetLicensesUsed().GetValue()/limit))
	}
	v.Data = d
	h.render(w, code, "billing", v)
}

// pastDueReasons name billing's reasons for the template.
var pastDueReasons = map[billingv1.PastDueReason]string{
	billingv1.PastDueReason_PAST_DUE_REASON_PAYMENT_FAILED: "payment_failed",
	billingv1.PastDueReason_PAST_DUE_REASON_UNPAID:         "unpaid",
	billingv1.PastDueReason_PAST_DUE_REASON_PAUSED:         "paused",
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
