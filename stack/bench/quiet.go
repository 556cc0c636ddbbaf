package bench

import (
	"context"
	"time"

	"github.com/keyhouse/keyhouse/stack"
)

// Quiet is the most CPU the stack may use, as a share of one core, in each of two seconds
// in a row for it to count as done with what came before.
const Quiet = 0.15

// WaitUntilQuiet waits, up to timeout, until every process of s together (the bench's
// own included: it runs NATS) used less than Quiet of a core in each of two seconds in a
// row, and returns how long that took. What the scenarios and tasks leave behind runs
// on after them: the import's 100,000 license.issued events go through licensing's relay
// and into the event log for a minute or more, and autovacuum follows the rows that wrote
// most. A report started meanwhile measures that work as well as its own (in a full run
// the latency report's capacity came out at half of a quiet run's).
func WaitUntilQuiet(ctx context.Context, s *stack.Stack, timeout time.Duration) (waited time.Duration, quiet bool) {
	return waitUntilQuiet(ctx, func() CPUTimes { return SampleCPU(s) }, time.Second, timeout)
}

// waitUntilQuiet is WaitUntilQuiet over sample, read every tick.
func waitUntilQuiet(ctx context.Context, sample func() CPUTimes, tick, timeout time.Duration) (waited time.Duration, quiet bool) {
	start := time.Now()
	calm := 0
	before := sample()
	for time.Since(start) < timeout {
		select {
		case <-ctx.Done():
			return time.Since(start), false
		case <-time.After(tick):
		}
		now := sample()
		if used := now.Sub(before).Total(); used.Seconds() < Quiet*tick.Seconds() {
			if calm++; calm == 2 {
				return time.Since(start), true
			}
		} else {
			calm = 0
		}
		before = now
	}
	return time.Since(start), false
}
