package telemetry

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// Traceparent writes what W3C TraceContext propagation writes for the same span, sampled
// or not, and LinkTo reads it back to that span; without a span there is none.
func TestTraceparentIsTheW3CHeaderAndLinksBackToItsSpan(t *testing.T) {
	if tp := Traceparent(context.Background()); tp != "" {
		t.Fatalf("Traceparent without a span = %q, want empty", tp)
	}
	for _, flags := range []trace.TraceFlags{0, trace.FlagsSampled} {
		sc := trace.NewSpanContext(trace.SpanContextConfig{
			TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
			SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
			TraceFlags: flags,
		})
		ctx := trace.ContextWithSpanContext(context.Background(), sc)
		carrier := propagation.MapCarrier{}
		propagation.TraceContext{}.Inject(ctx, carrier)
		if got, want := Traceparent(ctx), carrier.Get("traceparent"); got != want || want == "" {
			t.Errorf("flags %v: Traceparent = %q, TraceContext writes %q", flags, got, want)
		}
		link, ok := LinkTo(Traceparent(ctx))
		if !ok || link.SpanContext.TraceID() != sc.TraceID() || link.SpanContext.SpanID() != sc.SpanID() {
			t.Errorf("flags %v: LinkTo(Traceparent) = %v, %v; want a link to the span", flags, link.SpanContext, ok)
		}
	}
}

// With tracing off (no tracer provider records) StartRoot does not iterate the
// traceparents, so a relay batch's rows or a consumer's messages are not read for
// nothing; with a recording provider it links once to each span they name, and skips
// what names none.
func TestStartRootReadsTheTraceparentsOnlyWhenItsSpanRecords(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	var requests []string
	for range 2 {
		ctx, span := tp.Tracer("test").Start(context.Background(), "request")
		requests = append(requests, Traceparent(ctx))
		span.End()
	}
	iterated := 0
	traceparents := func(yield func(string) bool) {
		iterated++
		for _, tp := range []string{requests[0], "", requests[1], requests[0], "not a traceparent"} {
			if !yield(tp) {
				return
			}
		}
	}

	_, off := StartRoot(context.Background(), "tracing off", trace.SpanKindProducer, traceparents)
	off.End()
	if off.IsRecording() || iterated != 0 {
		t.Fatalf("tracing off: recording %v, traceparents iterated %d times, want none", off.IsRecording(), iterated)
	}

	was := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(was) })
	_, on := StartRoot(context.Background(), "tracing on", trace.SpanKindProducer, traceparents)
	on.End()
	_, none := StartRoot(context.Background(), "no traceparents", trace.SpanKindClient, nil)
	recording := none.IsRecording()
	none.End()
	if !recording {
		t.Fatal("a span without traceparents does not record")
	}
	ended := rec.Ended()
	if iterated != 1 || len(ended) < 3 || ended[2].Name() != "tracing on" {
		t.Fatalf("tracing on: traceparents iterated %d times, spans %v", iterated, ended)
	}
	links := ended[2].Links()
	if len(links) != 2 || Traceparent(trace.ContextWithSpanContext(context.Background(), links[0].SpanContext)) != requests[0] ||
		Traceparent(trace.ContextWithSpanContext(context.Background(), links[1].SpanContext)) != requests[1] {
		t.Fatalf("tracing on: links %v, want one to each of %v", links, requests)
	}
}
