package edge

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/keyhouse/keyhouse/pkg/metrics"
	apiv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/api/v1"
)

// The operations routes of addendum §10. They carry no rate-limit tier: probes must
// never be refused.
const (
	HealthzPath = "/healthz"
	ReadyzPath  = "/readyz"
)

// healthz answers 200 while the process runs: the liveness probe.
func healthz(w http.ResponseWriter, _ *http.Request, _ map[string]string) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"status":"ok"}`))
}

// readyz answers 200 when notReady lists nothing, else 503 with the list: the readiness
// probe. notReady answers from memory (see readiness.Monitor), so a hung dependency
// never makes the probe itself hang.
func readyz(notReady func() []string) runtime.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request, _ map[string]string) {
		var missing []string
		if notReady != nil {
			missing = notReady()
		}
		if len(missing) == 0 {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"status":"ready"}`))
			return
		}
		writeError(w, http.StatusServiceUnavailable, "Not ready", notReadyFields(missing))
	}
}

// withBudget gives every request the gateway's deadline (REQUEST_TIMEOUT). grpc-gateway
// sends it to the service as the call's deadline, and services pass what is left to
// Postgres and to each other, so a hung dependency answers 503 within the budget.
func withBudget(timeout time.Duration, next http.Handler) http.Handler {
	if timeout <= 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

type routeKey struct{}

// routeHolder receives the route pattern the mux matched, for the metrics labels.
type routeHolder struct{ pattern string }

// recordRoute is a mux middleware: it runs only for matched routes, with the pattern in
// the context.
func recordRoute(next runtime.HandlerFunc) runtime.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request, params map[string]string) {
		if h, ok := r.Context().Value(routeKey{}).(*routeHolder); ok {
			if p, ok := runtime.HTTPPattern(r.Context()); ok {
				// "/v1/release/{id=*}" is written "/v1/release/{id}" in the API docs.
				h.pattern = strings.ReplaceAll(p.String(), "=*}", "}")
			}
		}
		next(w, r, params)
	}
}

// withMetrics counts every request by route pattern, method and status. A request the
// mux never routed (unknown path, or refused before it: 429, 413) is labelled "none", so
// arbitrary paths cannot grow the series.
func withMetrics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		holder := &routeHolder{}
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(rec, r.WithContext(context.WithValue(r.Context(), routeKey{}, holder)))
		route := holder.pattern
		if route == "" {
			route = "none"
		}
		method := r.Method
		switch method {
		case http.MethodGet, http.MethodPost, http.MethodDelete, http.MethodPut, http.MethodPatch, http.MethodHead, http.MethodOptions:
		default:
			method = "other"
		}
		code := strconv.Itoa(rec.status)
		metrics.HTTPRequests.WithLabelValues(route, method, code).Inc()
		metrics.HTTPDuration.WithLabelValues(route, method, code).Observe(time.Since(start).Seconds())
	})
}

// notReadyFields puts the list after the error: {"error":"Not ready","not_ready":[…]}.
func notReadyFields(missing []string) *apiv1.ErrorFields {
	list, _ := json.Marshal(missing)
	return &apiv1.ErrorFields{After: []*apiv1.ErrorField{{Name: "not_ready", JsonValue: string(list)}}}
}
