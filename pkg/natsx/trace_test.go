package natsx

import (
	"context"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/keyhouse/keyhouse/devinfra/devnats"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// recordSpans makes the global tracer provider one that records every span, for the
// test's length.
func recordSpans(t *testing.T) (*tracetest.SpanRecorder, trace.Tracer) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	was := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(was) })
	return rec, tp.Tracer("test")
}

// headerMsg is a message as a consumer receives it, headers only.
type headerMsg struct {
	jetstream.Msg
	h nats.Header
}

func (m headerMsg) Headers() nats.Header { return m.h }

// The request that writes an outbox row (a storefront callback, an issue-license) and
// the consumer that handles its message are joined: the row carries the request's
// traceparent, and the handler's span, a trace of its own, links to the request's span.
func TestAConsumersSpanLinksToTheRequestThatWroteTheMessage(t *testing.T) {
	rec, tracer := recordSpans(t)

	ctx, request := tracer.Start(context.Background(), "POST /v1/webhooks/storefront/{webhook_id}")
	msgs := traced(ctx, []Message{{TenantID: "t1", Subject: "storefront.purchase", MsgID: "m1", Header: map[string]string{"X-Kept": "1"}}})
	request.End()
	h := msgs[0].Header
	if h["X-Kept"] != "1" || h[HeaderTraceparent] == "" {
		t.Fatalf("outbox row headers %v: want the caller's and a traceparent", h)
	}

	c, err := newConsumer(context.Background(), "STOREFRONT", jetstream.ConsumerConfig{Durable: "storefront-fulfillment"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, span := c.startSpan(context.Background(), headerMsg{h: nats.Header{HeaderTraceparent: {h[HeaderTraceparent]}}})
	span.End()
	ended := rec.Ended()
	got := ended[len(ended)-1]
	if got.Name() != "storefront-fulfillment process" || got.SpanContext().TraceID() == request.SpanContext().TraceID() {
		t.Fatalf("consumer span %q in trace %s: want its own trace", got.Name(), got.SpanContext().TraceID())
	}
	if links := got.Links(); len(links) != 1 || links[0].SpanContext.SpanID() != request.SpanContext().SpanID() {
		t.Fatalf("consumer span links %v, want the request's span %s", links, request.SpanContext().SpanID())
	}
}

// A relay batch has a span of its own, "outbox publish": one for the batch, not one per
// row, in a trace of its own, linked once to each request that wrote one of its rows (two
// rows of one change, one link), so an operator sees when a request's event left for
// JetStream; it says how many rows the batch claimed and published.
func TestARelayBatchHasOneSpanLinkedToTheRequestsThatWroteItsRows(t *testing.T) {
	rec, tracer := recordSpans(t)
	ctx := context.Background()
	_, pool := newOutboxDB(t)
	_, js := connect(t, devnats.SharedURL(t), nil)
	stream, prefix := newStream(t, js)
	log, _ := newLog(t)

	write := func(name string, msgIDs ...string) trace.SpanContext {
		t.Helper()
		rctx, request := tracer.Start(ctx, name)
		defer request.End()
		msgs := make([]Message, len(msgIDs))
		for i, id := range msgIDs {
			msgs[i] = Message{TenantID: "t1", Subject: prefix + ".license.revoked", MsgID: id}
		}
		if err := pgxx.InTx(rctx, pool, func(tx pgx.Tx) error { return EnqueueAll(rctx, tx, msgs...) }); err != nil {
			t.Fatal(err)
		}
		return request.SpanContext()
	}
	revoke := write("POST /v1/revoke-license", "m1", "m2")
	issue := write("POST /v1/issue-license", "m3")
	enqueue(t, pool, Message{TenantID: "t2", Subject: prefix + ".license.deleted", MsgID: "m4"}) // no request span

	relay := NewRelay(pool, js, log)
	if sent, _, err := relay.relayBatch(ctx); err != nil || sent != 4 {
		t.Fatalf("relay batch sent %d (%v), want 4", sent, err)
	}
	if n := len(streamMsgs(t, js, stream)); n != 4 {
		t.Fatalf("stream holds %d messages, want 4", n)
	}
	var batches []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "outbox publish" && slices.ContainsFunc(s.Links(), func(l sdktrace.Link) bool {
			return l.SpanContext.TraceID() == revoke.TraceID() || l.SpanContext.TraceID() == issue.TraceID()
		}) {
			batches = append(batches, s)
		}
	}
	if len(batches) != 1 {
		t.Fatalf("%d relay spans link to the requests, want 1", len(batches))
	}
	span := batches[0]
	var linked []trace.SpanID
	for _, l := range span.Links() {
		linked = append(linked, l.SpanContext.SpanID())
	}
	if len(linked) != 2 || !slices.Contains(linked, revoke.SpanID()) || !slices.Contains(linked, issue.SpanID()) {
		t.Errorf("relay span links to %v, want once each to %s and %s", linked, revoke.SpanID(), issue.SpanID())
	}
	if span.SpanKind() != trace.SpanKindProducer || span.Parent().IsValid() ||
		span.SpanContext().TraceID() == revoke.TraceID() || span.SpanContext().TraceID() == issue.TraceID() {
		t.Errorf("relay span kind %v, parent %v: want a producer span, the root of a trace of its own", span.SpanKind(), span.Parent())
	}
	want := []attribute.KeyValue{
		attribute.String("messaging.system", "nats"), attribute.String("messaging.operation.name", "publish"),
		attribute.Int("messaging.batch.message_count", 4), attribute.Int("keyhouse.outbox.published", 4),
	}
	for _, kv := range want {
		if !slices.Contains(span.Attributes(), kv) {
			t.Errorf("relay span attributes %v, want %s=%s", span.Attributes(), kv.Key, kv.Value.Emit())
		}
	}
}
