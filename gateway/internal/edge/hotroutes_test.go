package edge

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// The hot mux answers each hot route exactly as the whole mux does: the same route (the
// metrics label), the same backend calls, status, headers and body, for bodies that take
// every path of the handlers (the plain reading, the generic one, its refusals).
func TestHotRoutesMatchTheWholeMux(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &backends{}
	srv := grpc.NewServer(grpc.UnknownServiceHandler(b.handle))
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	opts := Options{Log: slog.New(slog.DiscardHandler), Conns: Conns{Licensing: conn, Activations: conn, Releases: conn, Billing: conn, Storefront: conn, Events: conn}}
	mux, hot, err := newMuxes(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	bodies := []string{
		`{"key":"KEY-1","instance_id":"host-1"}`,
		`{"key":"KEY-1","product_id":"p","channel":"stable","platform":"linux","current_version":"1.0.0"}`,
		`{"key":"KEY-\u00e9"}`, `{"key":1}`, `{"key":"a","key":"b"}`, `{"unknown":"x"}`, `{}`, ``, `{`, `[]`, `null`,
		`{"key":"a\u0000"}`, `{"key":"KEY-1","extra":{"nested":[1,2]}}`,
	}
	serve := func(h http.Handler, path, body string) (*httptest.ResponseRecorder, string, []string) {
		holder := &routeHolder{}
		r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		r = r.WithContext(context.WithValue(r.Context(), routeKey{}, holder))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w, holder.pattern, b.take()
	}
	for path := range hotRoutes {
		for _, body := range bodies {
			wantW, wantRoute, wantCalls := serve(mux, path, body)
			gotW, gotRoute, gotCalls := serve(hot, path, body)
			if gotRoute != wantRoute || wantRoute != path {
				t.Errorf("%s %s: route %q, whole mux %q", path, body, gotRoute, wantRoute)
			}
			if !slices.Equal(gotCalls, wantCalls) {
				t.Errorf("%s %s: calls %v, whole mux %v", path, body, gotCalls, wantCalls)
			}
			if gotW.Code != wantW.Code || gotW.Body.String() != wantW.Body.String() {
				t.Errorf("%s %s: %d %s, whole mux %d %s", path, body, gotW.Code, gotW.Body, wantW.Code, wantW.Body)
			}
			for k, v := range wantW.Header() {
				if !slices.Equal(gotW.Header()[k], v) {
					t.Errorf("%s %s: header %s %q, whole mux %q", path, body, k, gotW.Header()[k], v)
				}
			}
			if len(gotW.Header()) != len(wantW.Header()) {
				t.Errorf("%s %s: headers %v, whole mux %v", path, body, gotW.Header(), wantW.Header())
			}
		}
	}
}

// Only a POST to a hot route's literal path, without query or method override, takes the
// short cut; everything else goes the whole way.
func TestWithHotRoutesTakesOnlyTheExactRoutes(t *testing.T) {
	t.Parallel()
	var took string
	h := withHotRoutes(
		http.HandlerFunc(func(http.ResponseWriter, *http.Request) { took = "hot" }),
		http.HandlerFunc(func(http.ResponseWriter, *http.Request) { took = "whole" }))
	for _, c := range []struct {
		method, target, override, want string
	}{
		{http.MethodPost, "/v1/verify-license", "", "hot"},
		{http.MethodPost, "/v1/validate-license", "", "hot"},
		{http.MethodPost, "/v1/check-update", "", "hot"},
		{http.MethodGet, "/v1/verify-license", "", "whole"},
		{http.MethodHead, "/v1/verify-license", "", "whole"},
		{http.MethodPost, "/v1/verify-license?x=1", "", "whole"},
		{http.MethodPost, "/v1/verify-license?x=%ff", "", "whole"},
		{http.MethodPost, "/v1/verify%2Dlicense", "", "whole"},
		{http.MethodPost, "/v1/verify-license/", "", "whole"},
		{http.MethodPost, "/v1//verify-license", "", "whole"},
		{http.MethodPost, "/v1/verify-license", "GET", "whole"},
		{http.MethodPost, "/v1/activate-license", "", "whole"},
	} {
		took = ""
		r := httptest.NewRequest(c.method, c.target, nil)
		if c.override != "" {
			r.Header.Set("X-HTTP-Method-Override", c.override)
		}
		h.ServeHTTP(httptest.NewRecorder(), r)
		if took != c.want {
			t.Errorf("%s %s (override %q): went %s, want %s", c.method, c.target, c.override, took, c.want)
		}
	}
}
