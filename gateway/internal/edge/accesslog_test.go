package edge

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A request to a path that names no route (a mistyped route, a page the console does not
// have) is logged with every segment that is not a route word masked: such a path may
// carry a key or token where no route says which segment holds it. A route's path, a
// page's and a routed 404's are logged as sent (the logger's RedactPath then masks the
// keys of the routes that carry one).
func TestAccessLogMasksEverySegmentOfAPathThatNamesNoRoute(t *testing.T) {
	t.Parallel()
	const key = "M8PF-ABCD-EFGH-IJKL-9XYZ"
	var logged bytes.Buffer
	pages := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/console/settings" {
			_, _ = w.Write([]byte("page"))
			return
		}
		http.NotFound(w, r)
	})
	h, err := New(context.Background(), Options{Log: slog.New(slog.NewJSONHandler(&logged, nil)), Conns: serveBackends(t, (&backends{}).handle), Pages: pages})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ method, path, logged string }{
		{http.MethodGet, "/v1/admin/licenses/" + key, "/v1/admin/licenses/M8PF…9XYZ"},
		{http.MethodPost, "/v1/verify-license/" + key, "/v1/verify-license/M8PF…9XYZ"},
		{http.MethodGet, "/v1/export-licence/" + key + "/file", "/v1/expo…ence/M8PF…9XYZ/file"},
		{http.MethodGet, "/console/license/" + key, "/console/license/M8PF…9XYZ"},
		{http.MethodGet, "/v1/list-licenses/", "/v1/list-licenses/"},
		// Routes and pages, whatever they answered, are logged as sent.
		{http.MethodGet, "/v1/admin/license/" + key, "/v1/admin/license/" + key},
		{http.MethodDelete, "/v1/admin/license/" + key, "/v1/admin/license/" + key},
		{http.MethodGet, "/v1/products/prod-17/policies", "/v1/products/prod-17/policies"},
		{http.MethodGet, "/console/settings", "/console/settings"},
		{http.MethodGet, "/", "/"},
	} {
		logged.Reset()
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(tc.method, "http://keyhouse"+tc.path, nil))
		var line struct{ Path string }
		if err := json.Unmarshal(logged.Bytes(), &line); err != nil {
			t.Fatalf("%s %s: the access line %q: %v", tc.method, tc.path, logged.String(), err)
		}
		if line.Path != tc.logged {
			t.Errorf("%s %s logged as %q, want %q", tc.method, tc.path, line.Path, tc.logged)
		}
		if tc.path != tc.logged && strings.Contains(logged.String(), key) {
			t.Errorf("%s %s: the key is in the line %s", tc.method, tc.path, logged.String())
		}
	}
}
