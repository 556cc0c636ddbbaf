// Package sweep removes floating seats whose lease lapsed and lease keys past their
// retire_at, on every replica at once (the store's statements skip what another replica
// holds).
package sweep

import (
	"context"
	"log/slog"
	"time"

	"github.com/keyhouse/keyhouse/pkg/periodic"
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
// interval of the lapse (addendum §12: 15 s). Each of its steps that fails (the database
// is gone) is logged once when it starts failing and once when it works again, never
// once per round (periodic.Failing).
func Run(ctx context.Context, st Store, interval time.Duration, log *slog.Logger) {
	s := sweeper{st: st, log: log}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		s.once(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sweeper is Run's state: each step's failures, logged once per change.
type sweeper struct {
	st                               Store
	log                              *slog.Logger
	rescheduling, sweeping, retiring periodic.Failing
}

// once removes every seat lapsed by now, a batch at a time, and the retired lease keys.
// It first moves the seats renewed since they were last looked at out of its range, so
// that the removal's batches are of lapsed seats.
func (s *sweeper) once(ctx context.Context) {
	s.reschedule(ctx)
	if !s.sweep(ctx) {
		return
	}
	switch err := s.st.RemoveRetiredLeaseKeys(ctx); {
	case err == nil:
		s.retiring.Worked(s.log, "retired lease keys removed again")
	case ctx.Err() == nil:
		s.retiring.Fail(s.log, "retired lease keys not removed; they are no longer listed meanwhile", err)
	}
}

func (s *sweeper) reschedule(ctx context.Context) {
	for {
		moved, err := s.st.RescheduleRenewed(ctx, batch)
		if err != nil {
			if ctx.Err() == nil {
				s.rescheduling.Fail(s.log, "renewed floating seats not rescheduled; lapsed seats are still removed", err)
			}
			return
		}
		s.rescheduling.Worked(s.log, "renewed floating seats rescheduled again")
		if moved < batch {
			return
		}
	}
}

// sweep removes the lapsed seats and reports whether it could.
func (s *sweeper) sweep(ctx context.Context) bool {
	for {
		lapsed, err := s.st.SweepLapsed(ctx, batch, lapseRemembered)
		if err != nil {
			if ctx.Err() == nil {
				s.sweeping.Fail(s.log, "lapsed floating seats not removed; they count for nothing meanwhile", err)
			}
			return false
		}
		s.sweeping.Worked(s.log, "lapsed floating seats removed again")
		if len(lapsed) > 0 {
			s.log.Info("lapsed floating seats removed", "seats", len(lapsed))
		}
		if len(lapsed) < batch {
			return true
		}
	}
}
