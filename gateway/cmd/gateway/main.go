// Command gateway serves the /v1 REST surface and forwards it to the services over gRPC.
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/keyhouse/keyhouse/console"
	"github.com/keyhouse/keyhouse/gateway/internal/edge"
	"github.com/keyhouse/keyhouse/gateway/internal/ratelimit"
	"github.com/keyhouse/keyhouse/pkg/buildinfo"
	"github.com/keyhouse/keyhouse/pkg/config"
	"github.com/keyhouse/keyhouse/pkg/grpcx"
	"github.com/keyhouse/keyhouse/pkg/telemetry"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
)

func main() {
	config.TuneRuntime()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "gateway: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	cfg, err := config.Load()
	if err != nil {
		return err
	}
	log := telemetry.NewLogger(os.Stderr, "gateway", cfg.LogLevel, cfg.LogFormat)
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
	rdb := redis.NewClient(redisOpts)
	defer rdb.Close()

	var conns edge.Conns
	for _, c := range []struct {
		addr string
		dst  **grpc.ClientConn
	}{
		{cfg.LicensingAddr, &conns.Licensing},
		{cfg.ActivationsAddr, &conns.Activations},
		{cfg.ReleasesAddr, &conns.Releases},
		{cfg.BillingAddr, &conns.Billing},
		{cfg.StorefrontAddr, &conns.Storefront},
	} {
		conn, err := grpcx.Dial(c.addr)
		if err != nil {
			return err
		}
		defer conn.Close()
		*c.dst = conn
	}

	limiter := ratelimit.New(rdb, log)
	pages, err := console.New(console.Options{
		Log:             log,
		Conns:           console.Conns(conns),
		MultiTenant:     cfg.MultiTenant,
		PublicBaseURL:   cfg.PublicBaseURL,
		ExportGate:      &console.RedisExportGate{Client: rdb},
		TooManyRequests: ratelimit.WriteTooManyRequests,
	})
	if err != nil {
		return err
	}
	handler, err := edge.New(ctx, edge.Options{
		Log:   log,
		Pages: pages,
		Conns: conns,
		RateLimit: func(next http.Handler) http.Handler {
			return ratelimit.Middleware(limiter, cfg.AdminRateLimitMax, cfg.TrustedProxies, next)
		},
	})
	if err != nil {
		return err
	}
	srv := &http.Server{
		Addr:              net.JoinHostPort("", strconv.Itoa(cfg.Port)),
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
	}
	lis, err := net.Listen("tcp", srv.Addr)
	if err != nil {
		return err
	}
	log.Info("gateway listening", "addr", lis.Addr().String(), "version", buildinfo.Version(), "multi_tenant", cfg.MultiTenant)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	err = srv.Shutdown(shutdownCtx)
	log.Info("gateway stopped")
	return err
}
