package bench

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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

// An A/B run's comparison puts each scenario's B row against its A row: the run's ratio,
// the ratio round by round (the two measured one right after the other), CPU per op, and
// the cache's share on each stack beside a row it can answer.
func TestCompareABPutsEachRowOfBAgainstItsRowOfA(t *testing.T) {
	verifyA := Merge([]Result{slice("verify", 800), slice("verify", 600)})
	verifyA.Answers = Answers{"/v1/verify-license": {Hits: 60, Misses: 40}}
	verifyB := Merge([]Result{slice("verify", 880), slice("verify", 540)})
	verifyB.Answers = Answers{"/v1/verify-license": {Hits: 45, Misses: 55}}
	floorA := Merge([]Result{slice("floor", 1000), slice("floor", 1000)})
	floorB := Merge([]Result{slice("floor", 1000), slice("floor", 1100)})
	onlyB := Merge([]Result{slice("pairs", 100), slice("pairs", 100)})
	got := CompareAB([]Result{verifyA, floorA}, []Result{verifyB, floorB, onlyB})
	for _, want := range []string{
		"| verify | 700 | 710 | 1.01× | 0.90×–1.10× | 142 µs | 140 µs | 0.99× |",
		"| 60.0% / 45.0% |",
		"| floor | 1000 | 1050 | 1.05× | 1.00×–1.10× | 100 µs | 95 µs | 0.95× |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the comparison does not say %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "| pairs |") {
		t.Errorf("a row measured on B alone was compared:\n%s", got)
	}
	if !strings.Contains(got, "| floor | 1000 | 1050 | 1.05× | 1.00×–1.10× | 100 µs | 95 µs | 0.95× | 0.00 ms | 0.00 ms | – |") {
		t.Errorf("a row the cache cannot answer shows no share:\n%s", got)
	}
}

// What a scenario's setup makes once (the read licenses, the channel's releases) is made
// once per stack: an A/B run sets its scenarios up on two stacks, and the second must get
// its own, not the first one's keys or a "done" for rows its database does not have.
func TestOnStackMakesOncePerStack(t *testing.T) {
	a, b := &Env{}, &Env{}
	made := 0
	seed := func() (int, error) { made++; return made, nil }
	for range 2 {
		if got, _ := onStack(a, "read licenses", seed); got != 1 {
			t.Fatalf("stack A got %d, want what its first seed made (1)", got)
		}
	}
	if got, _ := onStack(b, "read licenses", seed); got != 2 {
		t.Fatalf("stack B got %d, want its own seed's (2)", got)
	}
	failed := 0
	fail := func() (int, error) { failed++; return 0, errors.New("seed failed") }
	if _, err := onStack(a, "releases", fail); err == nil {
		t.Fatal("a failed seed reported no error")
	}
	if _, err := onStack(a, "releases", fail); err == nil || failed != 2 {
		t.Fatalf("a failed seed was not tried again (%d tries, err %v)", failed, err)
	}
}

// An A/B run's second row of a scenario runs the work the first did: each client the
// same ops, so the same keys, and an op cut by the end of the first run is not part of
// that work.
func TestAReplayRunsEachClientsOpsAgain(t *testing.T) {
	var mu sync.Mutex
	asked := map[[2]int]int{} // (client, op number) → times asked
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	op := func(ctx context.Context, w, i int) error {
		if w == 0 && i == 103 {
			cancel() // the run ends here, this op cut by it
			<-ctx.Done()
			return ctx.Err()
		}
		mu.Lock()
		asked[[2]int{w, i}]++
		mu.Unlock()
		time.Sleep(100 * time.Microsecond)
		if i%5 == 4 {
			return ErrRefused
		}
		return nil
	}
	lat, _, refused, _, work := drive(ctx, op, 3, 100, nil)
	if len(work) != 3 || work[0] != 3 {
		t.Fatalf("work %v: want 3 clients, the first with the 3 ops before the one cut", work)
	}
	if got := work[0] + work[1] + work[2]; got != len(lat)+refused {
		t.Fatalf("work %v (%d ops) against %d answered and %d refused", work, got, len(lat), refused)
	}
	first := asked
	asked = map[[2]int]int{}
	// Bounded, so that a replay which ignored its work would fail, not hang.
	bounded, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	lat2, _, refused2, _, again := drive(bounded, op, 3, 100, work)
	if !slices.Equal(again, work) || len(lat2) != len(lat) || refused2 != refused {
		t.Fatalf("the replay did %v (%d answered, %d refused), the run %v (%d, %d)", again, len(lat2), refused2, work, len(lat), refused)
	}
	// The replay asks each op of the work once, each asked in the run too (which also
	// asked, and cut, the op each other client had in flight when it ended).
	want := map[[2]int]int{}
	for w, n := range work {
		for i := range n {
			want[[2]int{w, 100 + i}] = 1
		}
	}
	if !maps.Equal(asked, want) {
		t.Fatalf("the replay asked about %d ops, not the %d of its work", len(asked), len(want))
	}
	for op := range want {
		if first[op] != 1 {
			t.Fatalf("the replay asked about client %d's op %d, which the run did not", op[0], op[1])
		}
	}
}

// A replay keeps every client busy until its last ops, whichever client's ops are left:
// the work of one client alone is run by all of them at once.
func TestAReplayKeepsEveryClientBusy(t *testing.T) {
	var inFlight, most atomic.Int64
	all := make(chan struct{})
	var once sync.Once
	waited, stop := context.WithTimeout(context.Background(), 5*time.Second)
	defer stop()
	op := func(ctx context.Context, w, i int) error {
		if n := inFlight.Add(1); n == 3 {
			once.Do(func() { close(all) })
		}
		defer inFlight.Add(-1)
		select {
		case <-all: // three ops at once: every client is running one
		case <-waited.Done():
		}
		for {
			m := most.Load()
			if n := inFlight.Load(); n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		return nil
	}
	lat, _, _, _, work := drive(context.Background(), op, 3, 0, Work{0, 0, 12})
	if len(lat) != 12 || !slices.Equal(work, Work{0, 0, 12}) {
		t.Fatalf("%d ops answered, work %v: want client 2's 12", len(lat), work)
	}
	if most.Load() != 3 {
		t.Fatalf("at most %d ops in flight: the replay of one client's work ran on fewer than its 3 clients", most.Load())
	}
}
