package edge

import (
	"compress/gzip"
	"errors"
	"io"
	"net/http"
	"net/url"
	"unicode/utf8"

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
