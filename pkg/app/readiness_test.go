package app

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
)

// A service's Postgres answered its migrations' check before the service serves: the
// first probe, connecting afresh on a machine busy starting, may miss its deadline
// without licensing reporting NOT_SERVING (and the gateway refusing license checks until
// the next probe). Two in a row are an outage.
func TestAServiceIsReadyAfterOneFailedProbeOfItsPostgres(t *testing.T) {
	m := newReadiness(slog.New(slog.NewTextHandler(io.Discard, nil)), func(context.Context) error {
		return context.DeadlineExceeded
	})
	m.ProbeOnce(context.Background())
	if got := m.NotReady(); len(got) != 0 {
		t.Fatalf("one failed probe of Postgres made %v not ready", got)
	}
	m.ProbeOnce(context.Background())
	if got := strings.Join(m.NotReady(), ","); got != "postgres" {
		t.Fatalf("after two failed probes NotReady is %q; want postgres", got)
	}
}
