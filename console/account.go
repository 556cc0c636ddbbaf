package console

import (
	"net/http"

	accountsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/accounts/v1"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	storefrontv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/storefront/v1"
)

type settingsData struct {
	Portal *licensingv1.GetPortalSettingsResponse
	// Mail is the buyer-email settings (sender name, reply-to, product name).
	Mail *storefrontv1.MailSettings
	// NewKey is a rotated API key, shown once.
	NewKey string
}

func (h *Handler) settingsPage(w http.ResponseWriter, r *http.Request, s *session) {
	v := pageView(s, "Settings", "settings")
	v.Notice = notice(r)
	v.NoticeIn = map[string]string{"password-set": "password", "mail-saved": "mail"}[r.URL.Query().Get("notice")]
	h.showSettings(w, r, s, v, http.StatusOK)
}

func (h *Handler) showSettings(w http.ResponseWriter, r *http.Request, s *session, v *view, code int) {
	ctx, cancel := withCredential(r.Context(), s.token)
	defer cancel()
	portal, err := h.portal.GetPortalSettings(ctx, &licensingv1.GetPortalSettingsRequest{})
	if err != nil {
		h.errorPage(w, r, s, asAPIError(err))
		return
	}
	mail, err := h.storefront.GetMailSettings(ctx, &storefrontv1.GetMailSettingsRequest{})
	if err != nil {
		h.errorPage(w, r, s, asAPIError(err))
		return
	}
	v.Data = &settingsData{Portal: portal, Mail: mail.GetSettings()}
	h.render(w, code, "settings", v)
}

// rotateKey retires the tenant's API key: the new key is shown once, and every console
// session of the tenant, this one included, ends with the old key.
func (h *Handler) rotateKey(w http.ResponseWriter, r *http.Request, s *session) {
	ctx, cancel := withCredential(r.Context(), s.token)
	defer cancel()
	resp, err := h.accounts.RotateApiKey(ctx, &accountsv1.RotateApiKeyRequest{})
	if err != nil {
		v := pageView(s, "Settings", "settings")
		v.Error = asAPIError(err).Message
		h.showSettings(w, r, s, v, asAPIError(err).Status)
		return
	}
	h.clearSession(w)
	h.render(w, http.StatusOK, "key_rotated", &view{Title: "New API key", Data: &settingsData{NewKey: resp.GetApiKey()}})
}

func (h *Handler) setPassword(w http.ResponseWriter, r *http.Request, s *session) {
	v := pageView(s, "Settings", "settings")
	pw := r.PostForm.Get("password")
	if pw != r.PostForm.Get("confirm") {
		v.Fields["confirm"] = "The two passwords differ"
		h.showSettings(w, r, s, v, http.StatusBadRequest)
		return
	}
	ctx, cancel := withCredential(r.Context(), s.token)
	defer cancel()
	if _, err := h.consoleAuth.SetPassword(ctx, &accountsv1.SetPasswordRequest{Password: pw}); err != nil {
		code := v.showError(err, "password")
		h.showSettings(w, r, s, v, code)
		return
	}
	http.Redirect(w, r, "/console/settings?notice=password-set", http.StatusSeeOther)
}

func (h *Handler) setPortal(w http.ResponseWriter, r *http.Request, s *session) {
	enabled := r.PostForm.Get("enabled") == "true"
	ctx, cancel := withCredential(r.Context(), s.token)
	defer cancel()
	if _, err := h.portal.SetPortalSettings(ctx, &licensingv1.SetPortalSettingsRequest{Enabled: enabled}); err != nil {
		v := pageView(s, "Settings", "settings")
		v.Error = asAPIError(err).Message
		h.showSettings(w, r, s, v, asAPIError(err).Status)
		return
	}
	n := "portal-off"
	if enabled {
		n = "portal-on"
	}
	http.Redirect(w, r, "/console/settings?notice="+n, http.StatusSeeOther)
}
