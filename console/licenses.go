package console

import (
	"context"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/keyhouse/keyhouse/pkg/idempotency"
	"github.com/keyhouse/keyhouse/pkg/license"
	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	eventsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/events/v1"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"
)

// pageSize is how many licenses a list page shows.
const pageSize = 50

// notices are the one-line confirmations a redirect after a form shows (?notice=…).
var notices = map[string]string{
	"issued":              "License issued.",
	"revoked":             "License revoked.",
	"reactivated":         "License reactivated.",
	"terms":               "Terms saved.",
	"notes":               "Notes saved.",
	"seat-deactivated":    "Seat deactivated.",
	"usage-reset":         "Usage reset.",
	"portal-reset":        "A new portal link was made; the old one no longer works.",
	"deleted":             "License deleted.",
	"release-registered":  "Release registered.",
	"release-unpublished": "Release unpublished.",
	"policy-saved":        "Lease policy saved; it applies from each seat's next lease.",
	"policy-deleted":      "Lease policy deleted.",
	"lease-key-rotated":   "A new lease key signs from now on; the old one verifies until its date.",
	"password-set":        "Password saved.",
	"mail-saved":          "Buyer email settings saved.",
	"portal-on":           "The end-user portal is on.",
	"portal-off":          "The end-user portal is off: every portal link answers 404.",
	// Stripe Checkout sends the person back to the Billing page with one of these.
	"checkout-paid":     "Payment received. Pro starts when Stripe confirms the subscription, usually within seconds: reload this page if it still shows Free.",
	"checkout-canceled": "Checkout canceled: nothing was charged and the plan is unchanged.",
}

func notice(r *http.Request) string { return notices[r.URL.Query().Get("notice")] }

// licenseNoticeSections places the license page's notices in the section whose form
// was used, so the page opens there (the notice takes the focus).
var licenseNoticeSections = map[string]string{
	"terms": "terms", "notes": "notes", "seat-deactivated": "seats", "usage-reset": "usage", "portal-reset": "portal",
}

// limitKeys is api.md's allowlist, sorted, for the limits inputs.
var limitKeys = func() []string {
	out := make([]string, 0, len(license.LimitKeys))
	for k := range license.LimitKeys {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}()

type licensesData struct {
	Licenses []*licensingv1.LicenseRow
	offsetPager
	Now time.Time
}

// licensesPage lists, searches and filters the tenant's licenses, 50 a page.
func (h *Handler) licensesPage(w http.ResponseWriter, r *http.Request, s *session) {
	v := pageView(s, "Licenses", "licenses")
	v.Notice = notice(r)
	q := r.URL.Query()
	filters := url.Values{}
	for _, k := range []string{"key", "issued_to", "status", "product_id", "expiring_within_days"} {
		if val := strings.TrimSpace(q.Get(k)); val != "" {
			filters.Set(k, val)
		}
	}
	v.Form = filters
	page, _ := strconv.Atoi(q.Get("page"))
	page = max(page, 1)
	d := &licensesData{Now: h.opts.Now()}
	v.Data = d
	ctx, cancel := withCredential(r.Context(), s.token)
	defer cancel()
	resp, err := h.licensing.ListLicenses(ctx, &licensingv1.ListLicensesRequest{
		Key: filters.Get("key"), IssuedTo: filters.Get("issued_to"), Status: optional(filters.Get("status")), ProductId: filters.Get("product_id"),
		ExpiringWithinDays: filters.Get("expiring_within_days"), Limit: strconv.Itoa(pageSize), Offset: strconv.Itoa((page - 1) * pageSize),
	})
	// The pager is placed once, from the answer. A refused call has none (resp is nil, its
	// getters zero): the page shows the error above an empty list and its pager.
	d.Licenses = resp.GetLicenses()
	d.offsetPager = newOffsetPager("/console/licenses", "licenses", filters, page, int(resp.GetTotal()), len(d.Licenses))
	if err != nil {
		code := v.showError(err, "key", "issued_to", "status", "product_id", "expiring_within_days")
		h.render(w, code, "licenses", v)
		return
	}
	h.render(w, http.StatusOK, "licenses", v)
}

type licenseFormData struct {
	LimitKeys      []string
	IdempotencyKey string
}

func (h *Handler) newLicensePage(w http.ResponseWriter, r *http.Request, s *session) {
	v := pageView(s, "Issue a license", "licenses")
	v.Form.Set("max_activations", "1")
	v.Data = &licenseFormData{LimitKeys: limitKeys, IdempotencyKey: randomToken()}
	h.render(w, http.StatusOK, "license_new", v)
}

// expiresValue turns the form's date (or empty) into the API's expires_at: the end of
// that day, UTC; perpetual when empty.
func expiresValue(date string) *structpb.Value {
	date = strings.TrimSpace(date)
	if date == "" {
		return structpb.NewNullValue()
	}
	if t, err := time.Parse("2006-01-02", date); err == nil {
		return structpb.NewStringValue(t.Add(24*time.Hour - time.Second).Format(time.RFC3339))
	}
	// Anything else goes to the API as typed, which names the problem.
	return structpb.NewStringValue(date)
}

// capValue turns the form's max activations into the API's value: empty is unlimited.
func capValue(s string) *structpb.Value {
	s = strings.TrimSpace(s)
	if s == "" {
		return structpb.NewNullValue()
	}
	if n, err := strconv.ParseFloat(s, 64); err == nil {
		return structpb.NewNumberValue(n)
	}
	return structpb.NewStringValue(s)
}

// limitsValue reads the limit_<key> inputs; a value that is not a number is reported
// beside its field.
func limitsValue(form url.Values, v *view) (*structpb.Struct, bool) {
	out := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	ok := true
	for _, k := range limitKeys {
		raw := strings.TrimSpace(form.Get("limit_" + k))
		if raw == "" {
			continue
		}
		n, err := strconv.ParseFloat(raw, 64)
		if err != nil {
			v.Fields["limit_"+k] = "must be a number"
			ok = false
			continue
		}
		out.Fields[k] = structpb.NewNumberValue(n)
	}
	return out, ok
}

var licenseFields = []string{"tier", "product_id", "issued_to", "expires_at", "max_activations", "limits", "notes"}

// placeError shows an API error beside its field; a message about one limit key
// ("limits.seats must be …", "Unknown limit key: x") goes beside that key's input, or
// above the limits when the key has none.
func placeError(v *view, err error, fields ...string) int {
	e := asAPIError(err)
	for _, k := range limitKeys {
		if strings.Contains(e.Message, "limits."+k+" ") || strings.HasSuffix(e.Message, ": "+k) {
			v.Fields["limit_"+k] = e.Message
			return e.Status
		}
	}
	if strings.HasPrefix(e.Message, "Unknown limit key") || strings.HasPrefix(e.Message, "limits") {
		v.Fields["limits"] = e.Message
		return e.Status
	}
	return v.showError(err, fields...)
}

func (h *Handler) issueLicense(w http.ResponseWriter, r *http.Request, s *session) {
	v := pageView(s, "Issue a license", "licenses")
	f := r.PostForm
	v.Form = f
	v.Data = &licenseFormData{LimitKeys: limitKeys, IdempotencyKey: f.Get("idempotency_key")}
	limits, ok := limitsValue(f, v)
	// The API names one missing field at a time; the form names them all, in its words.
	for _, name := range []string{"product_id", "tier", "issued_to"} {
		if strings.TrimSpace(f.Get(name)) == "" {
			v.Fields[name] = name + " is required"
			ok = false
		}
	}
	if !ok {
		h.render(w, http.StatusBadRequest, "license_new", v)
		return
	}
	req := &licensingv1.IssueLicenseRequest{
		Tier: strings.TrimSpace(f.Get("tier")), ProductId: strings.TrimSpace(f.Get("product_id")),
		IssuedTo: strings.TrimSpace(f.Get("issued_to")), ExpiresAt: expiresValue(f.Get("expires_at")),
		Limits: limits,
	}
	switch {
	case f.Get("unlimited") != "":
		req.MaxActivations = structpb.NewNullValue()
	case strings.TrimSpace(f.Get("max_activations")) != "":
		req.MaxActivations = capValue(f.Get("max_activations"))
	}
	if notes := f.Get("notes"); notes != "" {
		req.Notes = structpb.NewStringValue(notes)
	}
	ctx, cancel := withCredential(r.Context(), s.token)
	defer cancel()
	if k := f.Get("idempotency_key"); k != "" {
		// A double-clicked or resubmitted form issues one license.
		ctx = metadata.AppendToOutgoingContext(ctx, idempotency.Header, k)
	}
	resp, err := h.licensing.IssueLicense(ctx, req)
	if err != nil {
		code := placeError(v, err, licenseFields...)
		h.render(w, code, "license_new", v)
		return
	}
	http.Redirect(w, r, "/console/licenses/"+url.PathEscape(resp.GetKey())+"?notice=issued", http.StatusSeeOther)
}

type usageRow struct {
	Metric      string
	Used, Limit float64
	HasLimit    bool
	Exceeded    bool
}

type licenseData struct {
	L       *licensingv1.GetLicenseDetailsResponse
	Seats   []*activationsv1.Activation
	Usage   []usageRow
	Portal  *licensingv1.PortalLink
	Expired bool
	// RevokedBy says what revoked a revoked license ("" when the event log does not say).
	RevokedBy string
	LimitKeys []string
	Limits    map[string]string
	Expires   string
	// Leases are the seats' lease states by instance_id (floating lease end, binding).
	Leases map[string]*activationsv1.SeatLease
	// NewToken is a reissued activation token, shown once.
	NewToken, NewTokenInstance string
	Delete                     bool
	// Confirm asks before a revocation ("revoke"), a seat deactivation ("deactivate", of
	// ConfirmInstance) or a usage reset ("reset-usage", of ConfirmMetric; "" is every
	// metric): the button on the license page only leads here.
	Confirm, ConfirmInstance, ConfirmMetric string
}

// confirmed reports whether a destructive form came from its confirmation step, which
// works without JavaScript: a plain page with the one button that acts.
func confirmed(r *http.Request) bool { return r.PostForm.Get("confirm") == "yes" }

func (h *Handler) loadLicense(ctx context.Context, key string) (*licenseData, error) {
	l, err := h.licensing.GetLicenseDetails(ctx, &licensingv1.GetLicenseDetailsRequest{Key: key})
	if err != nil {
		return nil, err
	}
	d := &licenseData{L: l, LimitKeys: limitKeys, Limits: map[string]string{}}
	if l.GetExpiresAt() != nil {
		d.Expires = l.GetExpiresAt().AsTime().UTC().Format("2006-01-02")
		d.Expired = !time.Now().Before(l.GetExpiresAt().AsTime())
	}
	limits := l.GetLimits().AsMap()
	for _, k := range limitKeys {
		n, ok := limits[k].(float64)
		if ok {
			d.Limits[k] = formatNumber(n)
		}
		used, counted := l.GetUsage()[k]
		if ok || counted {
			d.Usage = append(d.Usage, usageRow{Metric: k, Used: used, Limit: n, HasLimit: ok, Exceeded: ok && used > n})
		}
	}
	acts, err := h.activations.ListActivations(ctx, &activationsv1.ListActivationsRequest{Key: l.GetKey()})
	if err != nil {
		return nil, err
	}
	d.Seats = acts.GetActivations()
	leases, err := h.leases.ListSeatLeases(ctx, &activationsv1.ListSeatLeasesRequest{Key: l.GetKey()})
	if err != nil {
		return nil, err
	}
	d.Leases = leasesByInstance(leases.GetSeats())
	link, err := h.portal.GetPortalLink(ctx, &licensingv1.GetPortalLinkRequest{Key: l.GetKey()})
	if err != nil {
		return nil, err
	}
	d.Portal = link.GetLink()
	if l.GetStatus() == "revoked" {
		d.RevokedBy = h.revokedBy(ctx, l.GetKey())
	}
	return d, nil
}

// revokedBy reads why a license was revoked from the event log, since licensing keeps
// only when: the latest license.revoked names its actor, and a revocation by the
// storefront is the refund or dispute of the latest delivery that revoked it. The page
// shows without it when the log cannot say (the event is older than EVENT_RETENTION,
// not ingested yet, or the events service is down).
func (h *Handler) revokedBy(ctx context.Context, key string) string {
	revoked, err := h.events.ListEvents(ctx, &eventsv1.ListEventsRequest{LicenseKey: key, Type: "license.revoked", Limit: "1"})
	if err != nil || len(revoked.GetEvents()) == 0 {
		return ""
	}
	// The actor types of docs/events.md (pkg/events' Actor* constants; the console module
	// does not link pkg/events and its NATS client for four words).
	switch revoked.GetEvents()[0].GetActor().GetType() {
	case "console":
		return "revoked in the console"
	case "admin":
		return "revoked through the API with the admin key"
	case "api_key":
		return "revoked through the API with an API key"
	case "storefront":
		deliveries, err := h.events.ListEvents(ctx, &eventsv1.ListEventsRequest{LicenseKey: key, Type: "storefront.delivery", Limit: "100"})
		if err == nil {
			for _, ev := range deliveries.GetEvents() {
				switch ev.GetData().GetFields()["outcome"].GetStringValue() {
				case "revoked_refund":
					return "the purchase was refunded in full (Stripe)"
				case "revoked_dispute":
					return "the purchase was disputed (Stripe)"
				}
			}
		}
		return "a refund or dispute of the purchase (Stripe)"
	}
	return ""
}

// showLicense renders the license page, with v's errors when a form on it was refused.
func (h *Handler) showLicense(w http.ResponseWriter, r *http.Request, s *session, v *view, code int, decorate func(*licenseData)) {
	ctx, cancel := withCredential(r.Context(), s.token)
	defer cancel()
	d, err := h.loadLicense(ctx, r.PathValue("key"))
	if err != nil {
		h.errorPage(w, r, s, asAPIError(err))
		return
	}
	if decorate != nil {
		decorate(d)
	}
	v.Title = "License " + d.L.GetKey()
	v.Data = d
	h.render(w, code, "license", v)
}

func (h *Handler) licensePage(w http.ResponseWriter, r *http.Request, s *session) {
	v := pageView(s, "License", "licenses")
	v.Notice, v.NoticeIn = notice(r), licenseNoticeSections[r.URL.Query().Get("notice")]
	h.showLicense(w, r, s, v, http.StatusOK, nil)
}

// afterLicenseForm redirects back to the license page with a notice, or shows the page
// again with the API's message beside the field when the call failed.
func (h *Handler) afterLicenseForm(w http.ResponseWriter, r *http.Request, s *session, err error, noticeCode string, fields ...string) {
	key := r.PathValue("key")
	if err == nil {
		http.Redirect(w, r, "/console/licenses/"+url.PathEscape(key)+"?notice="+noticeCode, http.StatusSeeOther)
		return
	}
	if isUnauthenticated(err) {
		h.clearSession(w)
		h.toLogin(w, r, "expired")
		return
	}
	v := pageView(s, "License", "licenses")
	v.Form = r.PostForm
	code := placeError(v, err, fields...)
	h.showLicense(w, r, s, v, code, nil)
}

func (h *Handler) revokeLicensePage(w http.ResponseWriter, r *http.Request, s *session) {
	v := pageView(s, "Revoke license", "licenses")
	h.showLicense(w, r, s, v, http.StatusOK, func(d *licenseData) { d.Confirm = "revoke" })
}

func (h *Handler) revokeLicense(w http.ResponseWriter, r *http.Request, s *session) {
	revoked := r.PostForm.Get("revoked") != "false"
	if revoked && !confirmed(r) {
		h.revokeLicensePage(w, r, s)
		return
	}
	ctx, cancel := withCredential(r.Context(), s.token)
	defer cancel()
	_, err := h.licensing.RevokeLicense(ctx, &licensingv1.RevokeLicenseRequest{Key: r.PathValue("key"), Revoked: &revoked})
	n := "revoked"
	if !revoked {
		n = "reactivated"
	}
	h.afterLicenseForm(w, r, s, err, n)
}

func (h *Handler) deleteLicensePage(w http.ResponseWriter, r *http.Request, s *session) {
	v := pageView(s, "Delete license", "licenses")
	h.showLicense(w, r, s, v, http.StatusOK, func(d *licenseData) { d.Delete = true })
}

func (h *Handler) deleteLicense(w http.ResponseWriter, r *http.Request, s *session) {
	ctx, cancel := withCredential(r.Context(), s.token)
	defer cancel()
	if r.PostForm.Get("confirm") != r.PathValue("key") {
		v := pageView(s, "Delete license", "licenses")
		v.Fields["confirm"] = "Type the license key to confirm"
		h.showLicense(w, r, s, v, http.StatusBadRequest, func(d *licenseData) { d.Delete = true })
		return
	}
	if _, err := h.licensing.DeleteLicense(ctx, &licensingv1.DeleteLicenseRequest{Key: r.PathValue("key")}); err != nil {
		h.afterLicenseForm(w, r, s, err, "")
		return
	}
	http.Redirect(w, r, "/console/licenses?notice=deleted", http.StatusSeeOther)
}

func (h *Handler) updateTerms(w http.ResponseWriter, r *http.Request, s *session) {
	f := r.PostForm
	v := pageView(s, "License", "licenses")
	v.Form = f
	limits, ok := limitsValue(f, v)
	if !ok {
		h.showLicense(w, r, s, v, http.StatusBadRequest, nil)
		return
	}
	req := &licensingv1.UpdateLicenseTermsRequest{
		Key: r.PathValue("key"), ExpiresAt: expiresValue(f.Get("expires_at")),
		MaxActivations: capValue(f.Get("max_activations")), Limits: limits,
	}
	ctx, cancel := withCredential(r.Context(), s.token)
	defer cancel()
	_, err := h.licensing.UpdateLicenseTerms(ctx, req)
	h.afterLicenseForm(w, r, s, err, "terms", "expires_at", "max_activations", "limits")
}

func (h *Handler) updateNotes(w http.ResponseWriter, r *http.Request, s *session) {
	ctx, cancel := withCredential(r.Context(), s.token)
	defer cancel()
	_, err := h.licensing.UpdateNotes(ctx, &licensingv1.UpdateNotesRequest{Key: r.PathValue("key"), Notes: structpb.NewStringValue(r.PostForm.Get("notes"))})
	h.afterLicenseForm(w, r, s, err, "notes", "notes")
}

func (h *Handler) deactivateSeatPage(w http.ResponseWriter, r *http.Request, s *session) {
	instance := r.FormValue("instance_id")
	if instance == "" {
		http.Redirect(w, r, "/console/licenses/"+url.PathEscape(r.PathValue("key")), http.StatusSeeOther)
		return
	}
	v := pageView(s, "Deactivate seat", "licenses")
	h.showLicense(w, r, s, v, http.StatusOK, func(d *licenseData) { d.Confirm, d.ConfirmInstance = "deactivate", instance })
}

func (h *Handler) deactivateSeat(w http.ResponseWriter, r *http.Request, s *session) {
	if !confirmed(r) {
		h.deactivateSeatPage(w, r, s)
		return
	}
	ctx, cancel := withCredential(r.Context(), s.token)
	defer cancel()
	_, err := h.activations.DeactivateByInstanceId(ctx, &activationsv1.DeactivateByInstanceIdRequest{Key: r.PathValue("key"), InstanceId: r.PostForm.Get("instance_id")})
	h.afterLicenseForm(w, r, s, err, "seat-deactivated", "instance_id")
}

// reissueToken shows the new activation token once, on the license page itself.
func (h *Handler) reissueToken(w http.ResponseWriter, r *http.Request, s *session) {
	ctx, cancel := withCredential(r.Context(), s.token)
	defer cancel()
	instance := r.PostForm.Get("instance_id")
	resp, err := h.activations.ReissueToken(ctx, &activationsv1.ReissueTokenRequest{Key: r.PathValue("key"), InstanceId: instance})
	if err != nil {
		h.afterLicenseForm(w, r, s, err, "", "instance_id")
		return
	}
	v := pageView(s, "License", "licenses")
	v.Notice = "New activation token issued; the previous one no longer works."
	h.showLicense(w, r, s, v, http.StatusOK, func(d *licenseData) { d.NewToken, d.NewTokenInstance = resp.GetToken(), instance })
}

func (h *Handler) resetUsagePage(w http.ResponseWriter, r *http.Request, s *session) {
	v := pageView(s, "Reset usage", "licenses")
	metric := r.FormValue("metric")
	h.showLicense(w, r, s, v, http.StatusOK, func(d *licenseData) { d.Confirm, d.ConfirmMetric = "reset-usage", metric })
}

func (h *Handler) resetUsage(w http.ResponseWriter, r *http.Request, s *session) {
	if !confirmed(r) {
		h.resetUsagePage(w, r, s)
		return
	}
	ctx, cancel := withCredential(r.Context(), s.token)
	defer cancel()
	req := &activationsv1.ResetUsageRequest{Key: r.PathValue("key")}
	if m := r.PostForm.Get("metric"); m != "" {
		req.Metric = &m
	}
	_, err := h.activations.ResetUsage(ctx, req)
	h.afterLicenseForm(w, r, s, err, "usage-reset", "metric")
}

func (h *Handler) resetPortalLink(w http.ResponseWriter, r *http.Request, s *session) {
	ctx, cancel := withCredential(r.Context(), s.token)
	defer cancel()
	_, err := h.portal.ResetPortalLink(ctx, &licensingv1.ResetPortalLinkRequest{Key: r.PathValue("key")})
	h.afterLicenseForm(w, r, s, err, "portal-reset")
}
