package edge

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/keyhouse/keyhouse/pkg/metrics"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestReadyzListsWhatIsNotReady(t *testing.T) {
	var missing []string
	h := readyz(func() []string { return missing })
	serve := func() *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h(w, httptest.NewRequest(http.MethodGet, ReadyzPath, nil), nil)
		return w
	}
	if w := serve(); w.Code != 200 || w.Body.String() != `{"status":"ready"}` {
		t.Fatalf("ready: %d %s", w.Code, w.Body)
	}
	missing = []string{"licensing", "redis"}
	if w := serve(); w.Code != 503 || w.Body.String() != `{"error":"Not ready","not_ready":["licensing","redis"]}` {
		t.Fatalf("not ready: %d %s", w.Code, w.Body)
	}
}

func TestEveryRequestGetsTheBudgetAsItsDeadline(t *testing.T) {
	var left time.Duration
	h := withBudget(3*time.Second, http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		dl, ok := r.Context().Deadline()
		if !ok {
			t.Fatal("no deadline")
		}
		left = time.Until(dl)
	}))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
	if left <= 2*time.Second || left > 3*time.Second {
		t.Fatalf("deadline %v away, want about 3s", left)
	}
}

func TestRequestMetricsAreLabelledByRoutePatternNotPath(t *testing.T) {
	mux := runtime.NewServeMux(runtime.WithMiddlewares(recordRoute))
	if err := mux.HandlePath(http.MethodGet, "/v1/things/{id}", func(w http.ResponseWriter, _ *http.Request, _ map[string]string) {
		w.WriteHeader(http.StatusTeapot)
	}); err != nil {
		t.Fatal(err)
	}
	h := withMetrics(mux)
	for _, p := range []string{"/v1/things/a", "/v1/things/b", "/v1/nothing/here"} {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, p, nil).WithContext(context.Background()))
	}
	if n := testutil.ToFloat64(metrics.HTTPRequests.WithLabelValues("/v1/things/{id}", "GET", "418")); n != 2 {
		t.Fatalf("route pattern counted %v times, want 2", n)
	}
	if n := testutil.ToFloat64(metrics.HTTPRequests.WithLabelValues("none", "GET", "404")); n != 1 {
		t.Fatalf("unrouted path counted %v times, want 1", n)
	}
	if err := testutil.CollectAndCompare(metrics.HTTPRequests, strings.NewReader(`
# HELP keyhouse_http_requests_total HTTP requests answered by the gateway, by route pattern, method and status code.
# TYPE keyhouse_http_requests_total counter
keyhouse_http_requests_total{code="404",method="GET",route="none"} 1
keyhouse_http_requests_total{code="418",method="GET",route="/v1/things/{id}"} 2
`)); err != nil {
		t.Fatal(err)
	}
}
