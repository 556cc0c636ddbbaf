// Package app is the shared main of every service binary: `serve` and `migrate`
// subcommands, config loading, logging, tracing, the database pool, the gRPC server, and
// the shutdown sequence. A service's cmd/<name>/main.go only describes itself.
package app

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/keyhouse/keyhouse/pkg/auth"
	"github.com/keyhouse/keyhouse/pkg/billingclient"
	"github.com/keyhouse/keyhouse/pkg/buildinfo"
	"github.com/keyhouse/keyhouse/pkg/config"
	"github.com/keyhouse/keyhouse/pkg/grpcx"
	"github.com/keyhouse/keyhouse/pkg/licensecache"
	"github.com/keyhouse/keyhouse/pkg/metrics"
	"github.com/keyhouse/keyhouse/pkg/natsx"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
	"github.com/keyhouse/keyhouse/pkg/readiness"
	"github.com/keyhouse/keyhouse/pkg/telemetry"
	"google.golang.org/grpc"
)

// Service describes one binary.
type Service struct {
	// Name is the binary name and the Postgres schema it owns.
	Name string
	// Addr picks this service's default listen address from the config.
	Addr func(*config.Config) string
	// Migrations holds the embedded *.sql files at its root.
	Migrations fs.FS
	// Tenants resolves hosted API keys; nil means "ask the billing service".
	Tenants func(*Deps) auth.TenantResolver
	// Register wires the service's handlers onto Deps.Server; it may start background
	// work bound to ctx and add cleanups with Deps.OnClose.
	Register func(ctx context.Context, d *Deps) error
}

// Deps is what every service gets.
type Deps struct {
	Config *config.Config
	Log    *slog.Logger
	DB     *pgxpool.Pool
	Server *grpcx.Server
	Auth   *auth.Authenticator
	// Readiness watches the dependencies (Postgres from the start); a service adds the
	// ones it needs, e.g. natsx.ReadinessCheck for a consumer, and the gRPC health follows.
	Readiness *readiness.Monitor
	closers   []func()
}

// OnClose registers a cleanup, run in reverse order after the server stopped.
func (d *Deps) OnClose(f func()) { d.closers = append(d.closers, f) }

// close runs what was registered with OnClose, last first, as the service exits.
func (d *Deps) close() {
	for i := len(d.closers) - 1; i >= 0; i-- {
		d.closers[i]()
	}
}

// Dial connects to the service named peer at addr (grpcx.Dial) and closes the connection
// at shutdown. Its calls name the license keys this process heard changed
// (pkg/licensecache's read-your-writes) and, during an admin key rotation, present the
// previous key to a peer that refuses the current one (grpcx.WithPreviousAdminKey).
func (d *Deps) Dial(peer, addr string) (*grpc.ClientConn, error) {
	opts := []grpc.DialOption{grpc.WithChainUnaryInterceptor(licensecache.ForwardRecentChanges())}
	if previous := d.Config.AdminAPIKeyPrevious.Reveal(); previous != "" {
		opts = append(opts, grpcx.WithPreviousAdminKey(previous))
	}
	conn, err := grpcx.Dial(peer, addr, opts...)
	if err != nil {
		return nil, err
	}
	d.OnClose(func() { _ = conn.Close() })
	return conn, nil
}

// Main runs the binary and exits.
func Main(svc Service) {
	rt := config.TuneRuntime()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, svc, rt, os.Args[1:])
	stop()
	// The last lines (shutdown, the drain) wait in the log buffer; a stalled reader gets
	// two seconds, not a process that never exits.
	telemetry.FlushLogs(2 * time.Second)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", svc.Name, err)
		os.Exit(1)
	}
}

func run(ctx context.Context, svc Service, rt config.Runtime, args []string) error {
	cmd := "serve"
	if len(args) > 0 {
		cmd = args[0]
	}
	switch cmd {
	case "serve":
		return serve(ctx, svc, rt)
	case "migrate":
		return migrate(ctx, svc)
	case "version", "--version":
		fmt.Println(buildinfo.Version(), buildinfo.Fingerprint())
		return nil
	default:
		return fmt.Errorf("unknown command %q (want serve, migrate or version)", cmd)
	}
}

// setup is what every command does first: the logger and the pool on the service's schema.
func setup(ctx context.Context, svc Service, c config.Common) (*slog.Logger, *pgxpool.Pool, error) {
	log := telemetry.NewLogger(os.Stderr, svc.Name, c.LogLevel, c.LogFormat, telemetry.FullLicenseKeys(c.LogFullLicenseKeys))
	telemetry.RouteLibraryLogs(log)
	pool, err := pgxx.Open(ctx, c.DatabaseURL.Reveal(), svc.Name)
	if err != nil {
		return nil, nil, err
	}
	return log, pool, nil
}

// migrate needs only the common config: no admin key, no peers.
func migrate(ctx context.Context, svc Service) error {
	c, err := config.LoadCommon()
	if err != nil {
		return err
	}
	log, pool, err := setup(ctx, svc, *c)
	if err != nil {
		return err
	}
	defer pool.Close()
	n, err := pgxx.Migrations{Schema: svc.Name, FS: svc.Migrations}.Up(ctx, pool)
	if err != nil {
		return err
	}
	log.Info("migrations applied", "schema", svc.Name, "applied", n)
	return nil
}

// newReadiness is a service's readiness monitor, which probes its Postgres with probe.
// Postgres has answered by then (the service checked its migrations against it), so one
// failed probe is no outage yet.
func newReadiness(log *slog.Logger, probe func(context.Context) error) *readiness.Monitor {
	return readiness.New(log, readiness.Check{Name: "postgres", Probe: probe, AnsweredAtStart: true})
}

func serve(ctx context.Context, svc Service, rt config.Runtime) error {
	cfg, err := config.Load()
	if err != nil {
		return err
	}
	log, pool, err := setup(ctx, svc, cfg.Common)
	if err != nil {
		return err
	}
	defer pool.Close()
	cfg.LogWarnings(log)
	if err := (pgxx.Migrations{Schema: svc.Name, FS: svc.Migrations}).Check(ctx, pool, svc.Name, log); err != nil {
		return err
	}
	shutdownTracing, err := telemetry.SetupTracing(ctx, "keyhouse-"+svc.Name)
	if err != nil {
		log.Warn("tracing disabled", "error", err.Error())
	}
	defer func() {
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = shutdownTracing(c)
	}()

	addr := cfg.GRPCAddr
	if addr == "" {
		addr = svc.Addr(cfg)
	}
	metricsAddr, err := cfg.MetricsAddr(addr)
	if err != nil {
		return err
	}
	ms, err := metrics.Serve(metricsAddr, log)
	if err != nil {
		return err
	}
	defer ms.Close()
	metrics.RegisterPgxPool(pool, svc.Name)
	if err := natsx.RegisterOutboxMetrics(ctx, pool); err != nil {
		return err
	}

	prober := pgxx.NewProber(pool)
	defer prober.Close()
	d := &Deps{Config: cfg, Log: log, DB: pool, Readiness: newReadiness(log, prober.Probe)}
	defer d.close()
	var tenants auth.TenantResolver
	if svc.Tenants != nil {
		tenants = svc.Tenants(d)
	} else {
		conn, err := d.Dial("billing", cfg.BillingAddr)
		if err != nil {
			return err
		}
		tenants = billingclient.New(conn, "")
	}
	d.Auth = auth.New(auth.Config{MultiTenant: cfg.MultiTenant, AdminKey: cfg.AdminAPIKey.Reveal(),
		PreviousAdminKey: cfg.AdminAPIKeyPrevious.Reveal(), Tenants: tenants})
	// A call that names license keys as recently changed drops them from this process's
	// caches before it is served (pkg/licensecache's read-your-writes).
	d.Server = grpcx.NewServer(log, d.Auth, grpcx.ServerOptions{RequestTimeout: cfg.RequestTimeout, Monitor: d.Readiness,
		Unary: []grpc.UnaryServerInterceptor{licensecache.HonorRecentChanges()}})
	if err := svc.Register(ctx, d); err != nil {
		return err
	}
	go d.Readiness.Run(ctx)
	log.Info("starting", append([]any{"version", buildinfo.Version(), "multi_tenant", cfg.MultiTenant}, rt.LogAttrs()...)...)
	err = d.Server.Serve(ctx, addr, grpcx.Shutdown{Delay: cfg.ShutdownDelay, Timeout: cfg.ShutdownTimeout})
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	log.Info("stopped")
	return err
}
