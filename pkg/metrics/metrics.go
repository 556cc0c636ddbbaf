// Package metrics holds every Prometheus series Keyhouse exposes and the /metrics server
// each process runs on its own port (METRICS_PORT, by default its service port + 1000,
// never the public HTTP port). Series live in the client_golang default registry, next to
// the Go runtime and process collectors it brings; docs/observability.md lists them with
// the queries and alerts built on them.
//
// Label values are bounded by construction: routes are patterns, methods are gRPC full
// method names, tiers and results come from fixed sets. Never label with a path, a
// license key, a tenant or an error text.
package metrics

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/keyhouse/keyhouse/pkg/listenfd"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Latency buckets in seconds: from a cached verify (sub-millisecond) to the request budget.
var latencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

var (
	// HTTPRequests counts the gateway's answers by route pattern, method and status code.
	HTTPRequests = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "keyhouse_http_requests_total",
		Help: "HTTP requests answered by the gateway, by route pattern, method and status code.",
	}, []string{"route", "method", "code"})
	// HTTPDuration is the gateway's latency by route pattern, method and status code.
	HTTPDuration = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "keyhouse_http_request_duration_seconds",
		Help:    "Time from request to last response byte at the gateway.",
		Buckets: latencyBuckets,
	}, []string{"route", "method", "code"})

	// GRPCRequests counts the RPCs a service answered by full method and status code.
	GRPCRequests = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "keyhouse_grpc_server_requests_total",
		Help: "gRPC calls handled, by full method name and status code.",
	}, []string{"method", "code"})
	// GRPCDuration is a service's handling time by full method and status code.
	GRPCDuration = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "keyhouse_grpc_server_request_duration_seconds",
		Help:    "gRPC handling time, by full method name and status code.",
		Buckets: latencyBuckets,
	}, []string{"method", "code"})

	// RateLimitDecisions counts the limiter's answers by tier and decision (allowed, denied).
	RateLimitDecisions = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "keyhouse_ratelimit_decisions_total",
		Help: "Rate-limit decisions at the gateway, by tier and decision (allowed or denied).",
	}, []string{"tier", "decision"})

	// AnswerCache counts the gateway's cacheable questions by route and result: hit
	// (answered from the gateway's cache) or miss (the service was asked).
	AnswerCache = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "keyhouse_gateway_answer_cache_total",
		Help: "Questions the gateway could answer from its cache (verify-license, validate-license, check-update), by route and result: hit or miss (the service was asked).",
	}, []string{"route", "result"})

	// DependencyUp is 1 while a dependency answers the readiness probes, 0 during an outage.
	DependencyUp = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "keyhouse_dependency_up",
		Help: "1 when the dependency answered its last readiness probe, 0 when it did not.",
	}, []string{"dependency"})

	// PeerReachable is 0 while a process's connection to another service is failing
	// (pkg/grpcx's reportReachable).
	PeerReachable = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "keyhouse_peer_reachable",
		Help: "0 while this process's connection to the service named peer is in transient failure (no replica reachable and SERVING: calls to it fail at once), 1 otherwise.",
	}, []string{"peer"})

	// MailSends counts buyer mail by result (see RecordMailSend).
	MailSends = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "keyhouse_mail_sends_total",
		Help: "Mail sends by result: sent (accepted by the provider), logged (EMAIL_PROVIDER=log), failed.",
	}, []string{"result"})
)

// Mail send results, the only values of MailSends' label.
const (
	MailSent   = "sent"
	MailLogged = "logged"
	MailFailed = "failed"
)

// RecordAnswer counts one cacheable question of route, answered from the cache (hit) or
// by the service.
func RecordAnswer(route string, hit bool) {
	result := "miss"
	if hit {
		result = "hit"
	}
	AnswerCache.WithLabelValues(route, result).Inc()
}

// RecordMailSend counts one mail by result (MailSent, MailLogged or MailFailed).
func RecordMailSend(result string) {
	switch result {
	case MailSent, MailLogged, MailFailed:
	default:
		result = MailFailed
	}
	MailSends.WithLabelValues(result).Inc()
}

// InitMail makes the mail series visible at zero before the first send, so an alert on
// failures has a series to compare against.
func InitMail() {
	for _, r := range []string{MailSent, MailLogged, MailFailed} {
		MailSends.WithLabelValues(r)
	}
}

// Server serves /metrics on its own listener.
type Server struct {
	srv *http.Server
	// Addr is the address actually listened on.
	Addr string
}

// Serve starts the metrics server on addr and returns once it listens.
func Serve(addr string, log *slog.Logger) (*Server, error) {
	lis, err := listenfd.Listen("metrics", addr)
	if err != nil {
		return nil, errors.New("metrics: listen " + addr + ": " + err.Error() + " (set METRICS_PORT)")
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(prometheus.DefaultGatherer, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}))
	s := &Server{
		srv:  &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, WriteTimeout: 30 * time.Second},
		Addr: lis.Addr().String(),
	}
	go func() {
		if err := s.srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "error", err.Error())
		}
	}()
	log.Info("metrics serving", "addr", s.Addr)
	return s, nil
}

// Close stops the server; it is the last thing a process shuts down, so the final
// scrape during a drain still sees the drain.
func (s *Server) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = s.srv.Shutdown(ctx)
}
