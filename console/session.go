package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"

	"github.com/keyhouse/keyhouse/pkg/auth"
	accountsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/accounts/v1"
)

// Cookie names (addendum §9).
const (
	sessionCookie = "kh_session"
	// loginCSRFCookie holds the pre-login session: a random id the sign-in form's CSRF
	// token is derived from with the server's key (loginCSRF), so neither a value the
	// client chose nor the token of another pre-login session passes.
	loginCSRFCookie = "kh_csrf"
	cookiePath      = "/console"
)

// session is the signed-in tenant of one request.
type session struct {
	token   string
	account *accountsv1.GetAccountResponse
	csrf    string
}

// derive returns base64url(HMAC-SHA256(secret, label)): the CSRF token bound to a session
// token or a portal token. Only the holder of the secret can compute it.
func derive(secret, label string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(label))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func sessionCSRF(token string) string { return derive(token, "keyhouse-console-csrf-v1") }

func portalCSRF(token string) string { return derive(token, "keyhouse-portal-csrf-v1") }

// loginCSRF is the sign-in form's token for a pre-login session id: only the server,
// holding csrfKey, can compute it, so a cookie and field the client made up together
// (double submit) are refused.
func (h *Handler) loginCSRF(preLogin string) string {
	return derive(h.csrfKey, "keyhouse-login-csrf-v1:"+preLogin)
}

func sameSecret(a, b string) bool {
	return a != "" && subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

func randomToken() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

func (h *Handler) setCookie(w http.ResponseWriter, name, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{
		Name: name, Value: value, Path: cookiePath, MaxAge: maxAge,
		HttpOnly: true, Secure: h.secure, SameSite: http.SameSiteLaxMode,
	})
}

func (h *Handler) clearSession(w http.ResponseWriter) { h.setCookie(w, sessionCookie, "", -1) }

// signedIn wraps a page that needs a session: no or a dead session goes to the sign-in
// page, and every POST must carry the session's CSRF token. Only a session token is a
// session: an API key sent as the cookie (a read key, which cannot sign in, included)
// goes to the sign-in page too.
func (h *Handler) signedIn(page func(http.ResponseWriter, *http.Request, *session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c, err := r.Cookie(sessionCookie)
		if err != nil || !auth.IsSessionToken(c.Value) {
			h.toLogin(w, r, "")
			return
		}
		s := &session{token: c.Value, csrf: sessionCSRF(c.Value)}
		if r.Method == http.MethodPost {
			if err := r.ParseForm(); err != nil {
				h.errorPage(w, r, s, &apiError{Status: http.StatusBadRequest, Message: "The form could not be read"})
				return
			}
			if !sameSecret(r.PostForm.Get("csrf"), s.csrf) {
				h.errorPage(w, r, nil, &apiError{Status: http.StatusForbidden, Message: "Invalid or missing CSRF token: reload the page and try again"})
				return
			}
		}
		acct, err := h.account(r, s.token)
		if isUnauthenticated(err) {
			h.clearSession(w)
			h.toLogin(w, r, "expired")
			return
		}
		if err != nil {
			h.errorPage(w, r, nil, asAPIError(err))
			return
		}
		s.account = acct
		page(w, r, s)
	}
}

// toLogin sends the person to the sign-in page, which brings them back afterwards to the
// page they were on (next): the page asked for, or for a form, the page it was posted
// from. Signing out goes back to nothing.
// account is the tenant a session token is signed in as.
func (h *Handler) account(r *http.Request, token string) (*accountsv1.GetAccountResponse, error) {
	ctx, cancel := withCredential(r.Context(), token)
	defer cancel()
	return h.consoleAuth.GetAccount(ctx, &accountsv1.GetAccountRequest{})
}

// signedInOrNil is the request's live session, or nil: for pages that show to anyone
// but keep the console's header and navigation for the signed-in (the 404 page).
func (h *Handler) signedInOrNil(r *http.Request) *session {
	c, err := r.Cookie(sessionCookie)
	if err != nil || !auth.IsSessionToken(c.Value) {
		return nil
	}
	acct, err := h.account(r, c.Value)
	if err != nil {
		return nil
	}
	return &session{token: c.Value, csrf: sessionCSRF(c.Value), account: acct}
}

func (h *Handler) toLogin(w http.ResponseWriter, r *http.Request, reason string) {
	q := url.Values{}
	if reason != "" {
		q.Set("reason", reason)
	}
	if reason != "signed-out" {
		from := r.URL.RequestURI()
		if r.Method != http.MethodGet {
			from = ""
			if ref, err := url.Parse(r.Referer()); err == nil && ref.Host == r.Host {
				from = ref.RequestURI()
			}
		}
		if next := safeNext(from); next != "" && next != "/console/" {
			q.Set("next", next)
		}
	}
	target := "/console/login"
	if len(q) > 0 {
		target += "?" + q.Encode()
	}
	http.Redirect(w, r, target, http.StatusSeeOther)
}

// safeNext is where signing in may send the person: a path of this console's own pages,
// or "" for anything else. An absolute URL, a scheme-relative //host, a backslash (which
// browsers read as a slash), a dot segment or the sign-in page itself is refused: next
// comes from a link anyone can craft, and must never lead off the site (open redirect).
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/console/") || strings.HasPrefix(next, "/console/login") ||
		strings.ContainsAny(next, "\\\x00\t\r\n") {
		return ""
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" {
		return ""
	}
	for _, seg := range strings.Split(u.Path, "/") {
		if seg == "." || seg == ".." {
			return ""
		}
	}
	return next
}

type loginData struct {
	Hosted bool
	Mode   string
	Email  string
	Reason string
	// Next is the console page to return to after signing in (safeNext).
	Next     string
	NewKey   string
	Password bool
}

func (h *Handler) loginPage(w http.ResponseWriter, r *http.Request) {
	mode := r.URL.Query().Get("mode")
	if mode != "password" || !h.opts.MultiTenant {
		mode = "key"
	}
	q := r.URL.Query()
	h.renderLogin(w, r, http.StatusOK, &loginData{Hosted: h.opts.MultiTenant, Mode: mode, Reason: q.Get("reason"), Next: safeNext(q.Get("next"))}, "")
}

func (h *Handler) renderLogin(w http.ResponseWriter, r *http.Request, code int, d *loginData, errMsg string) {
	preLogin := ""
	if c, err := r.Cookie(loginCSRFCookie); err == nil && len(c.Value) >= 32 {
		preLogin = c.Value
	} else {
		preLogin = randomToken()
		h.setCookie(w, loginCSRFCookie, preLogin, 12*3600)
	}
	h.render(w, code, "login", &view{Title: "Sign in", CSRF: h.loginCSRF(preLogin), Error: errMsg, Data: d})
}

// login exchanges the submitted credential for a session. Every failure reads the same:
// "Invalid credentials". The gateway counts each attempt against the Admin-Info tier.
func (h *Handler) login(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		h.errorPage(w, r, nil, &apiError{Status: http.StatusBadRequest, Message: "The form could not be read"})
		return
	}
	c, err := r.Cookie(loginCSRFCookie)
	if err != nil || len(c.Value) < 32 || !sameSecret(r.PostForm.Get("csrf"), h.loginCSRF(c.Value)) {
		h.errorPage(w, r, nil, &apiError{Status: http.StatusForbidden, Message: "Invalid or missing CSRF token: reload the page and try again"})
		return
	}
	d := &loginData{Hosted: h.opts.MultiTenant, Mode: "key", Next: safeNext(r.PostForm.Get("next"))}
	req := &accountsv1.SignInRequest{}
	if r.PostForm.Get("mode") == "password" && h.opts.MultiTenant {
		d.Mode, d.Email = "password", r.PostForm.Get("email")
		req.Email, req.Password = d.Email, r.PostForm.Get("password")
	} else {
		req.ApiKey = r.PostForm.Get("api_key")
	}
	ctx, cancel := withCredential(r.Context(), "")
	defer cancel()
	resp, err := h.consoleAuth.SignIn(ctx, req)
	if isUnauthenticated(err) {
		h.renderLogin(w, r, http.StatusUnauthorized, d, "Invalid credentials")
		return
	}
	if err != nil {
		h.renderLogin(w, r, asAPIError(err).Status, d, asAPIError(err).Message)
		return
	}
	h.setCookie(w, sessionCookie, resp.GetSessionToken(), 0)
	next := d.Next
	if next == "" {
		next = "/console/"
	}
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (h *Handler) logout(w http.ResponseWriter, r *http.Request, s *session) {
	ctx, cancel := withCredential(r.Context(), s.token)
	defer cancel()
	if _, err := h.consoleAuth.SignOut(ctx, &accountsv1.SignOutRequest{}); err != nil && !isUnauthenticated(err) {
		h.errorPage(w, r, s, asAPIError(err))
		return
	}
	h.clearSession(w)
	h.toLogin(w, r, "signed-out")
}
