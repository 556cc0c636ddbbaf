package console

import (
	"bytes"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	accountsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/accounts/v1"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// view is what every page template gets.
type view struct {
	Title string
	// Nav names the active section of the console's navigation.
	Nav     string
	Account *accountsv1.GetAccountResponse
	CSRF    string
	Notice  string
	// NoticeIn names the section of the page the notice belongs to (the one whose form
	// the person used); "" shows it at the top of the page.
	NoticeIn string
	// Error is a message for the whole form or page; Fields holds messages beside fields.
	Error  string
	Fields map[string]string
	// Form holds the submitted values, so a refused form keeps what was typed.
	Form url.Values
	Data any
	// Portal marks the end-user portal's pages: no way into the console from there.
	Portal bool
}

// fieldArgs are the arguments of the "field" partial.
type fieldArgs struct {
	View                    *view
	Name, Label, Type, Hint string
	Required                bool
}

// FieldError is the message shown beside a field.
func (v *view) FieldError(name string) string { return v.Fields[name] }

// Value is the submitted value of a field.
func (v *view) Value(name string) string { return v.Form.Get(name) }

// Hosted reports hosted mode for the navigation.
func (v *view) Hosted() bool { return v.Account != nil && v.Account.GetMultiTenant() }

func parseTemplates() (map[string]*template.Template, error) {
	funcs := template.FuncMap{
		"when":       formatTime,
		"eventWhen":  formatEventTime,
		"date":       formatDate,
		"limits":     formatLimits,
		"cap":        formatCap,
		"num":        formatNumber,
		"query":      withQuery,
		"clip":       clip,
		"components": formatComponents,
		"add1":       func(n int) int { return n + 1 },
		"dict":       dict,
		"formErrors": formErrors,
		"noticeIn":   noticeIn,
		"sub1":       func(n int) int { return n - 1 },
		"fieldArgs": func(v *view, name, label, typ, hint string, required bool) fieldArgs {
			return fieldArgs{View: v, Name: name, Label: label, Type: typ, Hint: hint, Required: required}
		},
		// keypath is a license key as one path segment (/console/licenses/{{keypath .Key}}):
		// an imported key may hold "/", "?", "#" or "%", which must reach the page as data.
		"keypath": url.PathEscape,
	}
	layout, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/partials.html")
	if err != nil {
		return nil, err
	}
	files, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	pages := map[string]*template.Template{}
	for _, f := range files {
		name := strings.TrimSuffix(path.Base(f), ".html")
		if name == "layout" || name == "partials" {
			continue
		}
		t, err := template.Must(layout.Clone()).ParseFS(templateFS, f)
		if err != nil {
			return nil, fmt.Errorf("template %s: %w", name, err)
		}
		pages[name] = t
	}
	return pages, nil
}

// dict builds a partial's arguments from name, value pairs ("confirm" takes its
// question this way).
func dict(kv ...any) (map[string]any, error) {
	if len(kv)%2 != 0 {
		return nil, fmt.Errorf("dict: %d arguments, want name, value pairs", len(kv))
	}
	m := make(map[string]any, len(kv)/2)
	for i := 0; i < len(kv); i += 2 {
		k, ok := kv[i].(string)
		if !ok {
			return nil, fmt.Errorf("dict: name %v is not a string", kv[i])
		}
		m[k] = kv[i+1]
	}
	return m, nil
}

// formError is one line of an error summary: the message, and the id of the field it
// is about ("" for a message about the whole form).
type formError struct{ Field, Message string }

// formErrors is the "form_errors" partial's list. Without fields it holds the message
// about the whole page or form (view.Error); with fields, the messages beside those of
// the form's fields that were refused, in the form's order. A name ending in "*" stands
// for every field with that prefix (limit_*), sorted.
func formErrors(v *view, fields ...string) []formError {
	if len(fields) == 0 {
		if v.Error == "" {
			return nil
		}
		return []formError{{Message: v.Error}}
	}
	var out []formError
	for _, f := range fields {
		if prefix, ok := strings.CutSuffix(f, "*"); ok {
			var names []string
			for name := range v.Fields {
				if strings.HasPrefix(name, prefix) {
					names = append(names, name)
				}
			}
			sort.Strings(names)
			for _, name := range names {
				out = append(out, formError{Field: name, Message: v.Fields[name]})
			}
			continue
		}
		if msg := v.Fields[f]; msg != "" {
			out = append(out, formError{Field: f, Message: msg})
		}
	}
	return out
}

// noticeIn is the page's notice when it belongs to the section named, else "".
func noticeIn(v *view, section string) string {
	if v.NoticeIn != section {
		return ""
	}
	return v.Notice
}

// maxCellRunes is the longest value a table cell shows whole: an id, a customer or a
// checkout session of any length (one was 900 KB) keeps the table readable.
const maxCellRunes = 48

// clip shows a table cell's value, escaped: whole when short, else its first
// maxCellRunes characters and "…" for the eye, with the whole value beside it for screen
// readers and shown whole when the value (or the link around it) has keyboard focus;
// the title shows it on hover. In a link, pass "link": the link is the focus stop, and a
// second one inside it would nest interactive elements.
func clip(s string, in ...string) template.HTML {
	short := ellipsize(s, maxCellRunes)
	if short == s {
		return template.HTML(template.HTMLEscapeString(s))
	}
	focus := ` tabindex="0"`
	if len(in) > 0 && in[0] == "link" {
		focus = ""
	}
	full := template.HTMLEscapeString(s)
	return template.HTML(`<span class="clipped"` + focus + ` title="` + full + `"><span class="clip-short" aria-hidden="true">` +
		template.HTMLEscapeString(short) + `</span><span class="clip-full">` + full + `</span></span>`)
}

// ellipsize cuts s to max characters, the last of them "…".
func ellipsize(s string, max int) string {
	n := 0
	for i := range s {
		if n == max-1 {
			if utf8.RuneCountInString(s[i:]) > 1 {
				return s[:i] + "…"
			}
			return s
		}
		n++
	}
	return s
}

// render writes a page; a template error is a bug and answers a plain 500.
func (h *Handler) render(w http.ResponseWriter, code int, name string, v *view) {
	t, ok := h.pages[name]
	if !ok {
		h.opts.Log.Error("console: no such template", "template", name)
		http.Error(w, "Internal server error", http.StatusInternalServerError)
		return
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "layout.html", v); err != nil {
		h.opts.Log.Error("console: template failed", "template", name, "error", err.Error())
		http.Error(w, "Internal server error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}

// errorPage shows an API error as a page with its HTTP status.
func (h *Handler) errorPage(w http.ResponseWriter, _ *http.Request, s *session, e *apiError) {
	v := &view{Title: http.StatusText(e.Status), Error: e.Message, Data: e}
	if s != nil {
		v.Account, v.CSRF = s.account, s.csrf
	}
	h.render(w, e.Status, "error", v)
}

// notFound answers an unknown /console/ or /portal/ path; a signed-in person keeps the
// console's header and navigation (the session cookie is the console's only).
func (h *Handler) notFound(w http.ResponseWriter, r *http.Request) {
	h.errorPage(w, r, h.signedInOrNil(r), &apiError{Status: http.StatusNotFound, Message: "Not found"})
}

// pageView starts a view for a signed-in page.
func pageView(s *session, title, nav string) *view {
	return &view{Title: title, Nav: nav, Account: s.account, CSRF: s.csrf, Fields: map[string]string{}, Form: url.Values{}}
}

// fieldFor picks the form field an API message is about: the first field name it
// mentions, or "" for a message about the whole form.
func fieldFor(msg string, fields ...string) string {
	lower := strings.ToLower(msg)
	best, at := "", len(lower)+1
	for _, f := range fields {
		if i := strings.Index(lower, strings.ToLower(f)); i >= 0 && i < at {
			best, at = f, i
		}
	}
	return best
}

// showError puts an API error beside its field, or at the top of the form.
func (v *view) showError(err error, fields ...string) int {
	e := asAPIError(err)
	if f := fieldFor(e.Message, fields...); f != "" {
		v.Fields[f] = e.Message
	} else {
		v.Error = e.Message
	}
	return e.Status
}

func formatTime(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return ""
	}
	return ts.AsTime().UTC().Format("2006-01-02 15:04 UTC")
}

// formatEventTime is formatTime for an event's created_at, which is a string
// (RFC 3339, six fractional digits).
func formatEventTime(v string) string {
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return v
	}
	return formatTime(timestamppb.New(t))
}

func formatDate(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return ""
	}
	return ts.AsTime().UTC().Format("2006-01-02")
}

// formatLimits prints a limits object as "seats 5, users 10", keys sorted.
func formatLimits(s *structpb.Struct) string {
	if s == nil || len(s.GetFields()) == 0 {
		return ""
	}
	m := s.AsMap()
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %v", k, formatNumber(m[k])))
	}
	return strings.Join(parts, ", ")
}

func formatCap(c *wrapperspb.Int32Value) string {
	if c == nil {
		return "unlimited"
	}
	return strconv.Itoa(int(c.GetValue()))
}

func formatNumber(v any) string {
	switch n := v.(type) {
	case float64:
		return strconv.FormatFloat(n, 'f', -1, 64)
	case int32:
		return strconv.Itoa(int(n))
	case int:
		return strconv.Itoa(n)
	}
	return fmt.Sprint(v)
}

// withQuery returns base with the key=value pairs set (for pagination links).
func withQuery(base string, q url.Values, kv ...string) string {
	out := url.Values{}
	for k, v := range q {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == "" {
			out.Del(kv[i])
		} else {
			out.Set(kv[i], kv[i+1])
		}
	}
	if len(out) == 0 {
		return base
	}
	return base + "?" + out.Encode()
}

// optional is a filter value for an optional proto field: unset when empty.
func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
