package webhook

import (
	"math/rand/v2"
	"time"
)

// Schedule is when a failed delivery is tried again: exponential backoff from First,
// capped at Max, each delay jittered by ±Jitter so deliveries that failed together do
// not come back together; retried until Window after the first attempt, with one last
// attempt at the end of the window, then failed.
type Schedule struct {
	First  time.Duration
	Max    time.Duration
	Window time.Duration
	Jitter float64
}

// DefaultSchedule: 30 s, 1 min, 2 min, ... doubling to 8 h between attempts, for 72 h
// (about 17 attempts in all).
var DefaultSchedule = Schedule{First: 30 * time.Second, Max: 8 * time.Hour, Window: 72 * time.Hour, Jitter: 0.2}

// Next returns when to try again after the failed attempt number `failed` (1 for the
// first attempt) of a delivery first tried at first, with now the time of that failed
// attempt; ok is false when the window is over and the delivery has failed.
func (s Schedule) Next(failed int, first, now time.Time) (next time.Time, ok bool) {
	deadline := first.Add(s.Window)
	if !now.Before(deadline) {
		return time.Time{}, false
	}
	delay := s.First
	for i := 1; i < failed && delay < s.Max; i++ {
		delay *= 2
	}
	delay = min(delay, s.Max)
	if s.Jitter > 0 {
		delay = time.Duration(float64(delay) * (1 - s.Jitter + 2*s.Jitter*rand.Float64()))
	}
	next = now.Add(delay)
	if next.After(deadline) {
		next = deadline
	}
	return next, true
}
