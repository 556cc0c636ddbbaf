package pgxx

import (
	"context"
	"log/slog"
	"time"
)

// Periodically runs job every interval until ctx is done: a service's upkeep of its own
// tables (activations' usage commit records, the license counts' fold).
// A failed run is logged at WARN as what failed, and tried again at the next.
func Periodically(ctx context.Context, interval time.Duration, log *slog.Logger, what string, job func(context.Context) error) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := job(ctx); err != nil && ctx.Err() == nil {
				log.Warn(what+" failed", "error", err.Error())
			}
		}
	}
}
