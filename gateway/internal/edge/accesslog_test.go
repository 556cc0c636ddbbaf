package edge

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/pkg/telemetry"
	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
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

// A client that escapes a letter of a route's word (/%70ortal/TOKEN,
// /v1/export%2Dlicense/KEY) reaches the route, since the routes read each segment
// unescaped; its access line, written by the process logger with LOG_LICENSE_KEYS=masked,
// and the span's url.path read the path the same way and hold neither the portal token
// nor the license key, in any spelling. A key that spans segments (sent with its "/"
// unescaped to a path that names no route) has every part masked.
func TestAccessLogAndSpanHideASecretHoweverThePathIsEscaped(t *testing.T) {
	t.Parallel()
	const (
		key    = "M8PF-ABCD-EFGH-IJKL-9XYZ"
		token  = "29Oa1ZvSecretPortalToken"
		legacy = "ABCD-1234-EFGH-5678"
	)
	b := &keyBackend{}
	var pagesGot []string
	var pagesMu sync.Mutex
	pages := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pagesMu.Lock()
		pagesGot = append(pagesGot, r.URL.Path)
		pagesMu.Unlock()
		_, _ = w.Write([]byte("page"))
	})
	escapedKey := strings.ReplaceAll(url.PathEscape(key), "M", "%4D")
	secrets := []string{token, key, escapedKey, legacy, "LEGACY"}
	for _, format := range []string{"json", "text"} {
		var logged bytes.Buffer
		log := telemetry.NewLogger(&logged, "gateway", "debug", format)
		h, err := New(context.Background(), Options{Log: log, Conns: serveBackends(t, b.handle), Pages: pages})
		if err != nil {
			t.Fatal(err)
		}
		// A recording span around each request, as otelhttp starts one (the text
		// logger's own line is written only without one: both ways are run).
		spans := tracetest.NewSpanRecorder()
		tracer := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)).Tracer("test")
		for _, traced := range []bool{false, true} {
			for _, tc := range []struct{ path, reached string }{
				{"/%70ortal/" + token, "page /portal/" + token},
				{"/%70ortal/" + token + "/seats", "page /portal/" + token + "/seats"},
				{"/portal/%32%39Oa1ZvSecretPortalToken", "page /portal/" + token},
				{"/console/licen%73es/" + key, "page /console/licenses/" + key},
				{"/v1/export%2Dlicense/" + key + "/offline", licensingv1.LicensingService_ExportLicenseOffline_FullMethodName + " " + key},
				{"/v1/%61dmin/license/" + key, licensingv1.LicensingService_GetLicenseDetails_FullMethodName + " " + key},
				{"/v1/%61dmin/license/" + escapedKey, licensingv1.LicensingService_GetLicenseDetails_FullMethodName + " " + key},
				{"/%76%31/list%2Dactivations/" + key, activationsv1.ActivationsService_ListActivations_FullMethodName + " " + key},
				{"/v1/export-license/LEGACY/" + legacy + "/file", ""},
			} {
				logged.Reset()
				r := httptest.NewRequest(http.MethodGet, "http://keyhouse"+tc.path, nil)
				var span trace.Span
				if traced {
					var ctx context.Context
					ctx, span = tracer.Start(r.Context(), "request")
					r = r.WithContext(ctx)
				}
				h.ServeHTTP(httptest.NewRecorder(), r)
				if span != nil {
					span.End()
				}
				telemetry.FlushLogs(time.Minute)
				reached := b.take()
				pagesMu.Lock()
				for _, p := range pagesGot {
					reached = append(reached, "page "+p)
				}
				pagesGot = nil
				pagesMu.Unlock()
				if tc.reached != "" && (len(reached) != 1 || reached[0] != tc.reached) {
					t.Errorf("GET %s reached %q, want %q", tc.path, reached, tc.reached)
				}
				line := logged.String()
				for _, secret := range secrets {
					if strings.Contains(line, secret) {
						t.Errorf("%s, traced %v: GET %s: %q is in the access line %s", format, traced, tc.path, secret, line)
					}
				}
				if !strings.Contains(line, "/v1/") && !strings.Contains(line, "/portal/") && !strings.Contains(line, "/console/") {
					t.Errorf("%s: GET %s: no route in the access line %s", format, tc.path, line)
				}
				if !traced {
					continue
				}
				ended := spans.Ended()
				var path string
				for _, a := range ended[len(ended)-1].Attributes() {
					if a.Key == "url.path" {
						path = a.Value.AsString()
					}
				}
				if path == "" {
					t.Errorf("GET %s: the span has no url.path", tc.path)
				}
				for _, secret := range secrets {
					if strings.Contains(path, secret) {
						t.Errorf("GET %s: %q is in the span's url.path %s", tc.path, secret, path)
					}
				}
			}
		}
	}
}
