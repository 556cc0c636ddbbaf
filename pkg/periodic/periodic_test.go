package periodic

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// A job runs at every tick until the context ends; a failure is tried again at the next
// tick. An outage is logged once when it starts and once when it ends, never once per
// failed round: three failed rounds, two that work, then one more failure are two WARN
// lines and one INFO line.
func TestUpkeepRunsAgainAfterAFailureLogsEachOutageOnceAndStopsWithItsContext(t *testing.T) {
	// Written by Upkeep's goroutine, read once it has returned.
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	ctx, cancel := context.WithCancel(context.Background())
	runs := make(chan int, 100)
	n := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		Upkeep(ctx, time.Millisecond, log, "folding the counts", func(context.Context) error {
			n++
			runs <- n
			if n <= 3 || n >= 6 {
				return errors.New("database gone")
			}
			return nil
		})
	}()
	for got := range runs {
		if got == 7 {
			break
		}
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Upkeep did not return once its context ended")
	}
	out := logged.String()
	if strings.Count(out, "level=WARN") != 2 || strings.Count(out, `msg="folding the counts failed" error="database gone"`) != 2 {
		t.Errorf("log: %q, want one WARN per outage (two), not one per failed round", out)
	}
	if strings.Count(out, "level=INFO") != 1 || !strings.Contains(out, `msg="folding the counts works again" failed_rounds=3 down_for=`) {
		t.Errorf("log: %q, want one INFO line when the first outage ended, with its failed rounds", out)
	}
}
