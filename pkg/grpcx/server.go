// Package grpcx builds the gRPC servers and clients every service uses: the same
// interceptor chain (panic recovery, request logging, auth, error hygiene), health,
// reflection, OpenTelemetry, and the shutdown sequence.
package grpcx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime/debug"
	"strings"
	"time"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/auth"
	"github.com/keyhouse/keyhouse/pkg/telemetry"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
)

// RequestIDHeader is propagated from the gateway to every service and into every log line.
const RequestIDHeader = "x-request-id"

// streamWorkers is how many goroutines serve calls (see NewServer).
const streamWorkers = 64

// Server is a gRPC server with its health service.
type Server struct {
	GRPC   *grpc.Server
	Health *health.Server
	log    *slog.Logger
}

// NewServer returns a server whose every call passes through the shared chain.
func NewServer(log *slog.Logger, authn *auth.Authenticator) *Server {
	opts := []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(recoverUnary(log), logUnary(log), authn.UnaryInterceptor()),
		grpc.ChainStreamInterceptor(authn.StreamInterceptor()),
		// Calls run on long-lived workers instead of a fresh goroutine each: a fresh one
		// grows its stack on every call (runtime.morestack was an eighth of licensing's
		// CPU on verify-license). When every worker is busy, a call still gets its own
		// goroutine, so this bounds nothing.
		grpc.NumStreamWorkers(streamWorkers),
	}
	if telemetry.TracingEnabled() {
		opts = append(opts, grpc.StatsHandler(otelgrpc.NewServerHandler()))
	}
	s := grpc.NewServer(opts...)
	h := health.NewServer()
	healthpb.RegisterHealthServer(s, h)
	reflection.Register(s)
	return &Server{GRPC: s, Health: h, log: log}
}

// Serve listens on addr until ctx is canceled, then shuts down in order: report
// NOT_SERVING so balancers stop sending, wait drain, stop gracefully within a deadline.
func (s *Server) Serve(ctx context.Context, addr string, drain time.Duration) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", addr, err)
	}
	s.Health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.log.Info("grpc serving", "addr", lis.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- s.GRPC.Serve(lis) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	s.Health.Shutdown()
	time.Sleep(drain)
	stopped := make(chan struct{})
	go func() { s.GRPC.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		s.GRPC.Stop()
	}
	return nil
}

func recoverUnary(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if r := recover(); r != nil {
				log.ErrorContext(ctx, "panic", "method", info.FullMethod, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
				err = status.Error(codes.Internal, apierr.InternalMessage)
			}
		}()
		return handler(ctx, req)
	}
}

// logUnary tags the context with the request id, logs the call, and replaces any error
// that is not a deliberate status with a bare Internal, so no internal detail escapes.
func logUnary(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if ids := metadata.ValueFromIncomingContext(ctx, RequestIDHeader); len(ids) > 0 {
			ctx = telemetry.WithRequestID(ctx, ids[0])
		}
		start := time.Now()
		resp, err := handler(ctx, req)
		code := codes.OK
		if err != nil {
			err = normalize(ctx, log, info.FullMethod, err)
			code = status.Code(err)
		}
		// The gateway's access log already has one line per request (joined to this one
		// by the request id), so a success is logged at debug only: at info it doubled the
		// log volume and cost a tenth of a service's CPU under load. Errors stay visible.
		level := slog.LevelDebug
		switch {
		case code == codes.Internal || code == codes.Unknown:
			level = slog.LevelError
		case code != codes.OK && !strings.HasPrefix(info.FullMethod, "/grpc.health.v1."):
			level = slog.LevelInfo
		}
		log.Log(ctx, level, "rpc", "method", info.FullMethod, "code", code.String(), "duration_ms", time.Since(start).Milliseconds())
		return resp, err
	}
}

func normalize(ctx context.Context, log *slog.Logger, method string, err error) error {
	var ae *apierr.Error
	if errors.As(err, &ae) {
		return ae.GRPCStatus().Err()
	}
	if errors.Is(err, context.Canceled) {
		return status.Error(codes.Canceled, "request canceled")
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return apierr.Unavailable("Request timed out, retry").GRPCStatus().Err()
	}
	if st, ok := status.FromError(err); ok && st.Code() != codes.Unknown && st.Code() != codes.Internal {
		return err
	}
	log.ErrorContext(ctx, "internal error", "method", method, "error", err.Error())
	return status.Error(codes.Internal, apierr.InternalMessage)
}

// Dial connects to another service (or the gateway to a service). Connections are lazy,
// so start order does not matter.
func Dial(addr string) (*grpc.ClientConn, error) {
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(propagateRequestID),
		// gRPC's default reconnect backoff grows to 2 minutes: a dependency that restarts
		// (a rollout, a crash) would stay unreachable that long after it is back. Peers are
		// in the same cluster, so retry often.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
	}
	if telemetry.TracingEnabled() {
		opts = append(opts, grpc.WithStatsHandler(otelgrpc.NewClientHandler()))
	}
	return grpc.NewClient(addr, opts...)
}

func propagateRequestID(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if id := telemetry.RequestID(ctx); id != "" {
		if md, _ := metadata.FromOutgoingContext(ctx); len(md.Get(RequestIDHeader)) == 0 {
			ctx = metadata.AppendToOutgoingContext(ctx, RequestIDHeader, id)
		}
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}
