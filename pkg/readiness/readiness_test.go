package readiness

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
)

func TestAnOutageIsLoggedOnceWhenItStartsAndOnceWhenItEnds(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	var dbDown, natsDown atomic.Bool
	probe := func(down *atomic.Bool) func(context.Context) error {
		return func(context.Context) error {
			if down.Load() {
				return errors.New("connection refused")
			}
			return nil
		}
	}
	m := New(log, Check{Name: "postgres", Probe: probe(&dbDown)}, Check{Name: "nats", Probe: probe(&natsDown), Background: true})
	changes := 0
	m.OnChange(func() { changes++ })
	ctx := context.Background()

	m.ProbeOnce(ctx)
	if got := m.NotReady(); len(got) != 0 {
		t.Fatalf("healthy dependencies reported not ready: %v", got)
	}
	dbDown.Store(true)
	natsDown.Store(true)
	for i := 0; i < 5; i++ {
		m.ProbeOnce(ctx)
	}
	if got := strings.Join(m.NotReady(), ","); got != "nats,postgres" {
		t.Fatalf("NotReady %q, want nats,postgres", got)
	}
	if got := strings.Join(m.RequestsBlocked(), ","); got != "postgres" {
		t.Fatalf("RequestsBlocked %q, want postgres only (NATS is background)", got)
	}
	dbDown.Store(false)
	natsDown.Store(false)
	for i := 0; i < 5; i++ {
		m.ProbeOnce(ctx)
	}
	if got := m.NotReady(); len(got) != 0 {
		t.Fatalf("recovered dependencies still not ready: %v", got)
	}
	out := buf.String()
	if n := strings.Count(out, `"msg":"dependency unavailable","dependency":"postgres"`); n != 1 {
		t.Errorf("outage start logged %d times, want once:\n%s", n, out)
	}
	if n := strings.Count(out, `"msg":"dependency available again","dependency":"postgres"`); n != 1 {
		t.Errorf("outage end logged %d times, want once:\n%s", n, out)
	}
	if changes != 2 {
		t.Errorf("OnChange called %d times, want 2 (down, up)", changes)
	}
}

func TestACanceledRoundSaysNothingAboutTheDependency(t *testing.T) {
	m := New(slog.New(slog.DiscardHandler), Check{Name: "postgres", Probe: func(ctx context.Context) error { return ctx.Err() }})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for range 3 {
		m.ProbeOnce(ctx)
	}
	if got := m.NotReady(); len(got) != 0 {
		t.Fatalf("shutdown marked postgres down: %v", got)
	}
}

// One probe that misses its deadline on a busy machine is no outage: the process stays
// ready and logs nothing. Two in a row are, and one answer ends it. A dependency that has
// never answered is down at its first failure (a process started without it).
func TestADependencyIsDownAfterTwoFailedProbesInARow(t *testing.T) {
	var buf bytes.Buffer
	var failing atomic.Bool
	m := New(slog.New(slog.NewJSONHandler(&buf, nil)), Check{Name: "postgres", Probe: func(context.Context) error {
		if failing.Load() {
			return errors.New("cannot connect to the database server")
		}
		return nil
	}})
	// probe runs one round, failing or not, and returns what is not ready.
	probe := func(fail bool) string {
		failing.Store(fail)
		m.ProbeOnce(context.Background())
		return strings.Join(m.NotReady(), ",")
	}
	if got := probe(true); got != "postgres" {
		t.Fatalf("a dependency that never answered failed its first probe: NotReady %q; want postgres", got)
	}
	probe(false)
	buf.Reset()
	for range 3 { // failed, answered, failed: never two in a row
		if got := probe(true); got != "" {
			t.Fatalf("one failed probe made %q not ready", got)
		}
		probe(false)
	}
	if buf.Len() > 0 {
		t.Fatalf("single failed probes were logged:\n%s", &buf)
	}
	probe(true)
	if got := probe(true); got != "postgres" {
		t.Fatalf("after two failed probes in a row NotReady is %q; want postgres", got)
	}
	if got := probe(false); got != "" {
		t.Fatalf("after an answer NotReady is %q; want ready", got)
	}
}

// A dependency the process used to start (a service's Postgres, which answered its
// migrations' check) has answered already: a first probe that misses its deadline, on a
// machine still busy starting, is no outage. Two failed probes in a row still are.
func TestADependencyUsedToStartIsNotDownAtItsFirstFailedProbe(t *testing.T) {
	var buf bytes.Buffer
	m := New(slog.New(slog.NewJSONHandler(&buf, nil)), Check{Name: "postgres", AnsweredAtStart: true, Probe: func(context.Context) error {
		return context.DeadlineExceeded
	}})
	m.ProbeOnce(context.Background())
	if got := m.NotReady(); len(got) != 0 || buf.Len() > 0 {
		t.Fatalf("the first failed probe of a dependency used to start made %v not ready:\n%s", got, &buf)
	}
	m.ProbeOnce(context.Background())
	if got := strings.Join(m.NotReady(), ","); got != "postgres" {
		t.Fatalf("after two failed probes in a row NotReady is %q; want postgres", got)
	}
}
