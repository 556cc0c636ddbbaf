// Package telemetry sets up structured logs and OpenTelemetry tracing the same way in
// every binary. Tracing follows the standard OTEL_* variables and is off unless an OTLP
// endpoint is configured; trace context is propagated either way.
package telemetry

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

type requestIDKey struct{}

// WithRequestID tags ctx so every log line of the request carries the id.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}

// RequestID returns the request id in ctx, if any.
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// NewLogger returns the process logger: JSON (or text) on w, with the service name and,
// per record, the request id and trace id found in the context. Credentials never reach
// its lines and license keys are masked (redact.go), whoever logs them. Lines reach w through a
// bounded buffer (LogBufferLines): logging never waits for w, so a reader that stops
// reading costs dropped lines (counted in keyhouse_log_lines_dropped_total, and reported
// in one WARN line once w takes lines again), never a request's latency. FlushLogs writes
// what is left at exit.
func NewLogger(w io.Writer, service, level, format string, options ...LogOption) *slog.Logger {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		lv = slog.LevelInfo
	}
	var settings logSettings
	for _, o := range options {
		o(&settings)
	}
	opts := &slog.HandlerOptions{Level: lv, ReplaceAttr: settings.redactAttr}
	handler := func(w io.Writer) slog.Handler {
		if strings.EqualFold(format, "text") {
			return slog.NewTextHandler(w, opts)
		}
		return slog.NewJSONHandler(w, opts)
	}
	report := func(n uint64) []byte {
		var b bytes.Buffer
		slog.New(handler(&b)).With("service", service).Warn("log lines dropped: the log reader stalled", "dropped", n)
		return b.Bytes()
	}
	bw := newBoundedWriter(w, LogBufferLines, report)
	writersMu.Lock()
	writers = append(writers, bw)
	writersMu.Unlock()
	log := slog.New(contextHandler{Handler: handler(bw)}).With("service", service)
	if strings.EqualFold(format, "text") && plain(service) {
		// The access log's lines, written by LogHTTP without slog's pass over them.
		h := log.Handler().(contextHandler)
		h.fast = &fastText{w: bw, attrs: " service=" + service, settings: settings}
		log = slog.New(h)
	}
	return log
}

// contextHandler adds the request and trace ids of the context to each record. fast is
// set on the logger NewLogger returns alone, never on one with attributes added (With
// drops it), so LogHTTP writes only lines that carry no more than it writes.
type contextHandler struct {
	slog.Handler
	fast *fastText
}

func (h contextHandler) Handle(ctx context.Context, r slog.Record) error {
	if id := RequestID(ctx); id != "" {
		r.AddAttrs(slog.String("request_id", id))
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h contextHandler) WithAttrs(a []slog.Attr) slog.Handler {
	return contextHandler{Handler: h.Handler.WithAttrs(a)}
}

func (h contextHandler) WithGroup(name string) slog.Handler {
	return contextHandler{Handler: h.Handler.WithGroup(name)}
}

// TracingEnabled reports whether the standard OTEL_* variables turn tracing on: an OTLP
// endpoint is set and OTEL_SDK_DISABLED is not true. When it is off, servers and clients
// leave the OpenTelemetry instrumentation out entirely rather than run it against a no-op
// provider: it costs about a tenth of the gateway's CPU per request for nothing.
func TracingEnabled() bool {
	return !strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") &&
		(os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "")
}

// SetupTracing installs the W3C propagator and, when OTEL_EXPORTER_OTLP_ENDPOINT (or the
// traces-specific variable) is set and OTEL_SDK_DISABLED is not true, an OTLP/gRPC exporter.
// The returned function flushes and stops it.
func SetupTracing(ctx context.Context, service string) (func(context.Context) error, error) {
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	noop := func(context.Context) error { return nil }
	if !TracingEnabled() {
		return noop, nil
	}
	exp, err := otlptracegrpc.New(ctx)
	if err != nil {
		return noop, err
	}
	// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, read by WithFromEnv, override the default name.
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", service)), resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		res = resource.Default()
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	return tp.Shutdown, nil
}
