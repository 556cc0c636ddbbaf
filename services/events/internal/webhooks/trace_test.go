package webhooks

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/keyhouse/keyhouse/pkg/events"
	"github.com/keyhouse/keyhouse/pkg/natsx"
	"github.com/keyhouse/keyhouse/pkg/telemetry"
	"github.com/keyhouse/keyhouse/services/events/internal/ingest"
	"github.com/keyhouse/keyhouse/services/events/internal/store"
)

// eventMsg is an event's message as the log's consumer receives it: data and headers.
type eventMsg struct {
	jetstream.Msg
	data []byte
	h    nats.Header
}

func (m eventMsg) Data() []byte         { return m.data }
func (m eventMsg) Headers() nats.Header { return m.h }

// An operator follows a license change to the attempts that delivered its event: the
// event's message carries the traceparent of the request that caused it (the relay's
// header), the log's consumer keeps it on the event's deliveries, and each attempt's span
// ("webhook attempt", a trace of its own) links to that request's span and names the
// endpoint, the delivery, the event, the attempt's number, the receiver's status and the
// outcome, never the endpoint's URL, its secret or what the event says of the licensee.
// A ping links to the request that sent it.
func TestAWebhookAttemptsSpanLinksToTheRequestThatCausedItsEvent(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	was := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(was) })

	f := newFixture(t)
	r := newRecorder(t)
	r.status.Store(500)
	const token, key, person = "tok_9OquerySecret", "K-TRACED-SPAN-1", "jane.doe@example.com"
	ep, secret := f.endpoint("t-traced", r.URL+"/hook?token="+token, "license.issued", "license.revoked")

	// The issue-license request whose outbox row became the event's message.
	reqCtx, request := tp.Tracer("test").Start(context.Background(), "POST /v1/issue-license")
	ev := events.LicenseIssued("t-traced", key, "app", "pro", person, nil, nil, nil)
	ev.Id, ev.CreatedAt, ev.Actor = events.NewID(), timestamppb.New(f.clock.Now()), events.Actor(events.ActorAdmin, "req_traced")
	data, err := proto.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	msg := eventMsg{data: data, h: nats.Header{natsx.HeaderTraceparent: {telemetry.Traceparent(reqCtx)}}}
	request.End()
	in := ingest.New(store.New(f.store.db), slog.New(slog.NewTextHandler(io.Discard, nil)),
		ingest.WithFanout(&Fanout{Store: f.store, Worker: f.worker, Now: f.clock.Now}))
	if errs := in.HandleBatch(context.Background(), []jetstream.Msg{msg}); errs[0] != nil {
		t.Fatal(errs[0])
	}

	// The receiver answers 500 twice: two attempts, the second after the retry's wait.
	for i := range 2 {
		if i > 0 {
			f.clock.Add(time.Minute) // the first retry's wait (30 s, jittered)
		}
		if n := f.worker.RunOnce(context.Background()); n != 1 {
			t.Fatalf("%d attempts, want 1", n)
		}
	}
	ds := f.deliveries("t-traced", ep.ID)
	if len(ds) != 1 || len(ds[0].Attempts) != 2 {
		t.Fatalf("deliveries %+v, want one with two attempts", ds)
	}
	attempts := attemptSpans(rec, ep.ID)
	if len(attempts) != 2 {
		t.Fatalf("%d attempt spans of the endpoint, want 2", len(attempts))
	}
	for i, s := range attempts {
		want := map[string]string{
			"keyhouse.tenant_id": "t-traced", "keyhouse.webhook.endpoint_id": ep.ID, "keyhouse.webhook.delivery_id": ds[0].ID,
			"keyhouse.event_id": ev.Id, "keyhouse.event_type": "license.issued", "keyhouse.webhook.attempt": fmt.Sprint(i + 1),
			"http.response.status_code": "500", "keyhouse.webhook.outcome": OutcomeHTTPError,
		}
		checkAttemptSpan(t, s, request.SpanContext(), want, token, secret, key, person, r.URL)
		if s.Status().Code != codes.Error || s.Status().Description != "answered HTTP 500" {
			t.Errorf("attempt %d: status %v, want the error answered HTTP 500", i+1, s.Status())
		}
	}

	// A ping is in no event's message: its delivery links to the request that sent it.
	r.status.Store(204)
	pingCtx, ping := tp.Tracer("test").Start(context.Background(), "POST /v1/webhook-endpoints/{id}/ping")
	if _, err := f.store.Enqueue(pingCtx, "t-traced", ep.ID, "evt_ping_traced", PingType, []byte(`{}`), false, f.clock.Now()); err != nil {
		t.Fatal(err)
	}
	ping.End()
	if n := f.worker.RunOnce(context.Background()); n != 1 {
		t.Fatalf("%d attempts, want the ping's", n)
	}
	pinged := attemptSpans(rec, ep.ID)[2:]
	if len(pinged) != 1 {
		t.Fatalf("%d attempt spans of the ping, want 1", len(pinged))
	}
	checkAttemptSpan(t, pinged[0], ping.SpanContext(), map[string]string{
		"keyhouse.event_id": "evt_ping_traced", "keyhouse.event_type": PingType, "keyhouse.webhook.attempt": "1",
		"http.response.status_code": "204", "keyhouse.webhook.outcome": OutcomeSucceeded,
	}, token, secret, r.URL)
}

// attemptSpans are the ended "webhook attempt" spans of one endpoint, in order.
func attemptSpans(rec *tracetest.SpanRecorder, endpointID string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		for _, a := range s.Attributes() {
			if s.Name() == "webhook attempt" && a.Key == "keyhouse.webhook.endpoint_id" && a.Value.AsString() == endpointID {
				out = append(out, s)
			}
		}
	}
	return out
}

// checkAttemptSpan holds an attempt's span to its own trace, one link to cause, the
// attributes want, and none of hidden in any attribute or its status.
func checkAttemptSpan(t *testing.T, s sdktrace.ReadOnlySpan, cause trace.SpanContext, want map[string]string, hidden ...string) {
	t.Helper()
	got := map[string]string{}
	for _, a := range s.Attributes() {
		got[string(a.Key)] = a.Value.Emit()
		for _, h := range hidden {
			if strings.Contains(a.Value.Emit(), h) {
				t.Errorf("attribute %s = %q holds %q", a.Key, a.Value.Emit(), h)
			}
		}
	}
	for _, h := range hidden {
		if strings.Contains(s.Status().Description, h) {
			t.Errorf("status %q holds %q", s.Status().Description, h)
		}
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("attempt span's %s = %q, want %q (all: %v)", k, got[k], v, got)
		}
	}
	if s.SpanKind() != trace.SpanKindClient || s.SpanContext().TraceID() == cause.TraceID() || s.Parent().IsValid() {
		t.Errorf("attempt span kind %v in trace %s with parent %v: want a client span, the root of a trace of its own",
			s.SpanKind(), s.SpanContext().TraceID(), s.Parent().SpanID())
	}
	if links := s.Links(); len(links) != 1 || links[0].SpanContext.TraceID() != cause.TraceID() || links[0].SpanContext.SpanID() != cause.SpanID() {
		t.Errorf("attempt span links %v, want one to %s", links, cause.SpanID())
	}
}
