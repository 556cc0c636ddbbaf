package grpcx

import (
	"context"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/health/grpc_health_v1"
)

// A batch call is a trace of its own, but what an operator follows from a slow request
// (the gateway's span of a verify-license) must lead to it: the batch call's client span
// and the server span of the service that did the work link to the span of every request
// the batch served.
func TestABatchCallLinksToTheSpanOfEveryRequestItServes(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1") // instrumentation on; nothing exported
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	was := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(was) })

	_, addr := servePeer(t, "127.0.0.1:0")
	conn, err := Dial("linked-peer", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	health := grpc_health_v1.NewHealthClient(conn)

	// The first call holds the batch slot until the others have queued, so they go
	// out together in one batch call.
	entered, queued := make(chan struct{}), make(chan struct{})
	b := &Batcher[string, string]{Reads: true}
	first := true
	b.Send = func(ctx context.Context, items []string) ([]string, error) {
		if first {
			first = false
			close(entered)
			<-queued
		}
		if _, err := health.Check(ctx, &grpc_health_v1.HealthCheckRequest{Service: ServingHealthName}); err != nil {
			return nil, err
		}
		return items, nil
	}
	tracer := tp.Tracer("test")
	const n = 4
	requests := make([]trace.SpanContext, n)
	done := make(chan struct{}, n)
	for i := range n {
		ctx, span := tracer.Start(context.Background(), "request")
		requests[i] = span.SpanContext()
		go func() {
			defer span.End()
			if _, err := b.Do(ctx, "item"); err != nil {
				t.Error(err)
			}
			done <- struct{}{}
		}()
		if i == 0 {
			<-entered
		}
	}
	for deadline := time.Now().Add(10 * time.Second); b.Queued() < n-1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d calls queued behind the first batch, want %d", b.Queued(), n-1)
		}
	}
	close(queued)
	for range n {
		<-done
	}

	linked := map[trace.SpanKind][]trace.SpanID{}
	for _, s := range rec.Ended() {
		if s.Name() != "grpc.health.v1.Health/Check" {
			continue
		}
		if slices.ContainsFunc(requests, func(r trace.SpanContext) bool { return r.TraceID() == s.SpanContext().TraceID() }) {
			t.Errorf("%v span %s is in a request's trace; a batch is a trace of its own", s.SpanKind(), s.Name())
		}
		for _, l := range s.Links() {
			linked[s.SpanKind()] = append(linked[s.SpanKind()], l.SpanContext.SpanID())
		}
	}
	// Two batch calls: the first request alone, then the three queued behind it.
	for _, kind := range []trace.SpanKind{trace.SpanKindClient, trace.SpanKindServer} {
		for _, r := range requests {
			if !slices.Contains(linked[kind], r.SpanID()) {
				t.Errorf("no %v span of the batch calls links to request span %s (links: %v)", kind, r.SpanID(), linked[kind])
			}
		}
	}
}
