package console

import (
	"net/http"
	"strings"
	"time"

	accountsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/accounts/v1"
	"google.golang.org/protobuf/types/known/structpb"
)

// The API keys page: the tenant's extra keys (besides the one Settings rotates), created
// with a name, a scope and an optional expiry, the key shown once, deleted after a
// confirmation.

type apiKeysData struct {
	Keys []*accountsv1.ApiKey
	// Confirm is the key a delete awaits confirmation for.
	Confirm *accountsv1.ApiKey
}

var apiKeyNotices = map[string]string{
	"deleted": "API key deleted: it no longer works.",
}

func (h *Handler) apiKeysPage(w http.ResponseWriter, r *http.Request, s *session) {
	v := pageView(s, "API keys", "api-keys")
	v.Notice = apiKeyNotices[r.URL.Query().Get("notice")]
	h.showAPIKeys(w, r, s, v, http.StatusOK, "")
}

// showAPIKeys renders the list; confirm names a key whose deletion awaits confirmation.
func (h *Handler) showAPIKeys(w http.ResponseWriter, r *http.Request, s *session, v *view, code int, confirm string) {
	ctx, cancel := withCredential(r.Context(), s.token)
	defer cancel()
	list, err := h.apiKeys.ListApiKeys(ctx, &accountsv1.ListApiKeysRequest{})
	if err != nil {
		if h.sessionEnded(w, r, err) {
			return
		}
		h.errorPage(w, r, s, asAPIError(err))
		return
	}
	d := &apiKeysData{Keys: list.GetApiKeys()}
	for _, k := range d.Keys {
		if confirm != "" && k.GetId() == confirm {
			d.Confirm = k
		}
	}
	if confirm != "" && d.Confirm == nil {
		h.errorPage(w, r, s, &apiError{Status: http.StatusNotFound, Message: "API key not found"})
		return
	}
	v.Data = d
	h.render(w, code, "api_keys", v)
}

func (h *Handler) createAPIKey(w http.ResponseWriter, r *http.Request, s *session) {
	f := r.PostForm
	req := &accountsv1.CreateApiKeyRequest{Name: strings.TrimSpace(f.Get("name")), Scope: f.Get("scope")}
	v := pageView(s, "API keys", "api-keys")
	v.Form = f
	if d := strings.TrimSpace(f.Get("expires_at")); d != "" {
		day, err := time.Parse("2006-01-02", d)
		if err != nil {
			v.Fields["expires_at"] = "expires_at must be a date (YYYY-MM-DD)"
			h.showAPIKeys(w, r, s, v, http.StatusBadRequest, "")
			return
		}
		req.ExpiresAt = structpb.NewStringValue(day.Format(time.RFC3339)) // the start of that day, UTC
	}
	ctx, cancel := withCredential(r.Context(), s.token)
	defer cancel()
	resp, err := h.apiKeys.CreateApiKey(ctx, req)
	if err != nil {
		if h.sessionEnded(w, r, err) {
			return
		}
		code := v.showError(err, "name", "scope", "expires_at")
		h.showAPIKeys(w, r, s, v, code, "")
		return
	}
	v = pageView(s, "New API key", "api-keys")
	v.Data = resp
	h.render(w, http.StatusOK, "api_key_created", v)
}

func (h *Handler) deleteAPIKeyPage(w http.ResponseWriter, r *http.Request, s *session) {
	h.showAPIKeys(w, r, s, pageView(s, "Delete API key", "api-keys"), http.StatusOK, r.PathValue("id"))
}

func (h *Handler) deleteAPIKey(w http.ResponseWriter, r *http.Request, s *session) {
	ctx, cancel := withCredential(r.Context(), s.token)
	defer cancel()
	_, err := h.apiKeys.DeleteApiKey(ctx, &accountsv1.DeleteApiKeyRequest{Id: r.PathValue("id")})
	if err == nil {
		http.Redirect(w, r, "/console/api-keys?notice=deleted", http.StatusSeeOther)
		return
	}
	if h.sessionEnded(w, r, err) {
		return
	}
	h.errorPage(w, r, s, asAPIError(err))
}
