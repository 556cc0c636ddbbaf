// Package sweep removes floating seats whose lease lapsed and lease keys past their
// retire_at, on every replica at once (the store's statements skip what another replica
// holds).
package sweep

import (
	"context"
	"log/slog"
	"time"

	"github.com/keyhouse/keyhouse/services/activations/internal/store"
)

// batch bounds the seats one statement removes, so one sweep never holds many row locks.
const batch = 500

// lapseRemembered is how long a lapsed seat's token still answers "Seat lease has
// expired" rather than "Invalid activation token" (addendum §12: at least 24 h).
const lapseRemembered = 25 * time.Hour

// Store is what the sweeper needs (store.Store).
type Store interface {
	RescheduleRenewed(ctx context.Context, limit int) (int, error)
	SweepLapsed(ctx context.Context, limit int, remember time.Duration) ([]store.LapsedSeat, error)
	RemoveRetiredLeaseKeys(ctx context.Context) error
}

// Run sweeps every interval until ctx ends. A lapsed seat already counts for nothing (the
// counting queries leave it out); the sweep removes it and announces its removal, within
// interval of the lapse (addendum §12: 15 s).
func Run(ctx context.Context, st Store, interval time.Duration, log *slog.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		Once(ctx, st, log)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Once removes every seat lapsed by now, a batch at a time, and the retired lease keys.
// It first moves the seats renewed since they were last looked at out of its range, so
// that the removal's batches are of lapsed seats.
func Once(ctx context.Context, st Store, log *slog.Logger) {
	for {
		moved, err := st.RescheduleRenewed(ctx, batch)
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("renewed floating seats not rescheduled; lapsed seats are still removed", "error", err.Error())
			}
			break
		}
		if moved < batch {
			break
		}
	}
	for {
		lapsed, err := st.SweepLapsed(ctx, batch, lapseRemembered)
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("lapsed floating seats not removed; they count for nothing meanwhile", "error", err.Error())
			}
			return
		}
		if len(lapsed) > 0 {
			log.Info("lapsed floating seats removed", "seats", len(lapsed))
		}
		if len(lapsed) < batch {
			break
		}
	}
	if err := st.RemoveRetiredLeaseKeys(ctx); err != nil && ctx.Err() == nil {
		log.Warn("retired lease keys not removed; they are no longer listed meanwhile", "error", err.Error())
	}
}
