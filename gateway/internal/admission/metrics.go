package admission

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// The series of admission control, which runs in the gateway alone: they are registered
// by this package, so only the gateway's /metrics has them (in pkg/metrics every service
// exported them at 0).
var (
	// limitGauge is the adaptive concurrency limit.
	limitGauge = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "keyhouse_admission_limit",
		Help: "The gateway's adaptive concurrency limit: requests it lets in flight at once before refusing with 503.",
	})
	// inflightGauge is how many admitted requests are in flight.
	inflightGauge = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "keyhouse_admission_inflight",
		Help: "Requests admitted by the gateway's admission control and not finished.",
	})
	// baselineGauge is the latency the limit compares the current one with.
	baselineGauge = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "keyhouse_admission_baseline_latency_seconds",
		Help: "The lowest window-average latency of the recent past, which admission control treats as the latency without queueing.",
	})
	// bestRateGauge is the throughput the limit does not shrink below (at the target
	// latency), in requests per second.
	bestRateGauge = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "keyhouse_admission_best_rate_per_second",
		Help: "The most requests per second admission control saw finish in a window of the recent past; the limit does not shrink below what this rate keeps in flight at the latency target.",
	})
	// refusedCounter counts the requests refused with 503, by reason: limit (every slot
	// taken) or tenant_share (the tenant held its fair share of a full limit).
	refusedCounter = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "keyhouse_admission_refused_total",
		Help: "Requests the gateway refused with 503 and Retry-After because it was at its concurrency limit, by reason: limit or tenant_share.",
	}, []string{"reason"})
)
