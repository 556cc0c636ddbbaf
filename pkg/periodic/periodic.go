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
// records, the license counts' fold): a failed round is tried again at the next, and
// an outage is logged once when it starts (WARN "<what> failed") and once when a round
// works again (INFO "<what> works again"), never once per round (Failing).
func Upkeep(ctx context.Context, interval time.Duration, log *slog.Logger, what string, job func(context.Context) error) {
	var failing Failing
	Run(ctx, interval, func(ctx context.Context) {
		switch err := job(ctx); {
		case err == nil:
			failing.Worked(log, what+" works again")
		case ctx.Err() == nil:
			failing.Fail(log, what+" failed", err)
		}
	})
}

// Failing logs the failures of a background loop once per change, never once per
// retry: one WARN line (msg, with the "error") when the loop starts failing, nothing
// for the rounds that fail after it, and one INFO line when it succeeds again, with how long it failed
// ("down_for") and how many rounds ("failed_rounds"). The zero value is a loop that
// works; one goroutine uses it.
type Failing struct {
	since  time.Time
	rounds int
}

// Fail notes a failed round and logs it if it is the first since the loop worked.
func (f *Failing) Fail(log *slog.Logger, msg string, err error, args ...any) {
	f.rounds++
	if f.rounds > 1 {
		return
	}
	f.since = time.Now()
	log.Warn(msg, append(args, "error", err.Error())...)
}

// Worked notes a round that succeeded and, if the loop was failing, logs msg once.
func (f *Failing) Worked(log *slog.Logger, msg string, args ...any) {
	if f.rounds == 0 {
		return
	}
	log.Info(msg, append(args, "failed_rounds", f.rounds, "down_for", time.Since(f.since).Round(time.Millisecond).String())...)
	*f = Failing{}
}

// Rounds is how many rounds in a row have failed (0: the loop works).
func (f *Failing) Rounds() int { return f.rounds }
