// Command gateway serves the /v1 REST surface and forwards it to the services over gRPC.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/keyhouse/keyhouse/console"
	"github.com/keyhouse/keyhouse/gateway/internal/admission"
	"github.com/keyhouse/keyhouse/gateway/internal/edge"
	"github.com/keyhouse/keyhouse/gateway/internal/ratelimit"
	"github.com/keyhouse/keyhouse/pkg/buildinfo"
	"github.com/keyhouse/keyhouse/pkg/config"
	"github.com/keyhouse/keyhouse/pkg/grpcx"
	"github.com/keyhouse/keyhouse/pkg/licensecache"
	"github.com/keyhouse/keyhouse/pkg/listenfd"
	"github.com/keyhouse/keyhouse/pkg/metrics"
	"github.com/keyhouse/keyhouse/pkg/natsx"
	"github.com/keyhouse/keyhouse/pkg/readiness"
	"github.com/keyhouse/keyhouse/pkg/telemetry"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func main() {
	if len(os.Args) > 1 && (os.Args[1] == "version" || os.Args[1] == "--version") {
		fmt.Println(buildinfo.Version(), buildinfo.Fingerprint())
		return
	}
	rt := config.TuneRuntime()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, rt)
	stop()
	// The last lines (shutdown, the drain) wait in the log buffer; a stalled reader gets
	// two seconds, not a process that never exits.
	telemetry.FlushLogs(2 * time.Second)
	if err != nil {
		fmt.Fprintf(os.Stderr, "gateway: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, rt config.Runtime) error {
	cfg, err := config.Load()
	if err != nil {
		return err
	}
	log := telemetry.NewLogger(os.Stderr, "gateway", cfg.LogLevel, cfg.LogFormat, telemetry.FullLicenseKeys(cfg.LogFullLicenseKeys))
	telemetry.RouteLibraryLogs(log)
	cfg.LogWarnings(log)
	// Both ports are bound first: what follows (NATS, the services) may take a while,
	// and a port chosen for this process must not be taken by another meanwhile.
	addr := net.JoinHostPort("", strconv.Itoa(cfg.Port))
	metricsAddr, err := cfg.MetricsAddr(addr)
	if err != nil {
		return err
	}
	lis, err := listenfd.Listen("http", addr)
	if err != nil {
		return err
	}
	defer lis.Close()
	ms, err := metrics.Serve(metricsAddr, log)
	if err != nil {
		return err
	}
	defer ms.Close()
	// go-redis prints a plain-text line per failed dial (every second while Redis is
	// down); the limiter and the readiness monitor report the outage once instead.
	redis.SetLogger(redisLogger{log.With("component", "redis")})
	shutdownTracing, err := telemetry.SetupTracing(ctx, "keyhouse-gateway")
	if err != nil {
		log.Warn("tracing disabled", "error", err.Error())
	}
	defer func() {
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = shutdownTracing(c)
	}()

	redisOpts, err := redis.ParseURL(cfg.RedisURL.Reveal())
	if err != nil {
		return errors.New("config: REDIS_URL is not a valid redis:// URL")
	}
	// Per-call deadlines must hold for a Redis that accepts connections but stops answering
	// (see ratelimit.New).
	redisOpts.ContextTimeoutEnabled = true
	// Bounds for the calls that bring no deadline of their own, and for dialing: a Redis
	// that accepts connections but never answers costs a bounded wait, never a hang.
	redisOpts.DialTimeout = time.Second
	redisOpts.ReadTimeout = 500 * time.Millisecond
	redisOpts.WriteTimeout = 500 * time.Millisecond
	redisOpts.PoolTimeout = time.Second
	rdb := redis.NewClient(redisOpts)
	defer rdb.Close()

	// The answers of verify-license, validate-license and check-update are cached here
	// (edge.Caches), following the change events over NATS like the services' license
	// caches (LICENSE_CACHE_TTL bounds them, LICENSE_CACHE_LIVE_TTL while their liveness is
	// proven), and dropped as soon as a write through this gateway announces what it changed.
	nc, _, err := natsx.Connect(ctx, cfg.NATSURL.Reveal(), "gateway", log)
	if err != nil {
		return err
	}
	defer nc.Close()
	caches := edge.NewCaches(cfg.LicenseCacheTTL, cfg.LicenseCacheLiveTTL)
	stopCaches, err := caches.Follow(nc)
	if err != nil {
		return err
	}
	defer stopCaches()
	// The calls to the services that cache licenses name the keys this gateway heard
	// changed within the settle window, so those services drop them first: a write is
	// followed by no stale answer through this gateway, from any hop.
	dropAnnounced := grpc.WithChainUnaryInterceptor(caches.DropAnnounced(), licensecache.ForwardRecentChanges())
	// Admission control shares capacity by tenant. The services' answers name the tenant
	// of each license key they are about, and who a client's credential proved to be.
	tenants := admission.NewTenants()
	caches.TenantOf = tenants.Owner
	learnTenants := grpc.WithChainUnaryInterceptor(tenants.Learning())

	var conns edge.Conns
	backends := []struct {
		name string
		addr string
		dst  **grpc.ClientConn
		opts []grpc.DialOption
	}{
		{"licensing", cfg.LicensingAddr, &conns.Licensing, []grpc.DialOption{dropAnnounced, learnTenants}},
		{"activations", cfg.ActivationsAddr, &conns.Activations, []grpc.DialOption{dropAnnounced, learnTenants}},
		{"releases", cfg.ReleasesAddr, &conns.Releases, []grpc.DialOption{dropAnnounced, learnTenants}},
		{"billing", cfg.BillingAddr, &conns.Billing, []grpc.DialOption{learnTenants}},
		{"storefront", cfg.StorefrontAddr, &conns.Storefront, []grpc.DialOption{learnTenants}},
		{"events", cfg.EventsAddr, &conns.Events, []grpc.DialOption{learnTenants}},
	}
	for _, b := range backends {
		conn, err := grpcx.Dial(b.name, b.addr, b.opts...)
		if err != nil {
			return err
		}
		defer conn.Close()
		*b.dst = conn
	}

	monitor := readiness.New(log, readiness.Check{Name: "redis", Probe: func(ctx context.Context) error {
		return rdb.Ping(ctx).Err()
	}})
	for _, b := range backends {
		monitor.Add(readiness.Check{Name: b.name, Probe: grpcHealthProbe(*b.dst)})
	}
	var draining atomic.Bool
	notReady := func() []string {
		if draining.Load() {
			return []string{"shutting down"}
		}
		return monitor.NotReady()
	}

	limiter := ratelimit.New(rdb, log, cfg.RateLimitRedisTimeout)
	pages, err := console.New(console.Options{
		Log:             log,
		Conns:           console.Conns(conns),
		MultiTenant:     cfg.MultiTenant,
		PublicBaseURL:   cfg.PublicBaseURL,
		ExportGate:      &console.RedisExportGate{Client: rdb},
		TooManyRequests: ratelimit.WriteTooManyRequests,
		// Every replica derives the sign-in form's CSRF token with the same secret.
		CSRFKey: "keyhouse-console-login:" + cfg.AdminAPIKey.Reveal(),
	})
	if err != nil {
		return err
	}
	handler, err := edge.New(ctx, edge.Options{
		Log:            log,
		Pages:          pages,
		TrustedProxies: cfg.TrustedProxies,
		Conns:          conns,
		RateLimit: func(next http.Handler) http.Handler {
			return ratelimit.Middleware(limiter, cfg.AdminRateLimitMax, cfg.TrustedProxies, next)
		},
		NotReady:       notReady,
		RequestTimeout: cfg.RequestTimeout,
		Caches:         caches,
	})
	if err != nil {
		return err
	}
	monitor.ProbeOnce(ctx)
	go monitor.Run(ctx)

	handler = withAdmission(cfg, log, tenants, caches, handler)
	srv := &http.Server{
		Addr:              addr,
		Handler:           closeWhileDraining(&draining, handler),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
	}
	log.Info("gateway listening", append([]any{"addr", lis.Addr().String(), "version", buildinfo.Version(), "multi_tenant", cfg.MultiTenant}, rt.LogAttrs()...)...)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(edge.JSONProtocolErrors(lis)) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	// The stop sequence of addendum §10: not ready at once (and connections are closed
	// after their next response, so keep-alive clients reconnect elsewhere), serving for
	// SHUTDOWN_DELAY while load balancers notice, then in-flight requests drain within
	// SHUTDOWN_TIMEOUT.
	draining.Store(true)
	log.Info("shutting down: not ready, draining", "delay", cfg.ShutdownDelay.String(), "timeout", cfg.ShutdownTimeout.String())
	time.Sleep(cfg.ShutdownDelay)
	shutdownCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		log.Warn("drain timed out, closing the remaining connections", "timeout", cfg.ShutdownTimeout.String())
		_ = srv.Close()
	}
	log.Info("gateway stopped")
	return nil
}

// closeWhileDraining answers with Connection: close once the gateway drains. Idle
// keep-alive connections are not closed under the clients (a request racing the close
// would fail); each closes after its next response, and Shutdown closes the idle rest
// once load balancers have stopped sending.
func closeWhileDraining(draining *atomic.Bool, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if draining.Load() {
			w.Header().Set("Connection", "close")
		}
		next.ServeHTTP(w, r)
	})
}

// withAdmission puts admission control in front of everything else (ADMISSION_MAX_LIMIT 0:
// not at all), so that a refused request costs neither a Redis round trip nor a log line.
func withAdmission(cfg *config.Config, log *slog.Logger, tenants *admission.Tenants, caches *edge.Caches, next http.Handler) http.Handler {
	if cfg.AdmissionMaxLimit == 0 {
		log.Info("admission control off (ADMISSION_MAX_LIMIT=0)")
		return next
	}
	limiter := admission.NewLimiter(admission.ConfigFrom(cfg))
	return admission.Middleware(admission.Options{Limiter: limiter, Tenants: tenants, AnswersFromMemory: caches.AnswersFromMemory, SlotOnMiss: edge.WithSlotOnMiss, Refuse: edge.WriteOverloaded, Log: log}, next)
}

// grpcHealthProbe asks a service's overall grpc.health.v1 status. Calls go to replicas
// that report SERVING for requests, so a service whose every replica is draining or has
// lost its database fails the probe.
func grpcHealthProbe(conn *grpc.ClientConn) func(context.Context) error {
	client := healthpb.NewHealthClient(conn)
	return func(ctx context.Context) error {
		resp, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			return err
		}
		if s := resp.GetStatus(); s != healthpb.HealthCheckResponse_SERVING {
			return fmt.Errorf("health %s", s)
		}
		return nil
	}
}

// redisLogger sends go-redis's own lines to slog at DEBUG.
type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, fmt.Sprintf(format, v...))
}
