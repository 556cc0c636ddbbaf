package console

import (
	"net/http"
	"strings"

	"github.com/keyhouse/keyhouse/pkg/input"
)

// freeTextFields are the form fields that may hold line breaks and tabs (textareas and
// passwords); every other field and every path and query value is an identifier under
// the input policy (pkg/input).
var freeTextFields = []string{"notes", "release_notes", "password", "confirm"}

// allowedInput applies the input policy to a request before any page sees it, and answers
// the refusal itself: a path the policy refuses names nothing, so it is the page's own
// 404 (the portal's plain one under /portal/); a query or form value it refuses is a 400
// page naming the field. Without this such bytes reached a service call, which gRPC
// refused to send, and the page was a 500.
func (h *Handler) allowedInput(w http.ResponseWriter, r *http.Request) bool {
	if input.CheckPath(r.URL.Path) != nil {
		if strings.HasPrefix(r.URL.Path, "/portal/") {
			h.render(w, http.StatusNotFound, "portal_404", &view{Title: "Link not valid", Portal: true})
		} else {
			h.notFound(w, r)
		}
		return false
	}
	if err := r.ParseForm(); err != nil {
		h.badRequest(w, r, "The form could not be read")
		return false
	}
	if err := input.CheckValues(r.Form, freeTextFields...); err != nil {
		h.badRequest(w, r, err.Error())
		return false
	}
	return true
}

func (h *Handler) badRequest(w http.ResponseWriter, r *http.Request, msg string) {
	e := &apiError{Status: http.StatusBadRequest, Message: msg}
	if strings.HasPrefix(r.URL.Path, "/portal/") {
		h.render(w, e.Status, "error", &view{Title: http.StatusText(e.Status), Error: e.Message, Data: e, Portal: true})
		return
	}
	h.errorPage(w, r, nil, e)
}
