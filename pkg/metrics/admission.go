package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// The gateway's admission control (gateway/internal/admission).
var (
	// AdmissionLimit is the adaptive concurrency limit.
	AdmissionLimit = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "keyhouse_admission_limit",
		Help: "The gateway's adaptive concurrency limit: requests it lets in flight at once before refusing with 503.",
	})
	// AdmissionInflight is how many admitted requests are in flight.
	AdmissionInflight = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "keyhouse_admission_inflight",
		Help: "Requests admitted by the gateway's admission control and not finished.",
	})
	// AdmissionBaseline is the latency the limit compares the current one with.
	AdmissionBaseline = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "keyhouse_admission_baseline_latency_seconds",
		Help: "The lowest window-average latency of the recent past, which admission control treats as the latency without queueing.",
	})
	// AdmissionBestRate is the throughput the limit does not shrink below (at the target
	// latency).
	AdmissionBestRate = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "keyhouse_admission_best_rate",
		Help: "The most requests per second admission control saw finish in a window of the recent past; the limit does not shrink below what this rate keeps in flight at the latency target.",
	})
	// AdmissionRefused counts the requests refused with 503, by reason: limit (every slot
	// taken) or tenant_share (the tenant held its fair share of a full limit).
	AdmissionRefused = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "keyhouse_admission_refused_total",
		Help: "Requests the gateway refused with 503 and Retry-After because it was at its concurrency limit, by reason: limit or tenant_share.",
	}, []string{"reason"})
)
