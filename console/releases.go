package console

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"

	releasesv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/releases/v1"
)

type releasesData struct {
	Releases []*releasesv1.ReleaseRow
	offsetPager
}

var releaseFields = []string{"product_id", "version", "channel", "platform", "artifact_url", "checksum", "release_notes"}

func (h *Handler) releasesPage(w http.ResponseWriter, r *http.Request, s *session) {
	v := pageView(s, "Releases", "releases")
	v.Notice = notice(r)
	h.showReleases(w, r, s, v, http.StatusOK)
}

// showReleases lists the tenant's releases (filters in the query) under the register form.
func (h *Handler) showReleases(w http.ResponseWriter, r *http.Request, s *session, v *view, code int) {
	q := r.URL.Query()
	filters := url.Values{}
	for _, k := range []string{"product_id", "channel", "platform", "status"} {
		if val := strings.TrimSpace(q.Get(k)); val != "" {
			filters.Set(k, val)
		}
	}
	page, _ := strconv.Atoi(q.Get("page"))
	page = max(page, 1)
	d := &releasesData{}
	v.Data = d
	ctx, cancel := withCredential(r.Context(), s.token)
	defer cancel()
	resp, err := h.releases.ListReleases(ctx, &releasesv1.ListReleasesRequest{
		ProductId: filters.Get("product_id"), Channel: filters.Get("channel"), Platform: filters.Get("platform"),
		Status: optional(filters.Get("status")), Limit: strconv.Itoa(pageSize), Offset: strconv.Itoa((page - 1) * pageSize),
	})
	// The pager is placed once, from the answer. A refused call has none (resp is nil, its
	// getters zero): the page shows the error above an empty list and its pager.
	d.Releases = resp.GetReleases()
	d.offsetPager = newOffsetPager("/console/releases", "releases", filters, page, int(resp.GetTotal()), len(d.Releases))
	if err != nil {
		if isUnauthenticated(err) {
			h.clearSession(w)
			h.toLogin(w, r, "expired")
			return
		}
		e := asAPIError(err)
		v.Error = e.Message
		h.render(w, max(code, e.Status), "releases", v)
		return
	}
	h.render(w, code, "releases", v)
}

func (h *Handler) registerRelease(w http.ResponseWriter, r *http.Request, s *session) {
	f := r.PostForm
	req := &releasesv1.RegisterReleaseRequest{
		ProductId: strings.TrimSpace(f.Get("product_id")), Version: strings.TrimSpace(f.Get("version")),
		Channel: strings.TrimSpace(f.Get("channel")), Platform: strings.TrimSpace(f.Get("platform")),
		ArtifactUrl: strings.TrimSpace(f.Get("artifact_url")), Checksum: strings.TrimSpace(f.Get("checksum")),
		ReleaseNotes: f.Get("release_notes"),
	}
	ctx, cancel := withCredential(r.Context(), s.token)
	defer cancel()
	_, err := h.releases.RegisterRelease(ctx, req)
	if err == nil {
		http.Redirect(w, r, "/console/releases?notice=release-registered", http.StatusSeeOther)
		return
	}
	if isUnauthenticated(err) {
		h.clearSession(w)
		h.toLogin(w, r, "expired")
		return
	}
	v := pageView(s, "Releases", "releases")
	v.Form = f
	code := v.showError(err, releaseFields...)
	h.showReleases(w, r, s, v, code)
}

func (h *Handler) unpublishRelease(w http.ResponseWriter, r *http.Request, s *session) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 32)
	if err != nil {
		h.notFound(w, r)
		return
	}
	id32 := int32(id)
	ctx, cancel := withCredential(r.Context(), s.token)
	defer cancel()
	if _, err := h.releases.UnpublishRelease(ctx, &releasesv1.UnpublishReleaseRequest{Id: &id32}); err != nil {
		v := pageView(s, "Releases", "releases")
		v.showError(err)
		h.showReleases(w, r, s, v, asAPIError(err).Status)
		return
	}
	http.Redirect(w, r, "/console/releases?notice=release-unpublished", http.StatusSeeOther)
}
