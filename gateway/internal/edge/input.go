package edge

import (
	"compress/gzip"
	"errors"
	"io"
	"net/http"
	"net/url"
	"unicode/utf8"
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

// withUTF8URL refuses a path or query that is not UTF-8 once decoded: no route, key or
// filter can match it, and gRPC cannot carry it (it was a 500).
func withUTF8URL(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !utf8.ValidString(r.URL.Path) {
			writeError(w, http.StatusBadRequest, "Invalid URL: the path is not UTF-8", nil)
			return
		}
		if name, ok := invalidQueryParam(r.URL.RawQuery); !ok {
			if name == "" || !utf8.ValidString(name) {
				writeError(w, http.StatusBadRequest, "Invalid URL: the query is not UTF-8", nil)
				return
			}
			writeError(w, http.StatusBadRequest, "Invalid value for query parameter "+name, nil)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// invalidQueryParam finds the first query parameter whose name or value is not UTF-8
// once decoded (ok false), and returns its name.
func invalidQueryParam(raw string) (name string, ok bool) {
	if raw == "" {
		return "", true
	}
	query, err := url.ParseQuery(raw)
	if err != nil {
		// grpc-gateway answers a malformed query itself; only UTF-8 is checked here.
		return "", true
	}
	for k, values := range query {
		if !utf8.ValidString(k) {
			return k, false
		}
		for _, v := range values {
			if !utf8.ValidString(v) {
				return k, false
			}
		}
	}
	return "", true
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
