package edge

import (
	"context"
	"errors"
	"io"
	"net/http"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	releasesv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/releases/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// hotRoutes answers the POST routes every installed app calls, at every start or on a
// timer, and so most of the gateway's requests: verify-license, validate-license and
// check-update, the seat changes of every install and uninstall (activate-license and
// deactivate-license), and the leases apps take at start and renew on a timer. It takes
// the steps grpc-gateway's handlers take for them (decode the body, call the same cached
// and batched client, answer through the mux's own marshaler, error handler and response
// options), without the mux's work around them:
// trying every route's pattern in turn (each miss allocating its error), and annotating
// the context with every header as gRPC metadata, with the copies of the request and the
// context values that go with it: a verify-license the cache answers takes 33
// allocations and 11 µs here against 108 and 28 µs through the whole mux
// (BenchmarkHotRoute, on the 2-core machine of docs/PERFORMANCE.md).
//
// The metadata matters only to a call that reaches its service alone (a request the
// cache and the batches cannot take, or a service without the batch call): such a call
// annotates its context then, exactly as the mux would have (annotated). What reaches a
// client is the mux's own answer, byte for byte: TestHotRoutesMatchTheWholeMux.
type hotRoutes struct {
	// mux is the API's mux, for its error handler and response options; marshaler is
	// its one marshaler (the only one registered, so every request's, whatever its
	// Content-Type and Accept).
	mux         *runtime.ServeMux
	marshaler   runtime.Marshaler
	verify      *cachedVerify
	validate    *cachedValidate
	checkUpdate *cachedCheckUpdate
	seats       *batchedActivations
	leases      *batchedLeases
}

// The hot routes.
const (
	VerifyLicensePath     = "/v1/verify-license"
	ValidateLicensePath   = "/v1/validate-license"
	CheckUpdatePath       = "/v1/check-update"
	ActivateLicensePath   = "/v1/activate-license"
	DeactivateLicensePath = "/v1/deactivate-license"
	LeasesPath            = "/v1/leases"
)

// hotPaths are the routes hotRoutes answers.
var hotPaths = map[string]bool{VerifyLicensePath: true, ValidateLicensePath: true, CheckUpdatePath: true,
	ActivateLicensePath: true, DeactivateLicensePath: true, LeasesPath: true}

// withHotRoutes lets hot answer the requests for exactly a hot route (isHot), and sends
// everything else to next.
func withHotRoutes(hot *hotRoutes, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isHot(r) {
			switch r.URL.Path {
			case VerifyLicensePath:
				serveHot(hot, w, r, VerifyLicensePath, licensingv1.LicensingService_VerifyLicense_FullMethodName, hot.verify.VerifyLicense)
			case ValidateLicensePath:
				hot.validateLicense(w, r)
			case CheckUpdatePath:
				serveHot(hot, w, r, CheckUpdatePath, releasesv1.ReleasesService_CheckUpdate_FullMethodName, hot.checkUpdate.CheckUpdate)
			case ActivateLicensePath:
				serveHot(hot, w, r, ActivateLicensePath, activationsv1.ActivationsService_ActivateLicense_FullMethodName, hot.seats.ActivateLicense)
			case DeactivateLicensePath:
				serveHot(hot, w, r, DeactivateLicensePath, activationsv1.ActivationsService_DeactivateLicense_FullMethodName, hot.seats.DeactivateLicense)
			default:
				serveHot(hot, w, r, LeasesPath, activationsv1.LeasesService_CreateLease_FullMethodName, hot.leases.CreateLease)
			}
			return
		}
		next.ServeHTTP(w, r)
	})
}

// isHot: r is for a hot route, and the whole mux would route it the same way: a POST to
// the literal path (no escapes, whose RawPath is empty), with no query (the input policy
// then has nothing to refuse in the URL), no X-HTTP-Method-Override (which can make
// grpc-gateway look for other methods' routes) and no Grpc-Timeout (which grpc-gateway
// reads into the call's deadline, or refuses).
func isHot(r *http.Request) bool {
	return r.Method == http.MethodPost && r.URL.RawPath == "" && r.URL.RawQuery == "" && hotPaths[r.URL.Path] &&
		r.Header.Get("X-HTTP-Method-Override") == "" && r.Header.Get("Grpc-Timeout") == ""
}

// serveHot answers a hot route as grpc-gateway's generated handler does: the body decoded
// into a new request, call's answer or its error.
func serveHot[Req any, PReq interface {
	*Req
	proto.Message
}, Resp proto.Message](h *hotRoutes, w http.ResponseWriter, r *http.Request, pattern, method string,
	call func(context.Context, PReq, ...grpc.CallOption) (Resp, error)) {
	ctx := h.begin(r, pattern, method)
	req := PReq(new(Req))
	if h.decode(ctx, w, r, req) {
		resp, err := call(ctx, req)
		h.forward(ctx, w, r, resp, err)
	}
}

func (h *hotRoutes) validateLicense(w http.ResponseWriter, r *http.Request) {
	ctx := h.begin(r, ValidateLicensePath, activationsv1.ActivationsService_ValidateLicense_FullMethodName)
	body, err := readRequestBody(r)
	if err != nil {
		runtime.HTTPError(ctx, h.mux, h.marshaler, w, r, err)
		return
	}
	h.validate.serve(ctx, h.mux, h.marshaler, w, r, body)
}

// begin names the route for the metrics and the access log, as recordRoute does on the
// mux, and returns the request's context with what annotated needs.
func (h *hotRoutes) begin(r *http.Request, pattern, method string) context.Context {
	if holder, ok := r.Context().Value(routeKey{}).(*routeHolder); ok {
		holder.pattern = pattern
	}
	return context.WithValue(r.Context(), annotationKey{}, &annotation{mux: h.mux, r: r, method: method, pattern: pattern})
}

// decode reads the body into m as the generated handlers do: a body that does not
// decode is the mux's 400, an empty one the zero request.
func (h *hotRoutes) decode(ctx context.Context, w http.ResponseWriter, r *http.Request, m proto.Message) bool {
	if err := h.marshaler.NewDecoder(r.Body).Decode(m); err != nil && !errors.Is(err, io.EOF) {
		runtime.HTTPError(ctx, h.mux, h.marshaler, w, r, status.Errorf(codes.InvalidArgument, "%v", err))
		return false
	}
	_, _ = io.Copy(io.Discard, r.Body)
	return true
}

// forward answers resp, or err, as the generated handlers do: with server metadata in
// the context (empty: the mux forwards no service header), which is what lets
// ForwardResponseMessage honour a TE: trailers request the same way.
func (h *hotRoutes) forward(ctx context.Context, w http.ResponseWriter, r *http.Request, resp proto.Message, err error) {
	ctx = runtime.NewServerMetadataContext(ctx, runtime.ServerMetadata{})
	if err != nil {
		runtime.HTTPError(ctx, h.mux, h.marshaler, w, r, err)
		return
	}
	runtime.ForwardResponseMessage(ctx, h.mux, h.marshaler, w, r, resp, h.mux.GetForwardResponseOptions()...)
}

// annotation is what a hot route leaves in its context for a call that goes to its
// service alone.
type annotation struct {
	mux             *runtime.ServeMux
	r               *http.Request
	method, pattern string
}

type annotationKey struct{}

// annotated returns ctx as grpc-gateway's handler annotates it (the allowed headers as
// metadata, the request id, x-forwarded-for and -host), for a call made alone. A context
// from the mux's own handlers is annotated already and comes back as it is.
func annotated(ctx context.Context) (context.Context, error) {
	a, _ := ctx.Value(annotationKey{}).(*annotation)
	if a == nil {
		return ctx, nil
	}
	ctx, err := runtime.AnnotateContext(ctx, a.mux, a.r, a.method, runtime.WithHTTPPathPattern(a.pattern))
	if err != nil {
		return nil, err
	}
	return context.WithValue(ctx, annotationKey{}, (*annotation)(nil)), nil
}
