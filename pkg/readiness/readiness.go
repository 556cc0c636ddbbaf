// Package readiness watches a process's dependencies (Postgres, NATS, Redis, other
// services) and says whether the process is ready to take traffic. A Monitor probes every
// dependency on a fixed interval with a short timeout, so readiness answers from memory
// and a probe never waits on a hung dependency. A dependency that has answered is down
// once two probes in a row fail (one that never has, at its first failure, unless the
// process used it to start), and up again at its next answer. Each outage is logged twice: once when it
// starts and once when it ends, never once per failed probe.
package readiness

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/keyhouse/keyhouse/pkg/metrics"
	"github.com/keyhouse/keyhouse/pkg/periodic"
)

// Check probes one dependency.
type Check struct {
	// Name is what /readyz lists and logs say ("postgres", "redis", "licensing").
	Name string
	// Probe returns nil when the dependency answers; it must honour ctx.
	Probe func(context.Context) error
	// Background marks a dependency that only background work needs (a NATS consumer):
	// losing it makes the process not ready, but requests still succeed without it.
	Background bool
	// AnsweredAtStart: the process used the dependency to start (a service checks its
	// migrations against Postgres before it serves), so it has answered, and its first
	// failed probe is no outage yet. Without it, the first probe, a second after the
	// start, had to connect afresh on a machine still busy starting the rest of the
	// stack, and one that missed its deadline called Postgres down: licensing answered
	// NOT_SERVING, and the gateway refused every license check with 503 until the
	// next probe.
	AnsweredAtStart bool
}

// Monitor probes checks every Interval, each bounded by Timeout.
type Monitor struct {
	Interval time.Duration
	Timeout  time.Duration
	// FailuresToDown is how many probes of a dependency in a row must fail before it is
	// down (at least 1). One probe that misses its deadline on a machine busy for a
	// moment is no outage: a probe that must connect to Postgres again waits for a new
	// backend process and an authentication, and a process that called its dependency
	// down for it refused every request for a second (a burst of 503s from the gateway
	// in front of it) although every query was being answered. A dependency that has
	// never answered is down at its first failed probe, so a process that starts without
	// it is not ready at once.
	FailuresToDown int

	log    *slog.Logger
	checks []Check

	mu        sync.Mutex
	down      map[string]time.Time // failing dependency → when its outage began
	failures  map[string]int       // dependency → its failed probes in a row
	answered  map[string]bool      // dependencies that have answered a probe
	listeners []func()
}

// New returns a monitor of checks with a 1 s interval and timeout, which calls a
// dependency down after two failed probes in a row.
func New(log *slog.Logger, checks ...Check) *Monitor {
	m := &Monitor{Interval: time.Second, Timeout: time.Second, FailuresToDown: 2, log: log, down: map[string]time.Time{}, failures: map[string]int{}, answered: map[string]bool{}}
	for _, c := range checks {
		m.Add(c)
	}
	return m
}

// Add registers one more check; call it before Run.
func (m *Monitor) Add(c Check) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.checks = append(m.checks, c)
	if c.AnsweredAtStart {
		m.answered[c.Name] = true
	}
	metrics.DependencyUp.WithLabelValues(c.Name).Set(1)
}

// OnChange registers f, called after every probe round that changed what is failing.
func (m *Monitor) OnChange(f func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.listeners = append(m.listeners, f)
}

// Run probes until ctx is done.
func (m *Monitor) Run(ctx context.Context) {
	periodic.Run(ctx, m.Interval, m.ProbeOnce)
}

// ProbeOnce runs every check now, in parallel, and records the outcome.
func (m *Monitor) ProbeOnce(ctx context.Context) {
	m.mu.Lock()
	checks := slices.Clone(m.checks)
	m.mu.Unlock()
	errs := make([]error, len(checks))
	var wg sync.WaitGroup
	for i, c := range checks {
		wg.Go(func() {
			pctx, cancel := context.WithTimeout(ctx, m.Timeout)
			defer cancel()
			errs[i] = c.Probe(pctx)
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return // shutting down: a canceled probe says nothing about the dependency
	}
	changed := false
	now := time.Now()
	m.mu.Lock()
	for i, c := range checks {
		since, wasDown := m.down[c.Name]
		if errs[i] != nil {
			m.failures[c.Name]++
		} else {
			delete(m.failures, c.Name)
			m.answered[c.Name] = true
		}
		switch {
		case errs[i] != nil && !wasDown && (m.failures[c.Name] >= m.FailuresToDown || !m.answered[c.Name]):
			m.down[c.Name] = now
			changed = true
			metrics.DependencyUp.WithLabelValues(c.Name).Set(0)
			m.log.Warn("dependency unavailable", "dependency", c.Name, "error", errs[i].Error())
		case errs[i] == nil && wasDown:
			delete(m.down, c.Name)
			changed = true
			metrics.DependencyUp.WithLabelValues(c.Name).Set(1)
			m.log.Info("dependency available again", "dependency", c.Name, "down_for", now.Sub(since).Round(time.Millisecond).String())
		}
	}
	listeners := slices.Clone(m.listeners)
	m.mu.Unlock()
	if changed {
		for _, f := range listeners {
			f()
		}
	}
}

// NotReady lists the failing dependencies, sorted; empty means ready.
func (m *Monitor) NotReady() []string { return m.failing(true) }

// RequestsBlocked lists the failing dependencies that requests need (not Background ones).
func (m *Monitor) RequestsBlocked() []string { return m.failing(false) }

func (m *Monitor) failing(background bool) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, c := range m.checks {
		if _, down := m.down[c.Name]; down && (background || !c.Background) {
			out = append(out, c.Name)
		}
	}
	slices.Sort(out)
	return out
}
