package natsx

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// scrapeTimeout bounds the queries a scrape makes; a dependency that does not answer in
// time leaves its series out of that scrape (keyhouse_dependency_up says why).
const scrapeTimeout = 2 * time.Second

var (
	outboxBacklogDesc = prometheus.NewDesc("keyhouse_outbox_backlog",
		"Outbox rows waiting to be published to JetStream (parked rows not included).", nil, nil)
	outboxAgeDesc = prometheus.NewDesc("keyhouse_outbox_oldest_age_seconds",
		"Age of the oldest outbox row waiting to be published (parked rows not included); 0 when none waits.", nil, nil)
	outboxParkedDesc = prometheus.NewDesc("keyhouse_outbox_parked",
		"Outbox rows parked because they can never be published; they wait for an operator.", nil, nil)

	// outboxParked counts the rows this process parked, by kind: too_large (over the NATS
	// max payload) or failed (the stream refused it WithMaxFailures times).
	outboxParked = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "keyhouse_outbox_parked_total",
		Help: "Outbox rows this process parked, by kind: too_large (over the NATS max payload) or failed (refused by the stream on every attempt).",
	}, []string{"kind"})
	consumerPendingDesc = prometheus.NewDesc("keyhouse_jetstream_consumer_pending",
		"Messages in the stream not yet delivered to the durable consumer.", []string{"stream", "consumer"}, nil)
	consumerAckPendingDesc = prometheus.NewDesc("keyhouse_jetstream_consumer_ack_pending",
		"Messages delivered to the durable consumer and not yet acknowledged.", []string{"stream", "consumer"}, nil)

	// consumerTerminated counts the messages Consume gave up on, by reason: permanent (the
	// handler said so), panic (it panicked on every delivery), max_deliveries,
	// not_jetstream.
	consumerTerminated = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "keyhouse_consumer_terminated_total",
		Help: "Messages a durable consumer terminated instead of retrying, by stream, consumer and reason (permanent, panic, max_deliveries, not_jetstream).",
	}, []string{"stream", "consumer", "reason"})
)

// RegisterOutboxMetrics exposes the backlog of the outbox table that pool's search_path
// resolves to, when the schema has one: keyhouse_outbox_backlog,
// keyhouse_outbox_oldest_age_seconds and keyhouse_outbox_parked, read at scrape time.
// Every replica reports the same table, so aggregate with max, not sum. pkg/app calls it for every service.
func RegisterOutboxMetrics(ctx context.Context, pool *pgxpool.Pool) error {
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass('outbox') IS NOT NULL`).Scan(&exists); err != nil || !exists {
		return err
	}
	err := prometheus.Register(outboxCollector{pool: pool})
	if _, dup := err.(prometheus.AlreadyRegisteredError); dup {
		return nil
	}
	return err
}

type outboxCollector struct{ pool *pgxpool.Pool }

func (outboxCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- outboxBacklogDesc
	ch <- outboxAgeDesc
	ch <- outboxParkedDesc
}

func (c outboxCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	var backlog, parked int64
	var age float64
	err := c.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE parked_at IS NULL),
			COALESCE(EXTRACT(EPOCH FROM now() - min(created_at) FILTER (WHERE parked_at IS NULL)), 0)::float8,
			count(*) FILTER (WHERE parked_at IS NOT NULL)
		FROM outbox WHERE sent_at IS NULL`).Scan(&backlog, &age, &parked)
	if err != nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(outboxBacklogDesc, prometheus.GaugeValue, float64(backlog))
	ch <- prometheus.MustNewConstMetric(outboxAgeDesc, prometheus.GaugeValue, age)
	ch <- prometheus.MustNewConstMetric(outboxParkedDesc, prometheus.GaugeValue, float64(parked))
}

// consumers are the durable consumers Consume runs in this process, for
// keyhouse_jetstream_consumer_pending.
var consumers = consumerSet{active: map[[2]string]jetstream.Consumer{}}

func init() { prometheus.MustRegister(&consumers) }

type consumerSet struct {
	mu     sync.Mutex
	active map[[2]string]jetstream.Consumer
}

func (s *consumerSet) set(stream, durable string, c jetstream.Consumer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c == nil {
		delete(s.active, [2]string{stream, durable})
		return
	}
	s.active[[2]string{stream, durable}] = c
}

func (s *consumerSet) Describe(ch chan<- *prometheus.Desc) {
	ch <- consumerPendingDesc
	ch <- consumerAckPendingDesc
}

func (s *consumerSet) Collect(ch chan<- prometheus.Metric) {
	s.mu.Lock()
	active := make(map[[2]string]jetstream.Consumer, len(s.active))
	for k, v := range s.active {
		active[k] = v
	}
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	for k, c := range active {
		info, err := c.Info(ctx)
		if err != nil {
			continue
		}
		ch <- prometheus.MustNewConstMetric(consumerPendingDesc, prometheus.GaugeValue, float64(info.NumPending), k[0], k[1])
		ch <- prometheus.MustNewConstMetric(consumerAckPendingDesc, prometheus.GaugeValue, float64(info.NumAckPending), k[0], k[1])
	}
}
