package bench

import (
	"strings"
	"testing"
	"time"
)

// slice is one round's measurement of a row: ops requests in one second, for 100 ms of
// the gateway's CPU.
func slice(id string, ops int) Result {
	return Result{ID: id, Name: id, Workers: 32, Requests: ops, Duration: time.Second, CPU: CPUTimes{"gateway": 100 * time.Millisecond}}
}

// The goals name the whole run's ratio and, beside it, how far it moved from round to
// round: a row and its floor measured in the same round saw the same machine.
func TestTheGoalsShowTheRatioRoundByRound(t *testing.T) {
	verify := Merge([]Result{slice("verify", 600), slice("verify", 800), slice("verify", 700)})
	floor := Merge([]Result{slice("floor", 1000), slice("floor", 1000), slice("floor", 875)})
	pairs := Merge([]Result{slice("pairs", 100), slice("pairs", 50)})
	pairsFloor := Merge([]Result{slice("pairs-floor", 250), slice("pairs-floor", 150)})
	if got := verify.RoundRPS; len(got) != 3 || got[0] != 600 || got[2] != 700 {
		t.Fatalf("the rounds' ops/s: %v; want 600, 800, 700", got)
	}
	goals := Goals([]Result{verify, floor, pairs, pairsFloor})
	for _, want := range []string{
		"73.0% of the floor's ops/s (goal 75%; round by round 60.0%–80.0%)",
		"2.67× the write floor's time per pair (round by round 2.50×–3.00×)",
	} {
		if !strings.Contains(goals, want) {
			t.Errorf("the goals do not say %q:\n%s", want, goals)
		}
	}
	// A row measured in other rounds than its floor shows the run's ratio alone.
	alone := Merge([]Result{slice("verify", 700)})
	if goals := Goals([]Result{alone, floor}); strings.Contains(goals, "round by round") || !strings.Contains(goals, "of the floor's ops/s (goal 75%)") {
		t.Errorf("a row of one round against a floor of three:\n%s", goals)
	}
}
