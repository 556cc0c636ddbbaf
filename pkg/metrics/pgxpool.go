package metrics

import (
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// RegisterPgxPool exposes pool's statistics labelled pool=name. Registering the same name
// twice keeps the first.
func RegisterPgxPool(pool *pgxpool.Pool, name string) {
	err := prometheus.Register(&poolCollector{pool: pool, labels: prometheus.Labels{"pool": name}})
	if _, dup := err.(prometheus.AlreadyRegisteredError); err != nil && !dup {
		panic(err)
	}
}

type poolCollector struct {
	pool   *pgxpool.Pool
	labels prometheus.Labels
}

func (c *poolCollector) descs() []*prometheus.Desc {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("keyhouse_pgxpool_"+name, help, nil, c.labels)
	}
	return []*prometheus.Desc{
		d("total_conns", "Connections in the pool (idle, in use and being opened)."),
		d("acquired_conns", "Connections in use."),
		d("idle_conns", "Idle connections."),
		d("max_conns", "Pool size limit."),
		d("acquires_total", "Connections handed out."),
		d("empty_acquires_total", "Acquires that had to wait for a connection (pool exhausted or empty)."),
		d("canceled_acquires_total", "Acquires abandoned because the request's context ended."),
		d("acquire_wait_seconds_total", "Total time spent waiting for a connection."),
		d("new_conns_total", "Connections opened."),
	}
}

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs() {
		ch <- d
	}
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.pool.Stat()
	d := c.descs()
	g, k := prometheus.GaugeValue, prometheus.CounterValue
	ch <- prometheus.MustNewConstMetric(d[0], g, float64(s.TotalConns()))
	ch <- prometheus.MustNewConstMetric(d[1], g, float64(s.AcquiredConns()))
	ch <- prometheus.MustNewConstMetric(d[2], g, float64(s.IdleConns()))
	ch <- prometheus.MustNewConstMetric(d[3], g, float64(s.MaxConns()))
	ch <- prometheus.MustNewConstMetric(d[4], k, float64(s.AcquireCount()))
	ch <- prometheus.MustNewConstMetric(d[5], k, float64(s.EmptyAcquireCount()))
	ch <- prometheus.MustNewConstMetric(d[6], k, float64(s.CanceledAcquireCount()))
	ch <- prometheus.MustNewConstMetric(d[7], k, s.AcquireDuration().Seconds())
	ch <- prometheus.MustNewConstMetric(d[8], k, float64(s.NewConnsCount()))
}
