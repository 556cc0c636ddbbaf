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

// Over two rounds every row is measured once before and once after each other row, so
// what one row leaves behind (its events still being logged, autovacuum) does not fall
// on the same neighbour every time: the pairs' on their floor, say.
func TestEachRowPrecedesAndFollowsEveryOtherAcrossTwoRounds(t *testing.T) {
	rows := []string{"pairs", "write floor", "verify"}
	before := map[[2]string]int{}
	for round := range 4 {
		order := InRoundOrder(rows, round)
		if len(order) != len(rows) {
			t.Fatalf("round %d measures %v, not every row of %v", round, order, rows)
		}
		for i, a := range order {
			for _, b := range order[i+1:] {
				before[[2]string{a, b}]++
			}
		}
	}
	for _, a := range rows {
		for _, b := range rows {
			if a != b && before[[2]string{a, b}] != 2 {
				t.Errorf("%q came before %q in %d of 4 rounds, want 2", a, b, before[[2]string{a, b}])
			}
		}
	}
	if got := rows; got[0] != "pairs" || got[1] != "write floor" || got[2] != "verify" {
		t.Errorf("the rows given were reordered in place: %v", got)
	}
}

// The check-update row's apps run the 50 newest releases, the last of them current.
func TestInstalledVersionsAreTheFiftyNewest(t *testing.T) {
	seen := map[string]bool{}
	for k := range 1000 {
		seen[installedVersion(k)] = true
	}
	if len(seen) != installedVersions || !seen["4.5.0"] || !seen[latestVersion] || installedVersion(installedVersions-1) != latestVersion {
		t.Fatalf("versions %v, want 4.5.0 to %s", seen, latestVersion)
	}
}
