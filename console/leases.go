package console

import (
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	"google.golang.org/protobuf/proto"
)

// The lease pages (docs/leases.md): a product's lease policies, the lease keys with their
// rotation. Seats' lease ends and bindings show on the license page.

type productData struct {
	ProductID string
	Policies  []*activationsv1.LeasePolicy
}

type leaseKeysData struct {
	Keys []*activationsv1.LeaseKey
	// JWKSURL is where apps fetch the keys (hosted: with the tenant's id).
	JWKSURL string
}

var policyFields = []string{"tier", "lease_ttl_seconds", "renew_after_seconds", "fingerprint_match", "entitlements"}

// productsPage opens the product named in the query (the lease keys page's search form).
func (h *Handler) productsPage(w http.ResponseWriter, r *http.Request, s *session) {
	id := strings.TrimSpace(r.URL.Query().Get("product_id"))
	if id == "" {
		http.Redirect(w, r, "/console/leases", http.StatusSeeOther)
		return
	}
	http.Redirect(w, r, "/console/products/"+url.PathEscape(id), http.StatusSeeOther)
}

func (h *Handler) productPage(w http.ResponseWriter, r *http.Request, s *session) {
	v := pageView(s, "Product", "leases")
	v.Notice = notice(r)
	h.showProduct(w, r, s, v, http.StatusOK)
}

// showProduct lists a product's lease policies under the form that sets one.
func (h *Handler) showProduct(w http.ResponseWriter, r *http.Request, s *session, v *view, code int) {
	id := r.PathValue("product_id")
	ctx, cancel := withCredential(r.Context(), s.token)
	defer cancel()
	resp, err := h.leases.ListLeasePolicies(ctx, &activationsv1.ListLeasePoliciesRequest{ProductId: id})
	if err != nil {
		if isUnauthenticated(err) {
			h.clearSession(w)
			h.toLogin(w, r, "expired")
			return
		}
		h.errorPage(w, r, s, asAPIError(err))
		return
	}
	v.Title = "Product " + id
	v.Data = &productData{ProductID: id, Policies: resp.GetPolicies()}
	h.render(w, code, "product", v)
}

// savePolicy sets the policy of the tier in the form; empty numbers take the defaults.
func (h *Handler) savePolicy(w http.ResponseWriter, r *http.Request, s *session) {
	f := r.PostForm
	id := r.PathValue("product_id")
	req := &activationsv1.PutLeasePolicyRequest{ProductId: id, Tier: strings.TrimSpace(f.Get("tier")),
		Floating: proto.Bool(f.Get("floating") == "on"), FingerprintMatch: optional(f.Get("fingerprint_match"))}
	v := pageView(s, "Product", "leases")
	v.Form = f
	for name, dst := range map[string]**int32{"lease_ttl_seconds": &req.LeaseTtlSeconds, "renew_after_seconds": &req.RenewAfterSeconds} {
		text := strings.TrimSpace(f.Get(name))
		if text == "" {
			continue
		}
		n, err := strconv.ParseInt(text, 10, 64)
		if err != nil {
			v.Fields[name] = name + " must be a whole number of seconds"
			h.showProduct(w, r, s, v, http.StatusBadRequest)
			return
		}
		// The service bounds the field (at most 90 days): a number past int32 is clamped,
		// still out of bounds, so the answer is the service's message naming the bounds.
		n32 := int32(min(max(n, math.MinInt32), math.MaxInt32))
		*dst = &n32
	}
	for _, e := range strings.Split(f.Get("entitlements"), ",") {
		if e = strings.TrimSpace(e); e != "" {
			req.Entitlements = append(req.Entitlements, e)
		}
	}
	ctx, cancel := withCredential(r.Context(), s.token)
	defer cancel()
	if _, err := h.leases.PutLeasePolicy(ctx, req); err != nil {
		if isUnauthenticated(err) {
			h.clearSession(w)
			h.toLogin(w, r, "expired")
			return
		}
		code := v.showError(err, policyFields...)
		h.showProduct(w, r, s, v, code)
		return
	}
	http.Redirect(w, r, "/console/products/"+url.PathEscape(id)+"?notice=policy-saved", http.StatusSeeOther)
}

func (h *Handler) deletePolicy(w http.ResponseWriter, r *http.Request, s *session) {
	id := r.PathValue("product_id")
	ctx, cancel := withCredential(r.Context(), s.token)
	defer cancel()
	if _, err := h.leases.DeleteLeasePolicy(ctx, &activationsv1.DeleteLeasePolicyRequest{ProductId: id, Tier: r.PostForm.Get("tier")}); err != nil {
		v := pageView(s, "Product", "leases")
		code := v.showError(err)
		h.showProduct(w, r, s, v, code)
		return
	}
	http.Redirect(w, r, "/console/products/"+url.PathEscape(id)+"?notice=policy-deleted", http.StatusSeeOther)
}

func (h *Handler) leaseKeysPage(w http.ResponseWriter, r *http.Request, s *session) {
	v := pageView(s, "Leases", "leases")
	v.Notice = notice(r)
	h.showLeaseKeys(w, r, s, v, http.StatusOK)
}

// showLeaseKeys lists the keys that verify the tenant's leases, as apps fetch them.
func (h *Handler) showLeaseKeys(w http.ResponseWriter, r *http.Request, s *session, v *view, code int) {
	ctx, cancel := withCredential(r.Context(), s.token)
	defer cancel()
	d := &leaseKeysData{JWKSURL: strings.TrimRight(h.opts.PublicBaseURL, "/") + "/v1/lease-keys"}
	tenant := ""
	if h.opts.MultiTenant {
		tenant = s.account.GetTenantId()
		d.JWKSURL += "?tenant_id=" + url.QueryEscape(tenant)
	}
	resp, err := h.leases.ListLeaseKeys(ctx, &activationsv1.ListLeaseKeysRequest{TenantId: tenant})
	if err != nil {
		h.errorPage(w, r, s, asAPIError(err))
		return
	}
	d.Keys = resp.GetKeys()
	v.Data = d
	h.render(w, code, "leases", v)
}

// rotateLeaseKeys makes a new key sign; an empty overlap takes the API's default.
func (h *Handler) rotateLeaseKeys(w http.ResponseWriter, r *http.Request, s *session) {
	req := &activationsv1.RotateLeaseKeysRequest{}
	v := pageView(s, "Leases", "leases")
	v.Form = r.PostForm
	if text := strings.TrimSpace(r.PostForm.Get("retire_after_seconds")); text != "" {
		n, err := strconv.ParseInt(text, 10, 64)
		if err != nil {
			v.Fields["retire_after_seconds"] = "retire_after_seconds must be a whole number of seconds"
			h.showLeaseKeys(w, r, s, v, http.StatusBadRequest)
			return
		}
		req.RetireAfterSeconds = &n
	}
	ctx, cancel := withCredential(r.Context(), s.token)
	defer cancel()
	if _, err := h.leases.RotateLeaseKeys(ctx, req); err != nil {
		if isUnauthenticated(err) {
			h.clearSession(w)
			h.toLogin(w, r, "expired")
			return
		}
		code := v.showError(err, "retire_after_seconds")
		h.showLeaseKeys(w, r, s, v, code)
		return
	}
	http.Redirect(w, r, "/console/leases?notice=lease-key-rotated", http.StatusSeeOther)
}

// leasesByInstance indexes seats' lease states for the seat tables.
func leasesByInstance(seats []*activationsv1.SeatLease) map[string]*activationsv1.SeatLease {
	out := map[string]*activationsv1.SeatLease{}
	for _, seat := range seats {
		out[seat.GetInstanceId()] = seat
	}
	return out
}

// formatComponents prints a seat's bound components as "board=…, disk=…", names sorted.
func formatComponents(components map[string]string) string {
	names := make([]string, 0, len(components))
	for name := range components {
		names = append(names, name)
	}
	slices.Sort(names)
	parts := make([]string, len(names))
	for i, name := range names {
		parts[i] = name + "=" + components[name]
	}
	return strings.Join(parts, ", ")
}
