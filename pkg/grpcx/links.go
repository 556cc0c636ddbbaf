package grpcx

import (
	"context"

	"github.com/keyhouse/keyhouse/pkg/telemetry"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
)

// LinksHeader carries, on a batch call, the W3C traceparent of each request the batch
// serves. The batch is a trace of its own (it serves many requests, so it belongs to
// none), and its client and server spans link to each of those requests' spans: from a
// slow request's trace an operator finds the batch that did its work, and back.
const LinksHeader = "keyhouse-links"

// withLinks adds the span context of each of a batch's n calls (call(i) is the context
// of the i-th) to the batch call's outgoing metadata (LinksHeader). Contexts without a
// span (tracing off) add nothing.
func withLinks(ctx context.Context, n int, call func(int) context.Context) context.Context {
	var kv []string
	for i := range n {
		if tp := telemetry.Traceparent(call(i)); tp != "" {
			kv = append(kv, LinksHeader, tp)
		}
	}
	if len(kv) == 0 {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, kv...)
}

// linkHandler adds the links of LinksHeader to the call's span, which otelgrpc's stats
// handler (installed before it) has started: on a client, from the outgoing metadata; on
// a server, from the incoming.
type linkHandler struct{ server bool }

func (h linkHandler) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return ctx
	}
	var md metadata.MD
	if h.server {
		md, _ = metadata.FromIncomingContext(ctx)
	} else {
		md, _ = metadata.FromOutgoingContext(ctx)
	}
	for _, tp := range md.Get(LinksHeader) {
		if link, ok := telemetry.LinkTo(tp); ok {
			span.AddLink(link)
		}
	}
	return ctx
}

func (linkHandler) HandleRPC(context.Context, stats.RPCStats) {}

func (linkHandler) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }

func (linkHandler) HandleConn(context.Context, stats.ConnStats) {}
