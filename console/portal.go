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
}

var portalNotices = map[string]string{"seat-deactivated": "Seat deactivated: the device can be activated again elsewhere."}

// portalPage is the license holder's page (addendum §9). Anything that is not a live link
// of a license that is not revoked, of a tenant with the portal on, is a plain 404.
func (h *Handler) portalPage(w http.ResponseWriter, r *http.Request) {
	v := &view{Title: "Your license", Portal: true, Fields: map[string]string{}, Notice: portalNotices[r.URL.Query().Get("notice")]}
	h.showPortal(w, r, v, http.StatusOK)
}

func (h *Handler) showPortal(w http.ResponseWriter, r *http.Request, v *view, code int) {
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
	d := &portalData{
		Token: token, L: l, Product: h.portalProductName(ctx, token, l.GetProductId()),
		Seats: seats.GetActivations(), Leases: leasesByInstance(seats.GetLeases()), Usage: report.GetMetrics(),
		Expired: l.GetExpiresAt() != nil && !h.opts.Now().Before(l.GetExpiresAt().AsTime()),
		KeyPath: url.PathEscape(l.GetKey()),
	}
	v.Title = d.Product + " license"
	v.CSRF = portalCSRF(token)
	v.Data = d
	h.render(w, code, "portal", v)
}

// portalProductName is the product's name in the tenant's buyer emails (mail settings),
// so the holder sees the product the email named; the product_id when the tenant set
// none, or when the storefront cannot say (the license page does not depend on it).
func (h *Handler) portalProductName(ctx context.Context, token, productID string) string {
	resp, err := h.storefrontPortal.GetPortalProductName(ctx, &storefrontv1.GetPortalProductNameRequest{Token: token})
	if err != nil {
		h.opts.Log.Warn("portal: product name unavailable, showing the product_id", "error", err.Error())
		return productID
	}
	if resp.GetProductName() == "" {
		return productID
	}
	return resp.GetProductName()
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

func (h *Handler) portalDeactivate(w http.ResponseWriter, r *http.Request) {
	token := r.PathValue("token")
	if err := r.ParseForm(); err != nil || !sameSecret(r.PostForm.Get("csrf"), portalCSRF(token)) {
		h.render(w, http.StatusForbidden, "error", &view{Title: "Forbidden", Portal: true, Error: "Invalid or missing CSRF token: reload the page and try again",
			Data: &apiError{Status: http.StatusForbidden}})
		return
	}
	ctx, cancel := withCredential(r.Context(), "")
	defer cancel()
	_, err := h.seats.DeactivatePortalSeat(ctx, &activationsv1.DeactivatePortalSeatRequest{Token: token, InstanceId: r.PostForm.Get("instance_id")})
	if status.Code(err) == codes.NotFound && status.Convert(err).Message() == "Not found" {
		h.portalError(w, err)
		return
	}
	if err != nil {
		v := &view{Title: "Your license", Portal: true, Fields: map[string]string{}, Error: asAPIError(err).Message}
		h.showPortal(w, r, v, asAPIError(err).Status)
		return
	}
	http.Redirect(w, r, "/portal/"+url.PathEscape(token)+"?notice=seat-deactivated", http.StatusSeeOther)
}
