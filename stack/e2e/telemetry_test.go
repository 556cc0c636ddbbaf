package e2e

import (
	"context"
	"encoding/hex"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/stack"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/grpc"
)

// otlpSink is a minimal OTLP/gRPC trace receiver: it records which services sent spans
// for which trace ids, every span's name and attributes by trace id, and which spans
// link to a trace, with their attributes.
type otlpSink struct {
	coltracepb.UnimplementedTraceServiceServer
	mu        sync.Mutex
	traces    map[string]map[string]bool     // trace id -> service names
	texts     map[string][]string            // trace id -> span names and "key=value" attributes
	links     map[string][]string            // linked trace id -> "service span-name" of each span linking to it
	linkAttrs map[string][]map[string]string // linked trace id -> the attributes of each span linking to it
}

// otlpText is an attribute's value as text: a string, or an integer in decimal.
func otlpText(v *commonpb.AnyValue) string {
	if _, ok := v.GetValue().(*commonpb.AnyValue_IntValue); ok {
		return strconv.FormatInt(v.GetIntValue(), 10)
	}
	return v.GetStringValue()
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
				attrs := map[string]string{}
				for _, attr := range span.GetAttributes() {
					attrs[attr.GetKey()] = otlpText(attr.GetValue())
					s.texts[id] = append(s.texts[id], attr.GetKey()+"="+attrs[attr.GetKey()])
				}
				for _, link := range span.GetLinks() {
					if s.links == nil {
						s.links, s.linkAttrs = map[string][]string{}, map[string][]map[string]string{}
					}
					linked := hex.EncodeToString(link.GetTraceId())
					s.links[linked] = append(s.links[linked], service+" "+span.GetName())
					s.linkAttrs[linked] = append(s.linkAttrs[linked], attrs)
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

// linkingSpans are the attributes of the spans named name that link to a span of traceID.
func (s *otlpSink) linkingSpans(traceID, name string) []map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]string
	for i, linker := range s.links[traceID] {
		if strings.HasSuffix(linker, " "+name) {
			out = append(out, s.linkAttrs[traceID][i])
		}
	}
	return out
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

// tracedStack starts a stack of its own (env added to its environment) whose processes
// export their spans to an OTLP sink of the test's own.
func tracedStack(t *testing.T, env map[string]string) (*otlpSink, *stack.Stack) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sink := &otlpSink{traces: map[string]map[string]bool{}}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, sink)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	full := map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + lis.Addr().String(),
		"OTEL_EXPORTER_OTLP_INSECURE": "true",
		"OTEL_BSP_SCHEDULE_DELAY":     "50",
	}
	maps.Copy(full, env)
	s := startStack(t, full)
	t.Cleanup(s.Stop)
	return sink, s
}

func TestTraceContextPropagatesFromGatewayToServices(t *testing.T) {
	t.Parallel()
	sink, s := tracedStack(t, map[string]string{"MULTI_TENANT": "true"})

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

// An operator follows a license change to the webhook attempts that delivered its event:
// the revoke's trace is linked from the licensing relay's batch that published the event
// ("outbox publish"), from the event log's consumer ("events-log process") and from each
// attempt to deliver it ("webhook attempt"), which names the endpoint, the event, the
// attempt's number, the receiver's status and the outcome, and never the endpoint's URL
// query, its secret, the license key or the licensee.
func TestAWebhookAttemptLinksToTheLicenseChangeThatCausedIt(t *testing.T) {
	t.Parallel()
	sink, s := tracedStack(t, map[string]string{"MULTI_TENANT": "false"})
	adm := admin(t, s)
	rc := newWebhookReceiver(t)
	rc.broken.Store(true) // every attempt is answered 500
	const token = "tok_e2eQuerySecretThatMustNotLeak"
	ep := adm.Post("/v1/webhook-endpoints", map[string]any{"url": rc.URL + "/hook?token=" + token, "events": []string{"license.revoked"}}).Expect(t, 200).JSON(t)
	id, secret := ep["id"].(string), ep["secret"].(string)
	key := issueLicense(t, adm, lic(product("traced-hooks")))

	const revokeTrace = "4bf92f3577b34da6a3ce929d0e0e4800"
	adm.Do(http.MethodPost, "/v1/revoke-license", map[string]any{"key": key, "revoked": true},
		"traceparent", "00-"+revokeTrace+"-00f067aa0ba902b7-01").Expect(t, 200)
	want := []string{"keyhouse-licensing outbox publish", "keyhouse-events events-log process", "keyhouse-events webhook attempt"}
	eventually(t, "spans linking to the revoke's trace: "+strings.Join(want, ", "), func() bool {
		linked := sink.linkedFrom(revokeTrace)
		return !slices.ContainsFunc(want, func(w string) bool { return !slices.Contains(linked, w) })
	})
	attempt := sink.linkingSpans(revokeTrace, "webhook attempt")[0]
	for k, v := range map[string]string{
		"keyhouse.webhook.endpoint_id": id, "keyhouse.event_type": "license.revoked", "keyhouse.webhook.attempt": "1",
		"http.response.status_code": "500", "keyhouse.webhook.outcome": "http_error",
	} {
		if attempt[k] != v {
			t.Errorf("attempt span's %s = %q, want %q (all: %v)", k, attempt[k], v, attempt)
		}
	}
	if !strings.HasPrefix(attempt["keyhouse.event_id"], "evt_") || !strings.HasPrefix(attempt["keyhouse.webhook.delivery_id"], "whd_") {
		t.Errorf("attempt span names event %q and delivery %q", attempt["keyhouse.event_id"], attempt["keyhouse.webhook.delivery_id"])
	}
	if got := rc.deliveries(); len(got) == 0 || got[0].header.Get("Keyhouse-Event-Id") != attempt["keyhouse.event_id"] {
		t.Errorf("the receiver got %d deliveries; want the attempt's event %s", len(got), attempt["keyhouse.event_id"])
	}
	for _, name := range []string{"outbox publish", "events-log process", "webhook attempt"} {
		for _, attrs := range sink.linkingSpans(revokeTrace, name) {
			for k, v := range attrs {
				for _, hidden := range []string{token, secret, key, "ada@example.com"} {
					if strings.Contains(v, hidden) {
						t.Errorf("%s span's %s = %q holds a secret or personal data", name, k, v)
					}
				}
			}
		}
	}
}
