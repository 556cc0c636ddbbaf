package edge

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/metadata"
)

// A path with an empty, . or .. segment is a JSON 400, not http.ServeMux's 307 with an
// HTML body (which sent a POST on to another route); one that cleans to a page keeps the
// redirect. Two Authorization headers are a 400 too, on every route.
func TestAmbiguousRequestsAreAJSON400(t *testing.T) {
	t.Parallel()
	b := &backends{}
	pages := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("page")) })
	h, err := New(context.Background(), Options{Log: slog.New(slog.DiscardHandler), Conns: serveBackends(t, b.handle), Pages: pages})
	if err != nil {
		t.Fatal(err)
	}
	serve := func(method, target string, header ...string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, "http://keyhouse"+target, nil)
		for i := 0; i+1 < len(header); i += 2 {
			r.Header.Add(header[i], header[i+1])
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	const badPath = `{"error":"Invalid URL: the path has an empty, . or .. segment"}`
	for _, tc := range []struct{ method, path string }{
		{http.MethodGet, "/v1/products/../policies"},
		{http.MethodPost, "/v1/webhook-endpoints/../update"},
		{http.MethodGet, "//v1/list-licenses"},
		{http.MethodGet, "/v1/./list-licenses"},
		{http.MethodPost, "/v1/verify-license/.."},
		{http.MethodPost, "/console/../v1/issue-license"}, // cleans to an API route
	} {
		if w := serve(tc.method, tc.path); w.Code != http.StatusBadRequest || w.Body.String() != badPath {
			t.Errorf("%s %s: %d %s", tc.method, tc.path, w.Code, w.Body)
		}
	}
	// A path that cleans to a page keeps http.ServeMux's redirect; a trailing slash is no
	// empty segment.
	if w := serve(http.MethodGet, "/portal/../console/x"); w.Code != http.StatusTemporaryRedirect || w.Header().Get("Location") != "/console/x" {
		t.Errorf("a page's path: %d %v", w.Code, w.Header())
	}
	if w := serve(http.MethodGet, "/v1/list-licenses/"); w.Code != http.StatusNotFound {
		t.Errorf("a trailing slash: %d %s", w.Code, w.Body)
	}
	// An escaped slash is a segment's data, not a boundary: the route answers (here the
	// stand-in service's Unimplemented, 404).
	if w := serve(http.MethodGet, "/v1/export-license/a%2F..%2Fb"); w.Code != http.StatusNotFound {
		t.Errorf("escaped slashes: %d %s", w.Code, w.Body)
	}
	b.take()

	const twice = `{"error":"Authorization must be sent once"}`
	for _, path := range []string{"/v1/list-licenses", "/v1/verify-license"} {
		for _, method := range []string{http.MethodGet, http.MethodPost} {
			w := serve(method, path, "Authorization", "Bearer right", "Authorization", "Bearer wrong")
			if w.Code != http.StatusBadRequest || w.Body.String() != twice {
				t.Errorf("%s %s with two Authorization headers: %d %s", method, path, w.Code, w.Body)
			}
		}
	}
	if called := b.take(); len(called) != 0 {
		t.Errorf("refused requests reached the services: %v", called)
	}
}

// A REST call's credential reaches the service once: grpc-gateway passes Authorization on
// by itself, and the services refuse two different values (and a gateway that listed it
// among its headers too sent each one twice).
func TestTheCredentialReachesTheServiceOnce(t *testing.T) {
	mux := newServeMux(&runtime.JSONPb{})
	r := httptest.NewRequest(http.MethodGet, "/v1/list-licenses", nil)
	r.Header.Set("Authorization", "Bearer kh_key")
	ctx, err := runtime.AnnotateContext(r.Context(), mux, r, "/keyhouse.licensing.v1.LicensingService/ListLicenses", runtime.WithHTTPPathPattern("/v1/list-licenses"))
	if err != nil {
		t.Fatal(err)
	}
	md, _ := metadata.FromOutgoingContext(ctx)
	if got := md.Get("authorization"); len(got) != 1 || got[0] != "Bearer kh_key" {
		t.Fatalf("authorization metadata %q, want the header's value once", got)
	}
}
