// Package periodic runs a process's background rounds: a job every interval until the
// process stops. It imports nothing but the standard library, so any package can use it
// without bringing its dependencies into every module that uses that package.
package periodic

import (
	"context"
	"log/slog"
	"time"
)

// Run calls job every interval until ctx is done (the first call one interval after the
// start).
func Run(ctx context.Context, interval time.Duration, job func(context.Context)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			job(ctx)
		}
	}
}

// Upkeep is Run for a service's upkeep of its own tables (activations' usage commit
// records, the license counts' fold): a failed round is logged at WARN as what failed,
// and tried again at the next.
func Upkeep(ctx context.Context, interval time.Duration, log *slog.Logger, what string, job func(context.Context) error) {
	Run(ctx, interval, func(ctx context.Context) {
		if err := job(ctx); err != nil && ctx.Err() == nil {
			log.Warn(what+" failed", "error", err.Error())
		}
	})
}
