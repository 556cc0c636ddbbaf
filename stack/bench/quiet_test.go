package bench

import (
	"context"
	"testing"
	"time"
)

// busyFor is a sampler whose processes use a whole core in each of the given ticks (by
// their order) and nothing in the others.
func busyFor(busy ...bool) func() CPUTimes {
	var used time.Duration
	n := 0
	return func() CPUTimes {
		if n > 0 && n <= len(busy) && busy[n-1] {
			used += 10 * time.Millisecond // a whole core over a tick of 10 ms
		}
		n++
		return CPUTimes{"postgres": used}
	}
}

// A report waits for two quiet ticks in a row: a quiet tick between busy ones is a lull
// in a backlog, not its end.
func TestTheStackIsQuietAfterTwoCalmSecondsInARow(t *testing.T) {
	const tick = 10 * time.Millisecond
	for _, c := range []struct {
		name  string
		busy  []bool
		quiet bool
		ticks int // how many ticks the wait takes, when quiet
	}{
		{"quiet from the start", nil, true, 2},
		{"busy, then quiet", []bool{true, true, true}, true, 5},
		{"a lull in the backlog", []bool{true, false, true, false, false}, true, 5},
		{"busy throughout", []bool{true, true, true, true, true, true, true, true, true, true, true, true, true, true, true, true, true, true, true, true, true, true, true, true, true, true, true, true, true, true}, false, 0},
	} {
		waited, quiet := waitUntilQuiet(context.Background(), busyFor(c.busy...), tick, 20*tick)
		if quiet != c.quiet {
			t.Errorf("%s: quiet %v after %s; want %v", c.name, quiet, waited, c.quiet)
			continue
		}
		// No upper bound: a loaded machine's ticks come late, never early.
		if quiet && waited < time.Duration(c.ticks)*tick {
			t.Errorf("%s: quiet after %s; want %d ticks of %s at least", c.name, waited, c.ticks, tick)
		}
	}
}
