package console

import (
	"context"
	"net/http"
	"net/url"

	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	storefrontv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/storefront/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

type portalData struct {
	Token string
	L     *licensingv1.GetPortalLicenseResponse
	// Product is the product's name the tenant set for its buyer emails, else its id.
	Product string
	Seats   []*activationsv1.Activation
	// Leases are the seats' lease states by instance_id (when a floating seat's lease ends).
	Leases  map[string]*activationsv1.SeatLease
	Usage   []*activationsv1.UsageMetric
	Expired bool
	KeyPath string
	// Support is whom the holder can ask (nil: the tenant's emails name no address).
	Support *portalSupport
	// ConfirmRelease is the seat whose release awaits the holder's confirmation.
	ConfirmRelease string
}

// The portal's seat action is "Release" (addendum §12, docs/leases.md).
var portalNotices = map[string]string{
	"seat-released":         "Seat released: the license can be activated on another device now.",
	"seat-already-released": "That seat was already released (from another tab or browser, by the vendor, or when its lease ended): nothing changed.",
}

// portalPage is the license holder's page (addendum §9). Anything that is not a live link
// of a license that is not revoked, of a tenant with the portal on, is a plain 404.
func (h *Handler) portalPage(w http.ResponseWriter, r *http.Request) {
	v := &view{Title: "Your license", Portal: true, Fields: map[string]string{}, Notice: portalNotices[r.URL.Query().Get("notice")]}
	if v.Notice != "" {
		v.NoticeIn = "seats" // both notices are about the Release buttons there
	}
	h.showPortal(w, r, v, http.StatusOK, "")
}

// showPortal renders the license page; confirmRelease names a seat whose release the page
// asks the holder to confirm (empty: none).
func (h *Handler) showPortal(w http.ResponseWriter, r *http.Request, v *view, code int, confirmRelease string) {
	token := r.PathValue("token")
	ctx, cancel := withCredential(r.Context(), "")
	defer cancel()
	l, err := h.portal.GetPortalLicense(ctx, &licensingv1.GetPortalLicenseRequest{Token: token})
	if err != nil {
		h.portalError(w, err)
		return
	}
	seats, err := h.seats.ListPortalSeats(ctx, &activationsv1.ListPortalSeatsRequest{Token: token})
	if err != nil {
		h.portalError(w, err)
		return
	}
	report, err := h.activations.UsageReport(ctx, &activationsv1.UsageReportRequest{Key: l.GetKey()})
	if err != nil {
		h.portalError(w, err)
		return
	}
	product, support := h.portalVendor(ctx, token, l.GetProductId())
	d := &portalData{
		Token: token, L: l, Product: product, Support: support,
		Seats: seats.GetActivations(), Leases: leasesByInstance(seats.GetLeases()), Usage: report.GetMetrics(),
		Expired: l.GetExpiresAt() != nil && !h.opts.Now().Before(l.GetExpiresAt().AsTime()),
		KeyPath: url.PathEscape(l.GetKey()),
	}
	if confirmRelease != "" {
		if !holdsSeat(d.Seats, confirmRelease) {
			// Released meanwhile (another tab, the vendor, a lapsed lease): nothing to ask.
			http.Redirect(w, r, portalURL(token, "seat-already-released"), http.StatusSeeOther)
			return
		}
		d.ConfirmRelease = confirmRelease
	}
	v.Title = d.Product + " license"
	v.CSRF = portalCSRF(token)
	v.Data = d
	h.render(w, code, "portal", v)
}

// portalSupport is whom the holder can ask: the sender and reply-to of the tenant's buyer
// emails.
type portalSupport struct{ Name, Email string }

// portalVendor is the product's name in the tenant's buyer emails (mail settings), so
// the holder sees the product the email named (the product_id when the tenant set none),
// and whom those emails answer to (nil: no address). When the storefront cannot say, the
// page shows the product_id and no contact: the license page does not depend on it.
func (h *Handler) portalVendor(ctx context.Context, token, productID string) (string, *portalSupport) {
	resp, err := h.storefrontPortal.GetPortalVendor(ctx, &storefrontv1.GetPortalVendorRequest{Token: token})
	if err != nil {
		h.opts.Log.Warn("portal: vendor details unavailable, showing the product_id", "error", err.Error())
		return productID, nil
	}
	name := resp.GetProductName()
	if name == "" {
		name = productID
	}
	if resp.GetSupportEmail() == "" {
		return name, nil
	}
	return name, &portalSupport{Name: resp.GetVendorName(), Email: resp.GetSupportEmail()}
}

// portalError answers the plain 404 page for every refused token, and the API's message
// for anything else.
func (h *Handler) portalError(w http.ResponseWriter, err error) {
	if status.Code(err) == codes.NotFound {
		h.render(w, http.StatusNotFound, "portal_404", &view{Title: "Link not valid", Portal: true})
		return
	}
	e := asAPIError(err)
	h.render(w, e.Status, "error", &view{Title: http.StatusText(e.Status), Error: e.Message, Data: e, Portal: true})
}

// portalReleasePage asks before a seat is released, on a page of its own that needs no
// JavaScript (as the console asks before it deactivates one): on a team license a slip
// would free a colleague's machine.
func (h *Handler) portalReleasePage(w http.ResponseWriter, r *http.Request) {
	instance := r.URL.Query().Get("instance_id")
	if instance == "" {
		http.Redirect(w, r, portalURL(r.PathValue("token"), ""), http.StatusSeeOther)
		return
	}
	v := &view{Title: "Release seat", Portal: true, Fields: map[string]string{}}
	h.showPortal(w, r, v, http.StatusOK, instance)
}

// portalRelease frees a seat once confirmed, then redirects (post/redirect/get), so a
// reload never posts again. A post without the confirmation (a page served before the
// portal asked, a stray submit) leads to the question. A seat already gone (a second
// tab or browser) is a notice, not an error: the holder wanted it free, and it is.
func (h *Handler) portalRelease(w http.ResponseWriter, r *http.Request) {
	token := r.PathValue("token")
	if err := r.ParseForm(); err != nil || !sameSecret(r.PostForm.Get("csrf"), portalCSRF(token)) {
		h.render(w, http.StatusForbidden, "error", &view{Title: "Forbidden", Portal: true, Error: "Invalid or missing CSRF token: reload the page and try again",
			Data: &apiError{Status: http.StatusForbidden}})
		return
	}
	instance := r.PostForm.Get("instance_id")
	if !confirmed(r) {
		http.Redirect(w, r, "/portal/"+url.PathEscape(token)+"/release?"+url.Values{"instance_id": {instance}}.Encode(), http.StatusSeeOther)
		return
	}
	ctx, cancel := withCredential(r.Context(), "")
	defer cancel()
	_, err := h.seats.DeactivatePortalSeat(ctx, &activationsv1.DeactivatePortalSeatRequest{Token: token, InstanceId: instance})
	switch {
	case err == nil:
		http.Redirect(w, r, portalURL(token, "seat-released"), http.StatusSeeOther)
	case status.Code(err) == codes.NotFound && status.Convert(err).Message() == "Not found":
		h.portalError(w, err)
	case status.Code(err) == codes.NotFound:
		// "No activation found for that key and instance_id": released already.
		http.Redirect(w, r, portalURL(token, "seat-already-released"), http.StatusSeeOther)
	default:
		v := &view{Title: "Your license", Portal: true, Fields: map[string]string{}, Error: asAPIError(err).Message}
		h.showPortal(w, r, v, asAPIError(err).Status, "")
	}
}

// portalURL is the portal page's path, with a notice when one is given.
func portalURL(token, notice string) string {
	u := "/portal/" + url.PathEscape(token)
	if notice != "" {
		u += "?notice=" + notice
	}
	return u
}

func holdsSeat(seats []*activationsv1.Activation, instance string) bool {
	for _, a := range seats {
		if a.GetInstanceId() == instance {
			return true
		}
	}
	return false
}
