package telemetry

import (
	"context"
	"iter"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Traceparent is the W3C traceparent of ctx's span, "" without one (tracing off). Work
// that outlives the request (a batch call, an outbox row, a message) carries it so that
// its own spans can link back to the request's.
func Traceparent(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	// The W3C form TraceContext's Inject writes (version 00), built directly: a batch call
	// asks this for each of its requests, and Inject's carrier map and context were
	// allocations per request on verify-license's path.
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + sc.TraceFlags().String()
}

// LinkTo is a span link to the span a traceparent names; ok is false for "" or a value
// that is not a traceparent.
func LinkTo(traceparent string) (link trace.Link, ok bool) {
	if traceparent == "" {
		return trace.Link{}, false
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": traceparent})
	sc := trace.SpanContextFromContext(ctx)
	return trace.Link{SpanContext: sc}, sc.IsValid()
}

// StartRoot starts a span of Keyhouse's own (the instrumentation of gRPC and HTTP start
// the others) for work no request waits on: a message consumed, a relay batch published,
// a mail or a webhook sent. It is the root of a trace of its own unless ctx already holds
// a span, and links to the span each traceparent names (the request that caused the
// work), when one does, once per span however often it is named. With tracing off (no
// tracer provider records: telemetry.SetupTracing installs one only when TracingEnabled)
// it is a no-op span, and traceparents (nil for none) is not even iterated, so a caller
// that reads them from a batch's rows or messages does no work for nothing: the links are
// added once the span is known to record (so a sampler does not see them; none of
// OTEL_TRACES_SAMPLER's looks at links).
func StartRoot(ctx context.Context, name string, kind trace.SpanKind, traceparents iter.Seq[string], attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	ctx, span := otel.Tracer("github.com/keyhouse/keyhouse").Start(ctx, name, trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
	if !span.IsRecording() || traceparents == nil {
		return ctx, span
	}
	linked := map[string]bool{}
	for tp := range traceparents {
		if linked[tp] {
			continue
		}
		linked[tp] = true
		if link, ok := LinkTo(tp); ok {
			span.AddLink(link)
		}
	}
	return ctx, span
}
