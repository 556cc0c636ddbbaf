package telemetry

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/propagation"
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
