package edge

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/pkg/grpcx"
	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	releasesv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/releases/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The hot routes answer exactly as the whole mux does: the same route (the metrics
// label), the same backend calls with the same metadata, status, headers and body, for
// bodies that take every path of the handlers (the plain reading, the generic one, its
// refusals, a key the batch call cannot take, a service without the batch call) and for
// the headers grpc-gateway reads (Content-Type, Accept, TE) or forwards.
func TestHotRoutesMatchTheWholeMux(t *testing.T) {
	t.Parallel()
	b := &answeringBackends{}
	opts := Options{Log: slog.New(slog.DiscardHandler), Conns: serveBackends(t, b.handle)}
	mux, hot, err := newMux(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	direct := withHotRoutes(hot, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		t.Error("a hot route's request went past the hot routes")
	}))
	bodies := []string{
		`{"key":"KEY-1","instance_id":"host-1"}`,
		`{"key":"KEY-1","product_id":"p","channel":"stable","platform":"linux","current_version":"1.0.0"}`,
		`{"key":"OLD-1","instance_id":"host-1","product_id":"p"}`, // the batch call answers Unimplemented: the call goes alone
		`{"key":"KEY-\u00e9"}`, `{"key":1}`, `{"key":"a","key":"b"}`, `{"unknown":"x"}`, `{}`, ``, `{`, `[]`, `null`,
		`{"key":"a\u0000"}`, `{"key":"KEY-1","extra":{"nested":[1,2]}}`,
		`{"key":"KEY-1","token":"tok_1"}`, `{"key":"OLD-1","token":"tok_1"}`, `{"key":"KEY-1","instanceId":"host-1"}`,
		`{"key":"KEY-1","instance_id":"host-1","components":{"cpu":"c1","disk":"d1"},"nonce":"n-1"}`,
	}
	headers := []map[string]string{
		nil,
		{"Content-Type": "application/json"},
		{"Content-Type": "text/plain; charset=utf-8", "Accept": "application/json"},
		{"Content-Type": "not a media type;;"},
		{"TE": "trailers"},
		{"Authorization": "Bearer kh_test_secret", "Idempotency-Key": "idem-1", "X-Forwarded-For": "203.0.113.9", "X-Forwarded-Host": "licenses.example"},
	}
	serve := func(h http.Handler, path, body string, header map[string]string) (*httptest.ResponseRecorder, string, []string) {
		holder := &routeHolder{}
		r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		for k, v := range header {
			r.Header.Set(k, v)
		}
		r = r.WithContext(context.WithValue(r.Context(), routeKey{}, holder))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w, holder.pattern, b.take()
	}
	alone := 0
	for path := range hotPaths {
		for _, body := range bodies {
			for _, header := range headers {
				wantW, wantRoute, wantCalls := serve(mux, path, body, header)
				gotW, gotRoute, gotCalls := serve(direct, path, body, header)
				name := fmt.Sprintf("%s %s %v", path, body, header)
				if gotRoute != wantRoute || wantRoute != path {
					t.Errorf("%s: route %q, whole mux %q", name, gotRoute, wantRoute)
				}
				if !slices.Equal(gotCalls, wantCalls) {
					t.Errorf("%s: calls %q, whole mux %q", name, gotCalls, wantCalls)
				}
				if gotW.Code != wantW.Code || gotW.Body.String() != wantW.Body.String() {
					t.Errorf("%s: %d %s, whole mux %d %s", name, gotW.Code, gotW.Body, wantW.Code, wantW.Body)
				}
				for k, v := range wantW.Header() {
					if !slices.Equal(gotW.Header()[k], v) {
						t.Errorf("%s: header %s %q, whole mux %q", name, k, gotW.Header()[k], v)
					}
				}
				if len(gotW.Header()) != len(wantW.Header()) {
					t.Errorf("%s: headers %v, whole mux %v", name, gotW.Header(), wantW.Header())
				}
				for _, c := range gotCalls {
					if !strings.Contains(c, "Batch") {
						alone++
					}
				}
			}
		}
	}
	// The calls made alone carry the metadata compared above; make sure there were some.
	if alone == 0 {
		t.Error("no call went alone: the metadata of such a call was never compared")
	}
}

// answeringBackends stands in for licensing, activations and releases: it records each
// call with the metadata grpc-gateway forwards, answers the batch calls (Unimplemented
// when a key starts with OLD, as a service without the batch call would), and answers a
// call made alone, refusing one without a key.
type answeringBackends struct {
	mu     sync.Mutex
	called []string
}

func (b *answeringBackends) handle(_ any, stream grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(stream)
	md, _ := metadata.FromIncomingContext(stream.Context())
	call := method
	for _, k := range []string{"authorization", "idempotency-key", "x-forwarded-for", "x-forwarded-host", grpcx.RequestIDHeader} {
		call += fmt.Sprintf(" %s=%q", k, md.Get(k))
	}
	b.mu.Lock()
	b.called = append(b.called, call)
	b.mu.Unlock()
	var keys []string
	var resp proto.Message
	switch method {
	case licensingv1.LicensingService_VerifyLicenseBatch_FullMethodName:
		var req licensingv1.VerifyLicenseBatchRequest
		if err := stream.RecvMsg(&req); err != nil {
			return err
		}
		out := &licensingv1.VerifyLicenseBatchResponse{}
		for _, item := range req.GetItems() {
			keys = append(keys, item.GetRequest().GetKey())
			out.Results = append(out.Results, &licensingv1.VerifyLicenseBatchResult{Outcome: &licensingv1.VerifyLicenseBatchResult_Response{Response: verifiedAnswer}})
		}
		resp = out
	case activationsv1.ActivationsService_ValidateLicenseBatch_FullMethodName:
		var req activationsv1.ValidateLicenseBatchRequest
		if err := stream.RecvMsg(&req); err != nil {
			return err
		}
		out := &activationsv1.ValidateLicenseBatchResponse{}
		for _, item := range req.GetItems() {
			keys = append(keys, item.GetRequest().GetKey())
			out.Results = append(out.Results, &activationsv1.ValidateLicenseBatchResult{Outcome: &activationsv1.ValidateLicenseBatchResult_Response{Response: &activationsv1.ValidateLicenseResponse{Valid: true}}})
		}
		resp = out
	case activationsv1.ActivationsService_ChangeSeatsBatch_FullMethodName:
		var req activationsv1.ChangeSeatsBatchRequest
		if err := stream.RecvMsg(&req); err != nil {
			return err
		}
		out := &activationsv1.ChangeSeatsBatchResponse{}
		for _, item := range req.GetItems() {
			result := &activationsv1.ChangeSeatsBatchResult{}
			key := item.GetActivate().GetKey()
			if item.GetActivate() != nil {
				result.Outcome = &activationsv1.ChangeSeatsBatchResult_Activated{Activated: activatedAnswer}
			} else {
				key = item.GetDeactivate().GetKey()
				result.Outcome = &activationsv1.ChangeSeatsBatchResult_Deactivated{Deactivated: &activationsv1.DeactivateLicenseResponse{Deactivated: true}}
			}
			keys = append(keys, key)
			if key == "" {
				result.Outcome = &activationsv1.ChangeSeatsBatchResult_Error{Error: &activationsv1.CallStatus{Code: int32(codes.InvalidArgument), Message: "key is required"}}
			}
			out.Results = append(out.Results, result)
		}
		resp = out
	case activationsv1.ActivationsService_ActivateLicense_FullMethodName:
		var req activationsv1.ActivateLicenseRequest
		if err := stream.RecvMsg(&req); err != nil {
			return err
		}
		if req.GetKey() == "" {
			return status.Error(codes.InvalidArgument, "key is required")
		}
		resp = activatedAnswer
	case activationsv1.ActivationsService_DeactivateLicense_FullMethodName:
		var req activationsv1.DeactivateLicenseRequest
		if err := stream.RecvMsg(&req); err != nil {
			return err
		}
		if req.GetKey() == "" {
			return status.Error(codes.InvalidArgument, "key is required")
		}
		resp = &activationsv1.DeactivateLicenseResponse{Deactivated: true}
	case activationsv1.LeasesService_CreateLeaseBatch_FullMethodName:
		var req activationsv1.CreateLeaseBatchRequest
		if err := stream.RecvMsg(&req); err != nil {
			return err
		}
		out := &activationsv1.CreateLeaseBatchResponse{}
		for _, item := range req.GetItems() {
			key := item.GetRequest().GetKey()
			keys = append(keys, key)
			result := &activationsv1.CreateLeaseBatchResult{Outcome: &activationsv1.CreateLeaseBatchResult_Response{Response: leasedAnswer}}
			if key == "" {
				result.Outcome = &activationsv1.CreateLeaseBatchResult_Error{Error: &activationsv1.CallStatus{Code: int32(codes.InvalidArgument), Message: "key is required"}}
			}
			out.Results = append(out.Results, result)
		}
		resp = out
	case activationsv1.LeasesService_CreateLease_FullMethodName:
		var req activationsv1.CreateLeaseRequest
		if err := stream.RecvMsg(&req); err != nil {
			return err
		}
		if req.GetKey() == "" {
			return status.Error(codes.InvalidArgument, "key is required")
		}
		resp = leasedAnswer
	case releasesv1.ReleasesService_CheckUpdateBatch_FullMethodName:
		var req releasesv1.CheckUpdateBatchRequest
		if err := stream.RecvMsg(&req); err != nil {
			return err
		}
		out := &releasesv1.CheckUpdateBatchResponse{}
		for _, item := range req.GetItems() {
			keys = append(keys, item.GetRequest().GetKey())
			out.Results = append(out.Results, &releasesv1.CheckUpdateBatchResult{Outcome: &releasesv1.CheckUpdateBatchResult_Response{Response: &releasesv1.CheckUpdateResponse{UpdateAvailable: false}}})
		}
		resp = out
	case licensingv1.LicensingService_VerifyLicense_FullMethodName:
		var req licensingv1.VerifyLicenseRequest
		if err := stream.RecvMsg(&req); err != nil {
			return err
		}
		if req.Key == nil {
			return status.Error(codes.InvalidArgument, "key is required")
		}
		resp = verifiedAnswer
	case activationsv1.ActivationsService_ValidateLicense_FullMethodName:
		resp = &activationsv1.ValidateLicenseResponse{Valid: true}
	case releasesv1.ReleasesService_CheckUpdate_FullMethodName:
		var req releasesv1.CheckUpdateRequest
		if err := stream.RecvMsg(&req); err != nil {
			return err
		}
		if req.GetKey() == "" {
			return status.Error(codes.InvalidArgument, "key is required")
		}
		resp = &releasesv1.CheckUpdateResponse{UpdateAvailable: false}
	default:
		return status.Error(codes.Unimplemented, "test backend")
	}
	for _, k := range keys {
		if strings.HasPrefix(k, "OLD") {
			return status.Error(codes.Unimplemented, "no batch call here")
		}
	}
	return stream.SendMsg(resp)
}

var (
	verifiedAnswer  = &licensingv1.VerifyLicenseResponse{Valid: true, Tier: "pro", ProductId: "prod_1", Status: "active"}
	activatedAnswer = &activationsv1.ActivateLicenseResponse{Activated: true, Token: proto.String("tok_new")}
	leasedAnswer    = &activationsv1.CreateLeaseResponse{Lease: "eyJhbGciOiJFZERTQSJ9.e30.c2ln",
		ExpiresAt: timestamppb.New(time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)), RenewAfter: timestamppb.New(time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC))}
)

func (b *answeringBackends) take() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.called
	b.called = nil
	return c
}

// Only a POST to a hot route's literal path, without query, method override or
// Grpc-Timeout, is answered by the hot routes; everything else goes the whole way.
func TestIsHotTakesOnlyTheExactRoutes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		method, target, header string
		want                   bool
	}{
		{http.MethodPost, "/v1/verify-license", "", true},
		{http.MethodPost, "/v1/validate-license", "", true},
		{http.MethodPost, "/v1/check-update", "", true},
		{http.MethodPost, "/v1/check-update", "Content-Type", true},
		{http.MethodGet, "/v1/verify-license", "", false},
		{http.MethodHead, "/v1/verify-license", "", false},
		{http.MethodPost, "/v1/verify-license?x=1", "", false},
		{http.MethodPost, "/v1/verify-license?x=%ff", "", false},
		{http.MethodPost, "/v1/verify%2Dlicense", "", false},
		{http.MethodPost, "/v1/verify-license/", "", false},
		{http.MethodPost, "/v1//verify-license", "", false},
		{http.MethodPost, "/v1/verify-license", "X-HTTP-Method-Override", false},
		{http.MethodPost, "/v1/verify-license", "Grpc-Timeout", false},
		{http.MethodPost, "/v1/activate-license", "", true},
		{http.MethodPost, "/v1/deactivate-license", "", true},
		{http.MethodPost, "/v1/track-usage", "", false},
		{http.MethodPost, "/v1/leases", "", true},
		{http.MethodPost, "/v1/leases/", "", false},
	} {
		r := httptest.NewRequest(c.method, c.target, nil)
		if c.header != "" {
			r.Header.Set(c.header, "1S")
		}
		if got := isHot(r); got != c.want {
			t.Errorf("%s %s (header %q): hot %v, want %v", c.method, c.target, c.header, got, c.want)
		}
	}
}

// BenchmarkHotRoute is a verify-license the cache answers, through the hot routes and
// through the whole mux.
func BenchmarkHotRoute(b *testing.B) {
	opts := Options{Log: slog.New(slog.DiscardHandler), Caches: NewCaches(time.Hour, time.Hour), Conns: serveBackends(b, (&answeringBackends{}).handle)}
	mux, hot, err := newMux(context.Background(), opts)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		h    http.Handler
	}{{"hot routes", withHotRoutes(hot, mux)}, {"whole mux", mux}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				w := httptest.NewRecorder()
				c.h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/verify-license", strings.NewReader(`{"key":"KEY-1"}`)))
				if w.Code != http.StatusOK {
					b.Fatal(w.Code, w.Body)
				}
			}
		})
	}
}
