package webhooks

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/keyhouse/keyhouse/pkg/webhook"
)

// Attempt outcomes, the values of keyhouse_webhook_attempts_total's outcome label.
const (
	OutcomeSucceeded = "succeeded"
	// OutcomeHTTPError: the receiver answered, not with a 2xx (a redirect included).
	OutcomeHTTPError = "http_error"
	// OutcomeNoAnswer: no answer at all: a timeout, a refused or reset connection, a name
	// that does not resolve, TLS, or an address refused as not public.
	OutcomeNoAnswer = "no_answer"
)

var (
	attemptsTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "keyhouse_webhook_attempts_total",
		Help: "Webhook delivery attempts this process made, by outcome (succeeded, http_error, no_answer).",
	}, []string{"outcome"})
	endpointsDisabledTotal = promauto.NewCounter(prometheus.CounterOpts{
		Name: "keyhouse_webhook_endpoints_disabled_total",
		Help: "Webhook endpoints this process disabled after every delivery failed for 72 hours.",
	})

	pendingDesc = prometheus.NewDesc("keyhouse_webhook_deliveries_pending",
		"Webhook deliveries not yet succeeded or failed for good, in every tenant (due now or waiting for their retry).", nil, nil)
	dueDesc = prometheus.NewDesc("keyhouse_webhook_deliveries_due",
		"Pending webhook deliveries whose attempt is due now and that no worker has claimed yet.", nil, nil)
	oldestDueDesc = prometheus.NewDesc("keyhouse_webhook_oldest_due_seconds",
		"How long the longest-waiting due delivery has been due (the workers' lag); 0 when none is.", nil, nil)
	disabledDesc = prometheus.NewDesc("keyhouse_webhook_endpoints_disabled",
		"Webhook endpoints disabled now (by the worker after 72 hours of failures, or by their tenant).", nil, nil)
)

// outcome is an attempt's keyhouse_webhook_attempts_total label.
func outcome(res webhook.Result) string {
	switch {
	case res.Succeeded():
		return OutcomeSucceeded
	case res.StatusCode != 0:
		return OutcomeHTTPError
	}
	return OutcomeNoAnswer
}

// RegisterMetrics exposes the delivery queue of st, read at scrape time:
// keyhouse_webhook_deliveries_pending, _due, keyhouse_webhook_oldest_due_seconds and
// keyhouse_webhook_endpoints_disabled; and keyhouse_webhook_attempts_total's outcomes at 0. Every replica reports the same tables, so
// aggregate with max, not sum.
func RegisterMetrics(st *Store) error {
	// Every outcome's series is there at 0 from the start, so the failure share and an
	// alert on it have a series before the first attempt.
	for _, o := range []string{OutcomeSucceeded, OutcomeHTTPError, OutcomeNoAnswer} {
		attemptsTotal.WithLabelValues(o)
	}
	err := prometheus.Register(queueCollector{st: st})
	if errors.As(err, new(prometheus.AlreadyRegisteredError)) {
		return nil
	}
	return err
}

type queueCollector struct{ st *Store }

func (queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- pendingDesc
	ch <- dueDesc
	ch <- oldestDueDesc
	ch <- disabledDesc
}

// scrapeTimeout bounds the scrape's query; when it does not answer in time the series are
// left out of that scrape.
const scrapeTimeout = 2 * time.Second

func (c queueCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	var pending, due, disabled int64
	var oldest float64
	err := c.st.db.QueryRow(ctx, `
		SELECT count(*), count(*) FILTER (WHERE greatest(next_attempt_at, leased_until) <= now()),
			COALESCE(EXTRACT(EPOCH FROM now() - min(greatest(next_attempt_at, leased_until)) FILTER (WHERE greatest(next_attempt_at, leased_until) <= now())), 0)::float8,
			(SELECT count(*) FROM webhook_endpoints WHERE NOT enabled)
		FROM webhook_deliveries WHERE status = 'pending'`).Scan(&pending, &due, &oldest, &disabled)
	if err != nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(pendingDesc, prometheus.GaugeValue, float64(pending))
	ch <- prometheus.MustNewConstMetric(dueDesc, prometheus.GaugeValue, float64(due))
	ch <- prometheus.MustNewConstMetric(oldestDueDesc, prometheus.GaugeValue, oldest)
	ch <- prometheus.MustNewConstMetric(disabledDesc, prometheus.GaugeValue, float64(disabled))
}
