package e2e

import (
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
)

// otlpSink is a minimal OTLP/gRPC trace receiver: it records which services sent spans
// for which trace ids, every span's name and string attributes by trace id, and which
// spans link to a trace.
type otlpSink struct {
	coltracepb.UnimplementedTraceServiceServer
	mu     sync.Mutex
	traces map[string]map[string]bool // trace id -> service names
	texts  map[string][]string        // trace id -> span names and attribute values
	links  map[string][]string        // linked trace id -> "service span-name" of each span linking to it
}

func (s *otlpSink) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		service := ""
		for _, attr := range rs.GetResource().GetAttributes() {
			if attr.GetKey() == "service.name" {
				service = attr.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, span := range ss.GetSpans() {
				id := hex.EncodeToString(span.GetTraceId())
				if s.traces[id] == nil {
					s.traces[id] = map[string]bool{}
				}
				s.traces[id][service] = true
				if s.texts == nil {
					s.texts = map[string][]string{}
				}
				s.texts[id] = append(s.texts[id], span.GetName())
				for _, attr := range span.GetAttributes() {
					s.texts[id] = append(s.texts[id], attr.GetKey()+"="+attr.GetValue().GetStringValue())
				}
				for _, link := range span.GetLinks() {
					if s.links == nil {
						s.links = map[string][]string{}
					}
					linked := hex.EncodeToString(link.GetTraceId())
					s.links[linked] = append(s.links[linked], service+" "+span.GetName())
				}
			}
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func (s *otlpSink) spanTexts(traceID string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.texts[traceID]...)
}

// linkedFrom names the spans ("service span-name") that link to a span of traceID.
func (s *otlpSink) linkedFrom(traceID string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.links[traceID]...)
}

func (s *otlpSink) services(traceID string) map[string]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]bool{}
	for k := range s.traces[traceID] {
		out[k] = true
	}
	return out
}

func TestTraceContextPropagatesFromGatewayToServices(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sink := &otlpSink{traces: map[string]map[string]bool{}}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, sink)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	s := startStack(t, map[string]string{
		"MULTI_TENANT":                "true",
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + lis.Addr().String(),
		"OTEL_EXPORTER_OTLP_INSECURE": "true",
		"OTEL_BSP_SCHEDULE_DELAY":     "50",
	})
	t.Cleanup(s.Stop)

	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	admin(t, s).Do(http.MethodPost, "/v1/operator/tenants", map[string]string{"name": "Traced", "email": "t@example.com"},
		"traceparent", "00-"+traceID+"-00f067aa0ba902b7-01").Expect(t, 200)

	deadline := time.Now().Add(20 * time.Second)
	for {
		got := sink.services(traceID)
		if got["keyhouse-gateway"] && got["keyhouse-billing"] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("spans for trace %s came from %v; want keyhouse-gateway and keyhouse-billing", traceID, got)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// A span leaves the process as a log line does: no license key or portal token in a
	// path reaches one whole, in its name or its attributes (url.path), on a route that
	// carries one, a page, or a mistyped route.
	tenant := newTenant(t, s)
	key := issueLicense(t, tenant, lic("traced"))

	// verify-license's work is done in a batch call, a trace of its own: the batch's
	// gateway (client) and licensing (server) spans link to the request's trace, so a
	// slow verify-license can be followed past the gateway.
	const verifyTrace = "4bf92f3577b34da6a3ce929d0e0e47ff"
	anon(t, s).Do(http.MethodPost, "/v1/verify-license", map[string]string{"key": key},
		"traceparent", "00-"+verifyTrace+"-00f067aa0ba902b7-01").Expect(t, 200)
	want := []string{
		"keyhouse-gateway keyhouse.licensing.v1.LicensingService/VerifyLicenseBatch",
		"keyhouse-licensing keyhouse.licensing.v1.LicensingService/VerifyLicenseBatch",
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		linked := sink.linkedFrom(verifyTrace)
		if !slices.ContainsFunc(want, func(w string) bool { return !slices.Contains(linked, w) }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("spans linking to verify-license's trace: %v; want %v", linked, want)
		}
	}
	const portalToken = "pt_9Ob2mSecretTokenThatMustNotLeak"
	for i, req := range []struct{ method, path string }{
		{http.MethodGet, "/v1/admin/license/" + key},
		{http.MethodGet, "/v1/list-activations/" + key},
		{http.MethodGet, "/v1/export-license/" + key + "/offline"},
		{http.MethodGet, "/v1/admin/licenses/" + key},
		{http.MethodGet, "/portal/" + portalToken},
	} {
		id := fmt.Sprintf("4bf92f3577b34da6a3ce929d0e0e47%02x", i)
		tenant.Do(req.method, req.path, nil, "traceparent", "00-"+id+"-00f067aa0ba902b7-01")
		var texts []string
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if texts = sink.spanTexts(id); slices.ContainsFunc(texts, func(s string) bool { return strings.HasPrefix(s, "url.path=") }) {
				break
			}
		}
		if !slices.ContainsFunc(texts, func(s string) bool { return strings.HasPrefix(s, "url.path=") }) {
			t.Fatalf("%s %s: no gateway span with url.path in %v", req.method, req.path, texts)
		}
		for _, text := range texts {
			if strings.Contains(text, key) || strings.Contains(text, portalToken) {
				t.Errorf("%s %s: a span holds the secret whole: %q", req.method, req.path, text)
			}
		}
	}
}
