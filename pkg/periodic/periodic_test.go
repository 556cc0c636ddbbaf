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

// A job runs at every tick until the context ends; a failure is logged and the job runs
// again at the next tick.
func TestUpkeepRunsAgainAfterAFailureAndStopsWithItsContext(t *testing.T) {
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
			if n == 1 {
				return errors.New("database gone")
			}
			return nil
		})
	}()
	for got := range runs {
		if got == 3 {
			break
		}
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Upkeep did not return once its context ended")
	}
	if out := logged.String(); strings.Count(out, "level=WARN") != 1 || !strings.Contains(out, `msg="folding the counts failed" error="database gone"`) {
		t.Errorf("log: %q, want one WARN for the first run's failure", out)
	}
}
