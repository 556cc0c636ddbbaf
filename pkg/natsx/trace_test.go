package natsx

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

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
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	was := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(was) })

	ctx, request := tp.Tracer("test").Start(context.Background(), "POST /v1/webhooks/storefront/{webhook_id}")
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
