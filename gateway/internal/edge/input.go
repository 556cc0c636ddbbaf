package edge

import (
	"compress/gzip"
	"errors"
	"io"
	"net/http"
	"net/url"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/keyhouse/keyhouse/pkg/auth"
	"github.com/keyhouse/keyhouse/pkg/input"
)

// withHeadAsGet answers HEAD as the GET of the same URL; net/http sends the headers and
// drops the body, because the server still sees the original HEAD request.
func withHeadAsGet(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodHead {
			get := r.WithContext(r.Context()) // a copy: the server's own request stays HEAD
			get.Method = http.MethodGet
			r = get
		}
		next.ServeHTTP(w, r)
	})
}

// withInputPolicy applies the input policy (pkg/input) to the URL before any route sees
// it: a path or query value that is not UTF-8 or holds a control character once decoded
// matches no route, key or filter, and gRPC cannot carry the first kind (it was a 500).
func withInputPolicy(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if msg := urlProblem(r.URL.Path, r.URL.RawQuery); msg != "" {
			writeError(w, http.StatusBadRequest, msg, nil)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// withCanonicalPaths refuses a path with an empty, "." or ".." segment ("//v1/…",
// "/v1/products/../policies"), exactly the paths http.ServeMux would redirect to their
// cleaned form: the root mux in front of the pages answered them with a 307 and an HTML
// body, and sent a POST on to whatever route the cleaned path named. A path that cleans
// to the console's or the portal's (pages) keeps ServeMux's redirect, as a web page's
// link may.
func withCanonicalPaths(pages bool, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodConnect {
			// The escaped path, as ServeMux compares it: an escaped slash is a segment's
			// data (a key), not a segment boundary.
			escaped := r.URL.EscapedPath()
			if clean := cleanPath(escaped); clean != escaped && !(pages && isPagePath(clean)) {
				writeError(w, http.StatusBadRequest, "Invalid URL: the path has an empty, . or .. segment", nil)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// cleanPath is http.ServeMux's canonical path of p: p cleaned by path.Clean, a trailing
// slash kept.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		np += "/"
	}
	return np
}

// isPagePath: p is the console's or the portal's (Options.Pages).
func isPagePath(p string) bool {
	return p == "/console" || strings.HasPrefix(p, "/console/") || strings.HasPrefix(p, "/portal/")
}

// withOneAuthorization refuses a request with more than one Authorization header.
// Authorization is not a list header (RFC 9110), so two are ambiguous: the services and
// admission control judged the first, and a proxy in front may judge another. The
// services refuse two authorization values of a direct gRPC call with the same words.
func withOneAuthorization(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.Header.Values("Authorization")) > 1 {
			writeError(w, http.StatusBadRequest, auth.ErrAuthorizationTwice.Message, nil)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// urlProblem is the answer to a decoded path and raw query the input policy refuses, or "".
func urlProblem(path, rawQuery string) string {
	switch input.Identifier(path) {
	case input.OK:
	case input.Control, input.NUL:
		return "Invalid URL: the path contains a control character"
	default:
		return "Invalid URL: the path is not UTF-8"
	}
	if rawQuery == "" {
		return ""
	}
	query, err := url.ParseQuery(rawQuery)
	if err != nil {
		// grpc-gateway answers a malformed query itself; only the policy is checked here.
		return ""
	}
	var bad *input.Error
	if errors.As(input.CheckValues(query), &bad) {
		if bad.Field == input.NameField {
			if bad.Problem == input.NotUTF8 {
				return "Invalid URL: the query is not UTF-8"
			}
			// NUL or another control character.
			return "Invalid URL: a query parameter name contains a control character"
		}
		return "Invalid value for query parameter " + bad.Field
	}
	return ""
}

// maxErrorRunes caps error messages: several echo the client's input (a metric name, a
// limit key, a JSON value), which may be up to 1 MiB.
const maxErrorRunes = 200

func capMessage(msg string) string {
	if utf8.RuneCountInString(msg) <= maxErrorRunes {
		return msg
	}
	n := 0
	for i := range msg {
		if n == maxErrorRunes {
			return msg[:i] + "…"
		}
		n++
	}
	return msg
}

var errBadGzip = errors.New("body is not valid gzip")

// gunzip decodes a gzip request body, opened on first read. Errors of the compressed
// body itself (the cap, the read timeout) pass through unchanged for the error handler.
type gunzip struct {
	src *limitedBody
	zr  *gzip.Reader
}

func (g *gunzip) Read(p []byte) (int, error) {
	if g.zr == nil {
		zr, err := gzip.NewReader(g.src)
		if err == io.EOF {
			return 0, io.EOF // an empty body stays empty
		}
		if err != nil {
			return 0, g.wrap(err)
		}
		g.zr = zr
	}
	n, err := g.zr.Read(p)
	if err != nil && err != io.EOF {
		err = g.wrap(err)
	}
	return n, err
}

func (g *gunzip) wrap(err error) error {
	if g.src.exceeded || g.src.timedOut {
		return err
	}
	return errors.Join(errBadGzip, err)
}

func (g *gunzip) Close() error { return g.src.Close() }
