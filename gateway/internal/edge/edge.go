// Package edge is the REST surface: the grpc-gateway mux with the one JSON marshaler and
// the one error handler, the plain handlers (health, raw-body and binary routes), and the
// middleware every request passes (request id, access log, body cap, rate limits).
package edge

import (
	"context"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/keyhouse/keyhouse/gateway/internal/openapi"
	"github.com/keyhouse/keyhouse/pkg/buildinfo"
	"github.com/keyhouse/keyhouse/pkg/grpcx"
	"github.com/keyhouse/keyhouse/pkg/idempotency"
	"github.com/keyhouse/keyhouse/pkg/telemetry"
	accountsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/accounts/v1"
	apiv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/api/v1"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// Conns are the gateway's connections to the services.
type Conns struct {
	Licensing, Activations, Releases, Billing, Storefront, Events *grpc.ClientConn
}

// Options configure New.
type Options struct {
	Log   *slog.Logger
	Conns Conns
	// RateLimit wraps the routes that have a tier; nil disables rate limiting.
	RateLimit func(http.Handler) http.Handler
	// NotReady lists what keeps the gateway from being ready (GET /readyz); nil means
	// always ready.
	NotReady func() []string
	// RequestTimeout is every request's budget (REQUEST_TIMEOUT); zero means none.
	RequestTimeout time.Duration
	// Caches keep the answers of verify-license, validate-license and check-update; nil
	// asks the services every time. The connections to licensing, activations and
	// releases must use Caches.DropAnnounced.
	Caches *Caches
	// Pages serves the console (/console/) and the end-user portal (/portal/); nil
	// leaves them out.
	Pages http.Handler
	// TrustedProxies are the peers whose X-Forwarded-For is believed (TRUSTED_PROXIES):
	// the access log names the client as the rate limiter sees it.
	TrustedProxies []netip.Prefix
}

// New returns the gateway's whole HTTP handler.
func New(ctx context.Context, opts Options) (http.Handler, error) {
	mux, hot, err := newMux(ctx, opts)
	if err != nil {
		return nil, err
	}
	var h http.Handler = withInputPolicy(withSegmentPaths(mux))
	if opts.Pages != nil {
		root := http.NewServeMux()
		root.Handle("/console", opts.Pages)
		root.Handle("/console/", opts.Pages)
		root.Handle("/portal/", opts.Pages)
		root.Handle("/", h)
		h = root
	}
	h = withCanonicalPaths(opts.Pages != nil, h)
	h = withHotRoutes(hot, h)
	h = withBudget(opts.RequestTimeout, h)
	if opts.RateLimit != nil {
		h = opts.RateLimit(h)
	}
	h = withHeadAsGet(h)
	h = withOneAuthorization(h)
	h = withBodyLimit(h)
	h = withAccessLog(opts.Log, opts.TrustedProxies, h)
	h = withMetrics(h)
	h = withRequestID(h)
	if !telemetry.TracingEnabled() {
		return h, nil
	}
	return otelhttp.NewHandler(h, "gateway", otelhttp.WithSpanNameFormatter(spanName)), nil
}

// newMux returns the mux of every REST route, and hot, which answers the hot routes
// without it (withHotRoutes) with the same clients, caches and batchers.
func newMux(ctx context.Context, opts Options) (mux *runtime.ServeMux, hot *hotRoutes, err error) {
	marshaler := newJSONMarshaler()
	mux = newServeMux(marshaler)
	hot = &hotRoutes{mux: mux, marshaler: marshaler}
	if err := registerAll(ctx, opts, marshaler, mux, hot); err != nil {
		return nil, nil, err
	}
	return mux, hot, nil
}

// registerAll puts every route on mux, and the hot routes' clients in hot.
func registerAll(ctx context.Context, opts Options, marshaler runtime.Marshaler, mux *runtime.ServeMux, hot *hotRoutes) (err error) {
	c := opts.Conns
	caches := opts.Caches
	if caches == nil {
		caches = &Caches{} // nil caches: every question goes to its service
	}
	if err := accountsv1.RegisterAccountsServiceHandlerClient(ctx, mux, accountsv1.NewAccountsServiceClient(c.Billing)); err != nil {
		return err
	}
	if err := registerKeysAndOperator(ctx, mux, c.Billing); err != nil {
		return err
	}
	if err := registerBilling(ctx, mux, c.Billing); err != nil {
		return err
	}
	if hot.verify, err = registerLicensing(ctx, mux, c.Licensing, caches.Verified); err != nil {
		return err
	}
	if err := registerActivations(ctx, mux, c.Activations, opts.Log, caches.ValidSeats, caches.updateAnswers(), hot); err != nil {
		return err
	}
	if hot.checkUpdate, err = registerReleases(ctx, mux, c.Releases, caches.updateAnswers()); err != nil {
		return err
	}
	if err := registerStorefront(ctx, mux, c.Storefront); err != nil {
		return err
	}
	if err := registerEvents(ctx, mux, c.Events); err != nil {
		return err
	}
	if err := mux.HandlePath(http.MethodGet, "/", health(marshaler)); err != nil {
		return err
	}
	if err := mux.HandlePath(http.MethodGet, HealthzPath, healthz); err != nil {
		return err
	}
	if err := mux.HandlePath(http.MethodGet, ReadyzPath, readyz(opts.NotReady)); err != nil {
		return err
	}
	if err := mux.HandlePath(http.MethodGet, "/v1/openapi.json", openAPIDocument); err != nil {
		return err
	}
	return nil
}

// newServeMux is a grpc-gateway mux with the one JSON marshaler, the one error handler
// and the header rules of the API.
//
// Paths are matched as sent, segment by segment (UnescapingModeAllExceptReserved): the
// path splits at each "/" the client wrote, and a path parameter is its segment
// unescaped, so an imported key holding "/" (sent as %2F), "?", "#" or "%" is one {key}.
// grpc-gateway's default (legacy) mode split the unescaped path, which made a key's
// "/" a segment boundary and such a key unreachable. Literal segments are compared as
// withSegmentPaths spells them.
func newServeMux(marshaler runtime.Marshaler) *runtime.ServeMux {
	return runtime.NewServeMux(
		runtime.WithUnescapingMode(runtime.UnescapingModeAllExceptReserved),
		runtime.WithMarshalerOption(runtime.MIMEWildcard, marshaler),
		runtime.WithErrorHandler(handleError),
		runtime.WithRoutingErrorHandler(handleRoutingError),
		runtime.WithIncomingHeaderMatcher(incomingHeader),
		runtime.WithOutgoingHeaderMatcher(func(string) (string, bool) { return "", false }),
		runtime.WithOutgoingTrailerMatcher(func(string) (string, bool) { return "", false }),
		runtime.WithMetadata(serviceMetadata),
		runtime.WithMiddlewares(recordRoute),
		runtime.WithForwardResponseOption(noStoreSecrets),
	)
}

// serviceMetadata is the metadata every call carries besides the allowed headers
// (incomingHeader): the request id, and an Idempotency-Key that grpc-gateway cannot pass
// as text (it logs and drops a value outside printable ASCII), passed byte for byte as
// binary metadata so the service refuses it instead of creating without a key.
func serviceMetadata(ctx context.Context, r *http.Request) metadata.MD {
	md := metadata.Pairs(grpcx.RequestIDHeader, telemetry.RequestID(ctx))
	for _, k := range r.Header.Values("Idempotency-Key") {
		if !idempotency.Printable(k) {
			md.Append(idempotency.BinaryHeader, k)
		}
	}
	return md
}

// spanName names a span by its route as the API document spells it ("GET
// /v1/admin/license/{key}"), a page by its prefix, and a path that names no route by its
// method alone: a span leaves the process as a log line does, and a path may hold a
// license key or a portal token. Route names also keep the span names few.
func spanName(_ string, r *http.Request) string {
	if route, ok := openapi.Match(r.Method, r.URL.EscapedPath()); ok {
		return r.Method + " " + route.Path
	}
	switch {
	case strings.HasPrefix(r.URL.Path, "/portal/"):
		return r.Method + " /portal/{token}"
	case r.URL.Path == "/console" || strings.HasPrefix(r.URL.Path, "/console/"):
		return r.Method + " /console"
	}
	return r.Method
}

// incomingHeader is the allowlist of HTTP headers that reach the services as metadata.
// Anything else, including x-keyhouse-tenant, is dropped. Authorization is not in it:
// grpc-gateway passes it on by itself (a printable ASCII value; no credential Keyhouse
// issues is anything else), and listing it too sent every call's credential twice, which
// the services refuse (Authorization must be sent once).
func incomingHeader(key string) (string, bool) {
	switch k := strings.ToLower(key); k {
	case "idempotency-key":
		return k, true
	}
	return "", false
}

func health(m runtime.Marshaler) runtime.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request, _ map[string]string) {
		body, err := m.Marshal(&apiv1.HealthResponse{
			Message:          "Keyhouse license server is running",
			Version:          buildinfo.Version(),
			BuildFingerprint: buildinfo.Fingerprint(),
		})
		if err != nil {
			writeError(w, http.StatusInternalServerError, "Internal server error", nil)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}
}

// openAPIDocument serves the OpenAPI document of the whole REST surface (addendum §10).
func openAPIDocument(w http.ResponseWriter, _ *http.Request, _ map[string]string) {
	doc := openapi.Document()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(doc)))
	_, _ = w.Write(doc)
}

// withSegmentPaths hands the mux a path escaped in one canonical way
// (telemetry.CanonicalPath): each segment (the text between two "/" the client sent)
// unescaped and escaped again as url.PathEscape does. The mux compares a route's literal
// segments with the escaped path, so a client that escaped a letter of one
// (/v1/%61dmin/stats) still reaches the route it reached when the mux split the unescaped
// path; an escaped "/" stays %2F, one segment's data. A path sent without escapes
// (RawPath "") is matched as it is. The access log reads the path the same way.
func withSegmentPaths(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if raw := r.URL.RawPath; raw != "" {
			if canonical := telemetry.CanonicalPath(raw); canonical != raw {
				u := *r.URL
				u.RawPath = canonical
				r = r.WithContext(r.Context())
				r.URL = &u
			}
		}
		next.ServeHTTP(w, r)
	})
}

// readRawBody starts a raw-body route the way a generated handler starts: the request is
// annotated for method (metadata, deadline, route pattern) and its whole body read, capped
// by withBodyLimit. When ok is false the error (413, 408, 400 Invalid gzip body, …) has
// been written.
func readRawBody(mux *runtime.ServeMux, w http.ResponseWriter, r *http.Request, method, pattern string) (ctx context.Context, out runtime.Marshaler, body []byte, ok bool) {
	_, out = runtime.MarshalerForRequest(mux, r)
	ctx, err := runtime.AnnotateContext(r.Context(), mux, r, method, runtime.WithHTTPPathPattern(pattern))
	if err == nil {
		body, err = readRequestBody(r)
	}
	if err != nil {
		runtime.HTTPError(ctx, mux, out, w, r, err)
		return ctx, out, nil, false
	}
	return ctx, out, body, true
}
