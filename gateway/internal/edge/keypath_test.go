package edge

import (
	"context"
	"log/slog"
	"mime"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// keyBackend stands in for every service: it records each call's method and the key
// its request carries (field 1 of every key-in-path request), and answers Unimplemented.
type keyBackend struct {
	mu    sync.Mutex
	calls []string
}

func (b *keyBackend) handle(_ any, stream grpc.ServerStream) error {
	m, _ := grpc.MethodFromServerStream(stream)
	var req licensingv1.GetLicenseDetailsRequest // key = 1, as in every request below
	if err := stream.RecvMsg(&req); err != nil {
		return err
	}
	b.mu.Lock()
	b.calls = append(b.calls, m+" "+req.GetKey())
	b.mu.Unlock()
	return status.Error(codes.Unimplemented, "test backend")
}

func (b *keyBackend) take() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.calls
	b.calls = nil
	return c
}

// importedKeys are keys import.md allows (any printable ASCII): each reaches every
// key-in-path route whole when sent as one escaped segment.
var importedKeys = []string{
	"aGVsbG8/d29y+bGQ=529843", `PCT%41?Q#F&x`, `QU"OTE\KEY;1`, "../../x", "a/b/c/d/e/f",
	"sp ace:colon@at", "%2F%2e%2E", "KEY-with.dots..", "7KQ2-M9XD-4HRT-0BWN-ZC3E-5J8P-1A6G",
}

func TestKeyInPathReachesTheServiceWhole(t *testing.T) {
	t.Parallel()
	b := &keyBackend{}
	h, err := New(context.Background(), Options{Log: slog.New(slog.DiscardHandler), Conns: serveBackends(t, b.handle)})
	if err != nil {
		t.Fatal(err)
	}
	routes := []struct{ format, method string }{
		{"/v1/admin/license/%s", licensingv1.LicensingService_GetLicenseDetails_FullMethodName},
		{"/v1/list-activations/%s", activationsv1.ActivationsService_ListActivations_FullMethodName},
		{"/v1/export-license/%s", licensingv1.LicensingService_ExportLicense_FullMethodName},
		{"/v1/export-license/%s/offline", licensingv1.LicensingService_ExportLicenseOffline_FullMethodName},
		{"/v1/export-license/%s/file", licensingv1.LicensingService_ExportLicenseFile_FullMethodName},
	}
	for _, key := range importedKeys {
		for _, route := range routes {
			target := strings.Replace(route.format, "%s", url.PathEscape(key), 1)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "http://keyhouse"+target, nil))
			want := route.method + " " + key
			if got := b.take(); len(got) != 1 || got[0] != want {
				t.Errorf("GET %s: the services got %q, want %q (%d %s)", target, got, want, w.Code, w.Body)
			}
		}
	}
}

// A "/" the client sent still separates segments, an escaped letter of a route's word
// still names the route (as when the mux split the unescaped path), and an escaped "/"
// is never a separator between a route's words.
func TestPathSegmentsAreTheClientsOwn(t *testing.T) {
	t.Parallel()
	b := &keyBackend{}
	h, err := New(context.Background(), Options{Log: slog.New(slog.DiscardHandler), Conns: serveBackends(t, b.handle)})
	if err != nil {
		t.Fatal(err)
	}
	const notFound = `{"error":"Not found"}`
	for _, tc := range []struct {
		target string
		code   int
		call   string // "" when no service may be called
	}{
		{"/v1/admin/license/a/b", http.StatusNotFound, ""},
		{"/v1/export-license/a/b/offline", http.StatusNotFound, ""},
		{"/v1/%61dmin/license/ABC", http.StatusNotFound, licensingv1.LicensingService_GetLicenseDetails_FullMethodName + " ABC"},
		{"/v1/admin/license/%41BC", http.StatusNotFound, licensingv1.LicensingService_GetLicenseDetails_FullMethodName + " ABC"},
		{"/v1/admin%2Flicense/ABC", http.StatusNotFound, ""},
		{"/v1/export-license/ABC%2Foffline", http.StatusNotFound, licensingv1.LicensingService_ExportLicense_FullMethodName + " ABC/offline"},
	} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "http://keyhouse"+tc.target, nil))
		got := b.take()
		switch {
		case tc.call == "" && (len(got) != 0 || w.Code != tc.code || w.Body.String() != notFound):
			t.Errorf("GET %s: %d %s, the services got %q; want the mux's 404", tc.target, w.Code, w.Body, got)
		case tc.call != "" && (len(got) != 1 || got[0] != tc.call):
			t.Errorf("GET %s: the services got %q, want %q", tc.target, got, tc.call)
		}
	}
	// POST to a GET route with a key holding "/" is the mux's 405, as for any key.
	for _, target := range []string{"/v1/admin/license/ABC", "/v1/admin/license/a%2Fb"} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "http://keyhouse"+target, nil))
		if w.Code != http.StatusMethodNotAllowed || len(b.take()) != 0 {
			t.Errorf("POST %s: %d %s", target, w.Code, w.Body)
		}
	}
}

func TestLicenseFileDispositionIsWellFormedForAnyKey(t *testing.T) {
	t.Parallel()
	// A Keyhouse key's header is as it always was.
	if got, want := licenseFileDisposition("7KQ2-M9XD-4HRT-0BWN-ZC3E-5J8P-1A6G"), `attachment; filename="license-7KQ2-M9XD-4HRT-0BWN-ZC3E-5J8P-1A6G.lic"`; got != want {
		t.Errorf("a Keyhouse key: %s, want %s", got, want)
	}
	keys := append([]string{}, importedKeys...)
	var all []byte
	for c := byte(0x20); c < 0x7f; c++ {
		all = append(all, c)
	}
	keys = append(keys, string(all), `"; filename="evil.exe`, `\"\\`, "a;b=c")
	for _, key := range keys {
		header := licenseFileDisposition(key)
		kind, params, err := mime.ParseMediaType(header)
		if err != nil || kind != "attachment" {
			t.Errorf("key %q: %s does not parse: %v", key, header, err)
			continue
		}
		if want := "license-" + key + ".lic"; params["filename"] != want {
			t.Errorf("key %q: %s names %q, want %q", key, header, params["filename"], want)
		}
		// The fallback filename= (for a reader without RFC 8187) is a plain quoted name.
		fallback, _, _ := strings.Cut(strings.TrimPrefix(header, `attachment; filename="`), `"`)
		for i := 0; i < len(fallback); i++ {
			if !fileNameSafe(fallback[i]) {
				t.Errorf("key %q: the fallback %q holds %q", key, fallback, fallback[i])
			}
		}
		if len(fallback) != len("license-"+key+".lic") {
			t.Errorf("key %q: the fallback %q", key, fallback)
		}
	}
}
