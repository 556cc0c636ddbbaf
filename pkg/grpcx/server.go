// Package grpcx builds the gRPC servers and clients every service uses: the same
// interceptor chain (panic recovery, request logging, auth, error hygiene), health,
// reflection, OpenTelemetry, and the shutdown sequence.
package grpcx

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/auth"
	"github.com/keyhouse/keyhouse/pkg/listenfd"
	"github.com/keyhouse/keyhouse/pkg/metrics"
	"github.com/keyhouse/keyhouse/pkg/readiness"
	"github.com/keyhouse/keyhouse/pkg/telemetry"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"
)

// RequestIDHeader is propagated from the gateway to every service and into every log line.
const RequestIDHeader = "x-request-id"

// ServingHealthName is the grpc.health.v1 service name internal clients watch to pick
// replicas (Dial's healthCheckConfig). It reports SERVING while the replica can answer
// requests: not draining, and every dependency that requests need answering. The
// overall status (service name "", for Kubernetes probes and the gateway's /readyz) also
// counts dependencies only background work needs, such as a NATS consumer.
const ServingHealthName = "keyhouse.serving"

// streamWorkers is how many goroutines serve calls (see NewServer).
const streamWorkers = 64

// Flow-control windows of every connection between Keyhouse's processes, fixed. Left to
// gRPC, each side estimates the link's bandwidth-delay product with a PING after the
// first DATA frame it receives following the last PING's answer, so on the hot paths'
// one-batch-at-a-time calls nearly every call cost two PINGs and two answers more: two
// more frames to write and read on each side, each a wake-up of the transport's writer.
// Peers sit in one cluster, where the estimate has nothing to find; these windows are
// what it grows towards for such links; a message larger than a window (a big list
// page, up to MaxAnswerBytes) streams through it in window-sized steps.
const (
	streamWindow = 1 << 20
	connWindow   = 4 << 20
)

// Server is a gRPC server with its health service.
type Server struct {
	GRPC   *grpc.Server
	Health *health.Server
	log    *slog.Logger

	monitor  *readiness.Monitor
	mu       sync.Mutex
	draining bool
}

// ServerOptions configure NewServer.
type ServerOptions struct {
	// RequestTimeout is the budget of a call that arrives without a deadline (REQUEST_TIMEOUT).
	RequestTimeout time.Duration
	// Monitor, when set, drives the health statuses: a failing dependency turns them
	// NOT_SERVING until it answers again.
	Monitor *readiness.Monitor
	// Unary interceptors run last in the shared chain, after the authenticator (which
	// lets public methods through without a credential).
	Unary []grpc.UnaryServerInterceptor
}

// NewServer returns a server whose every call passes through the shared chain.
func NewServer(log *slog.Logger, authn *auth.Authenticator, o ServerOptions) *Server {
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = 5 * time.Second
	}
	opts := []grpc.ServerOption{
		// The input policy (input.go) runs before the authenticator, as the REST edge
		// refuses a body before the service is called.
		grpc.ChainUnaryInterceptor(append([]grpc.UnaryServerInterceptor{recoverUnary(log), logUnary(log), inputUnary, budgetUnary(o.RequestTimeout), authn.UnaryInterceptor()}, o.Unary...)...),
		grpc.ForceServerCodecV2(newRequestCodec()),
		grpc.ChainStreamInterceptor(authn.StreamInterceptor()),
		// Connections are recycled every few minutes so clients resolving a headless
		// Service by DNS re-resolve and find replicas added since they connected. Calls in
		// flight get the grace period to finish.
		// Time and Timeout close a connection whose caller stopped reading it (limits.go).
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionAge: 2 * time.Minute, MaxConnectionAgeGrace: 30 * time.Second, Time: keepaliveTime, Timeout: keepaliveTimeout}),
		grpc.MaxRecvMsgSize(MaxRequestBytes),
		grpc.MaxSendMsgSize(MaxAnswerBytes),
		grpc.MaxConcurrentStreams(maxConcurrentStreams),
		// Calls run on long-lived workers instead of a fresh goroutine each: a fresh one
		// grows its stack on every call (runtime.morestack was an eighth of licensing's
		// CPU on verify-license). When every worker is busy, a call still gets its own
		// goroutine, so this bounds nothing.
		grpc.NumStreamWorkers(streamWorkers),
		grpc.StaticStreamWindowSize(streamWindow),
		grpc.StaticConnWindowSize(connWindow),
	}
	if telemetry.TracingEnabled() {
		opts = append(opts, grpc.StatsHandler(otelgrpc.NewServerHandler()), grpc.StatsHandler(linkHandler{server: true}))
	}
	s := grpc.NewServer(opts...)
	h := health.NewServer()
	healthpb.RegisterHealthServer(s, h)
	reflection.Register(s)
	srv := &Server{GRPC: s, Health: h, log: log, monitor: o.Monitor}
	if o.Monitor != nil {
		o.Monitor.OnChange(srv.updateHealth)
	}
	return srv
}

// updateHealth sets both health statuses from the monitor, unless the server is draining.
func (s *Server) updateHealth() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining {
		return
	}
	overall, serving := healthpb.HealthCheckResponse_SERVING, healthpb.HealthCheckResponse_SERVING
	if s.monitor != nil {
		if len(s.monitor.NotReady()) > 0 {
			overall = healthpb.HealthCheckResponse_NOT_SERVING
		}
		if len(s.monitor.RequestsBlocked()) > 0 {
			serving = healthpb.HealthCheckResponse_NOT_SERVING
		}
	}
	s.Health.SetServingStatus("", overall)
	s.Health.SetServingStatus(ServingHealthName, serving)
}

// Shutdown is the stop sequence's timing (SHUTDOWN_DELAY, SHUTDOWN_TIMEOUT).
type Shutdown struct {
	// Delay is how long the server keeps answering after it reported NOT_SERVING, so
	// clients and Kubernetes stop sending before it stops accepting.
	Delay time.Duration
	// Timeout bounds the drain of calls in flight; what is left then is cut.
	Timeout time.Duration
}

// Serve listens on addr until ctx is canceled, then shuts down in order: report
// NOT_SERVING so balancers stop sending, keep serving for Delay, then stop gracefully
// (in-flight calls finish) within Timeout. A clean stop returns nil.
func (s *Server) Serve(ctx context.Context, addr string, sd Shutdown) error {
	lis, err := listenfd.Listen("grpc", addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", addr, err)
	}
	s.updateHealth()
	s.log.Info("grpc serving", "addr", lis.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- s.GRPC.Serve(lis) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	s.mu.Lock()
	s.draining = true
	s.Health.Shutdown() // every status NOT_SERVING, and it stays so
	s.mu.Unlock()
	s.log.Info("shutting down: not serving, draining", "delay", sd.Delay.String(), "timeout", sd.Timeout.String())
	time.Sleep(sd.Delay)
	stopped := make(chan struct{})
	go func() { s.GRPC.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(sd.Timeout):
		s.log.Warn("drain timed out, cutting the remaining calls", "timeout", sd.Timeout.String())
		s.GRPC.Stop()
	}
	return nil
}

// budgetUnary gives every call a deadline. A call without one (a direct gRPC client)
// gets def. A call with one is cut a little earlier than its caller's deadline, so a
// dependency that hangs makes this service answer its own 503 while the caller still
// listens, instead of the caller timing out with nothing to say.
func budgetUnary(def time.Duration) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if strings.HasPrefix(info.FullMethod, "/grpc.") {
			return handler(ctx, req) // health and reflection
		}
		var cancel context.CancelFunc
		if dl, ok := ctx.Deadline(); ok {
			margin := min(max(time.Until(dl)/10, 20*time.Millisecond), 250*time.Millisecond)
			ctx, cancel = context.WithDeadline(ctx, dl.Add(-margin))
		} else {
			ctx, cancel = context.WithTimeout(ctx, def)
		}
		defer cancel()
		return handler(ctx, req)
	}
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
		return resp, ObserveCall(ctx, log, info.FullMethod, time.Since(start), err)
	}
}

// ObserveCall is what the server does with the outcome of every call of method: the error
// normalized (see logUnary), the call counted and timed in the metrics and logged. A
// handler answering many calls in one (an item of a batch) observes each item with it, so
// each is logged and counted as the call it stands for.
func ObserveCall(ctx context.Context, log *slog.Logger, method string, elapsed time.Duration, err error) error {
	code := codes.OK
	if err != nil {
		err = normalize(ctx, log, method, err)
		code = status.Code(err)
	}
	// The gateway's access log already has one line per request (joined to this one by
	// the request id), so a success is logged at debug only: at info it doubled the log
	// volume and cost a tenth of a service's CPU under load. Errors stay visible.
	level := slog.LevelDebug
	switch {
	case code == codes.Internal || code == codes.Unknown:
		level = slog.LevelError
	case code != codes.OK && !strings.HasPrefix(method, "/grpc.health.v1."):
		level = slog.LevelInfo
	}
	metrics.GRPCRequests.WithLabelValues(method, code.String()).Inc()
	metrics.GRPCDuration.WithLabelValues(method, code.String()).Observe(elapsed.Seconds())
	log.Log(ctx, level, "rpc", "method", method, "code", code.String(), "duration_ms", elapsed.Milliseconds())
	return err
}

func normalize(ctx context.Context, log *slog.Logger, method string, err error) error {
	var ae *apierr.Error
	if errors.As(err, &ae) {
		return ae.GRPCStatus().Err()
	}
	if errors.Is(err, context.Canceled) {
		return status.Error(codes.Canceled, "request canceled")
	}
	if isDatabaseUnavailable(err) {
		// The outage itself is logged once by the readiness monitor, not per request.
		return apierr.Unavailable(DatabaseUnavailable).GRPCStatus().Err()
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return apierr.Unavailable(apierr.UnavailableMessage).GRPCStatus().Err()
	}
	if st, ok := status.FromError(err); ok && st.Code() != codes.Unknown && st.Code() != codes.Internal {
		return err
	}
	log.ErrorContext(ctx, "internal error", "method", method, "error", err.Error())
	return status.Error(codes.Internal, apierr.InternalMessage)
}

// DatabaseUnavailable is the 503 text of a database that could not be reached or did not
// answer within the request's budget (a service's: apierr.UnavailableMessage).
const DatabaseUnavailable = "Database unavailable, retry"

// isDatabaseUnavailable reports a Postgres that could not be reached, did not answer in
// time (pgx turns the request's deadline into a timeout error), or ended the connection
// the query was on: it is shutting down, restarting or starting up
// (postgresUnavailableStates), or the connection broke under the query. A stopped or
// restarted Postgres ends every pooled connection, and the first query on each finds it
// so: that query's answer is a 503 to retry as much as the next one's, which finds no
// server to connect to.
func isDatabaseUnavailable(err error) bool {
	var connErr *pgconn.ConnectError
	var pgErr *pgconn.PgError
	var httpErr *url.Error
	switch {
	case errors.As(err, &connErr):
		return true
	case pgconn.Timeout(err):
		return !errors.Is(err, context.Canceled)
	case errors.As(err, &pgErr):
		return postgresUnavailableStates[pgErr.Code]
	case errors.As(err, &httpErr):
		// A connection to an HTTP dependency (Stripe, a webhook) broke: its caller names
		// that dependency; it is not the database.
		return false
	}
	// The connection broke: pgx passes on the read's or the write's error (a server gone
	// without a word is an unexpected EOF), then fails every later use with ErrConnClosed.
	return errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.EPIPE)
}

// postgresUnavailableStates are the SQLSTATEs with which Postgres ends a connection, or
// refuses one, because the server is going away or not up yet (class 57P) or the
// connection failed (class 08, but for 08P01, a protocol violation: a defect).
var postgresUnavailableStates = map[string]bool{
	"57P01": true, // admin_shutdown: a smart or fast stop, or pg_terminate_backend
	"57P02": true, // crash_shutdown: another backend crashed, the server restarts
	"57P03": true, // cannot_connect_now: starting up, shutting down, in recovery
	"08000": true, // connection_exception
	"08001": true, // sqlclient_unable_to_establish_sqlconnection
	"08003": true, // connection_does_not_exist
	"08004": true, // sqlserver_rejected_establishment_of_sqlconnection
	"08006": true, // connection_failure
}

// clientServiceConfig balances calls over every address of a target and skips replicas
// whose ServingHealthName is not SERVING (draining, or their database is gone).
const clientServiceConfig = `{"loadBalancingConfig":[{"round_robin":{}}],"healthCheckConfig":{"serviceName":"` + ServingHealthName + `"}}`

// staticScheme names the resolver of comma-separated address lists.
const staticScheme = "keyhouse-static"

const (
	maxReconnectDelay = time.Second
	reconnectJitter   = 0.2
)

// Dial connects to the service named peer ("licensing", "activations", ...) from another
// service or the gateway. addr is host:port (a DNS name resolving to every replica, such
// as a Kubernetes headless Service, or any gRPC target URI) or a comma-separated list of
// host:port. Calls are spread round-robin over the replicas that report SERVING, so a
// draining replica gets no new calls. Connections are made in the background
// (reportReachable), so start order does not matter. extra adds options (an interceptor added with grpc.WithChainUnaryInterceptor
// runs inside the request id's). Until the connection is closed, keyhouse_peer_reachable
// says whether calls to peer can go out (reportReachable).
func Dial(peer, addr string, extra ...grpc.DialOption) (*grpc.ClientConn, error) {
	target := addr
	if strings.Contains(addr, ",") {
		var addrs []resolver.Address
		for _, a := range strings.Split(addr, ",") {
			if a = strings.TrimSpace(a); a != "" {
				addrs = append(addrs, resolver.Address{Addr: a})
			}
		}
		r := manual.NewBuilderWithScheme(staticScheme)
		r.InitialState(resolver.State{Addresses: addrs})
		extra = append(extra, grpc.WithResolvers(r))
		target = staticScheme + ":///" + addrs[0].Addr
	}
	opts := []grpc.DialOption{
		grpc.WithDefaultServiceConfig(clientServiceConfig),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(propagateRequestID),
		grpc.WithStaticStreamWindowSize(streamWindow),
		grpc.WithStaticConnWindowSize(connWindow),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxAnswerBytes), grpc.MaxCallSendMsgSize(MaxRequestBytes)),
		// gRPC's default reconnect backoff grows to 2 minutes: a dependency that restarts
		// (a rollout, a crash) would stay unreachable that long after it is back. Peers are
		// in the same cluster, so retry often.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: reconnectJitter, MaxDelay: maxReconnectDelay},
			MinConnectTimeout: 5 * time.Second,
		}),
	}
	if telemetry.TracingEnabled() {
		opts = append(opts, grpc.WithStatsHandler(otelgrpc.NewClientHandler()), grpc.WithStatsHandler(linkHandler{}))
	}
	conn, err := grpc.NewClient(target, append(opts, extra...)...)
	if err != nil {
		return nil, err
	}
	go reportReachable(peer, conn)
	return conn, nil
}

// reportReachable keeps keyhouse_peer_reachable{peer} at 0 while conn is in transient
// failure and at 1 otherwise (connected, connecting, or idle), until conn is closed. In
// transient failure the last attempt to reach every replica failed, or none reports
// SERVING, and the channel stays there until one is ready again, however soon the peer
// is back: a call without WaitForReady fails at once (the gateway answers the peer's
// routes 503), and the next attempt waits for the reconnect backoff (up to
// maxReconnectDelay and its jitter). So this, not the peer's own health, says when a
// restarted peer is reachable from here.
//
// An idle connection (not used yet, or unused for a while) says nothing about the peer,
// so it is made to connect: the gauge is 1 only once a replica answered (or while a
// connection attempt is under way), never for a peer that was never tried. The
// connection is then kept up, as the health checking of a used one is.
func reportReachable(peer string, conn *grpc.ClientConn) {
	reachable := metrics.PeerReachable.WithLabelValues(peer)
	for state := conn.GetState(); state != connectivity.Shutdown; state = conn.GetState() {
		switch state {
		case connectivity.TransientFailure:
			reachable.Set(0)
		case connectivity.Idle:
			conn.Connect()
		default:
			reachable.Set(1)
		}
		conn.WaitForStateChange(context.Background(), state)
	}
}

func propagateRequestID(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if id := telemetry.RequestID(ctx); id != "" {
		if md, _ := metadata.FromOutgoingContext(ctx); len(md.Get(RequestIDHeader)) == 0 {
			ctx = metadata.AppendToOutgoingContext(ctx, RequestIDHeader, id)
		}
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}
