package console

import (
	"net/http"

	storefrontv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/storefront/v1"
)

// setMailSettings saves the buyer-email settings; a refused field shows the storefront's
// message beside it, with what was typed kept.
func (h *Handler) setMailSettings(w http.ResponseWriter, r *http.Request, s *session) {
	f := r.PostForm
	ctx, cancel := withCredential(r.Context(), s.token)
	defer cancel()
	_, err := h.storefront.UpdateMailSettings(ctx, &storefrontv1.UpdateMailSettingsRequest{
		SenderName: f.Get("sender_name"), ReplyTo: f.Get("reply_to"), ProductName: f.Get("product_name"),
	})
	if err != nil {
		if h.sessionEnded(w, r, err) {
			return
		}
		v := pageView(s, "Settings", "settings")
		v.Form = f
		code := v.showError(err, "sender_name", "reply_to", "product_name")
		h.showSettings(w, r, s, v, code)
		return
	}
	http.Redirect(w, r, "/console/settings?notice=mail-saved", http.StatusSeeOther)
}
