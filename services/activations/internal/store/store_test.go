package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/keyhouse/keyhouse/devinfra/testkit"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
	"github.com/keyhouse/keyhouse/services/activations/migrations"
)

// The SQL runs on a real Postgres (Debian's binaries), migrated by the production
// migrations: the cap and the usage limit are properties of the SQL, not of Go.

func TestMain(m *testing.M) { testkit.Main(m) }

// schema is the activations schema as the production migrations make it.
var schema = testkit.Template{Name: "activations", Migrate: pgxx.Migrations{Schema: "activations", FS: migrations.FS}.Apply}

// openDB is a pool on a database of the test's own.
func openDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxx.Open(context.Background(), testkit.DatabaseURL(t, schema), "activations")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

var keyCounter atomic.Int64

// ids returns a tenant/key pair no other call returns.
func ids() (tenant, key string) {
	n := keyCounter.Add(1)
	return fmt.Sprintf("tenant-%d", n), fmt.Sprintf("KEY-%d", n)
}

// fresh returns a store on a database of the test's own and a tenant/key pair.
func fresh(t *testing.T) (*Store, string, string) {
	t.Helper()
	tenant, key := ids()
	return New(openDB(t), nil), tenant, key
}

// hash stands for a token's hash; tokens are unique across licenses, so it is made of the
// key and a name.
func hash(key, name string) []byte { return []byte(key + "/" + name) }

func cap32(n int32) *int32 { return &n }

// Invariant 2: the count and the insert run under one per-license lock, so concurrent
// activations on any number of connections (replicas) never pass the cap. Each call is a
// connection of its own, as from many replicas; several rounds give the race its chances.
func TestActivateHoldsTheCapUnderConcurrency(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := openDB(t).Config().Copy()
	cfg.MaxConns, cfg.MinConns = 32, 32
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s := New(pool, nil)
	const rounds, tries, limit = 10, 32, 5
	for round := range rounds {
		tenant, key := ids()
		var created, refused atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range tries {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id := fmt.Sprintf("host-%d", i)
				<-start
				already, err := s.Activate(ctx, tenant, key, id, hash(key, id), cap32(limit))
				switch {
				case errors.Is(err, ErrCapReached):
					refused.Add(1)
				case err != nil:
					t.Error(err)
				case already:
					t.Errorf("%s already activated", id)
				default:
					created.Add(1)
				}
			}()
		}
		close(start)
		wg.Wait()
		seats, err := s.Seats(ctx, tenant, key)
		if err != nil {
			t.Fatal(err)
		}
		if created.Load() != limit || refused.Load() != tries-limit || len(seats) != limit {
			t.Fatalf("round %d: created %d, refused %d, seats %d; want %d seats", round, created.Load(), refused.Load(), len(seats), limit)
		}
	}
}

func TestActivateIsOncePerInstanceAndTheCapIgnoresExistingSeats(t *testing.T) {
	t.Parallel()
	s, tenant, key := fresh(t)
	ctx := context.Background()
	if already, err := s.Activate(ctx, tenant, key, "a", hash(key, "a"), cap32(1)); err != nil || already {
		t.Fatalf("first: %v %v", already, err)
	}
	if already, err := s.Activate(ctx, tenant, key, "a", hash(key, "other"), cap32(1)); err != nil || !already {
		t.Fatalf("repeat at the cap: %v %v", already, err)
	}
	if _, err := s.Activate(ctx, tenant, key, "b", hash(key, "b"), cap32(1)); !errors.Is(err, ErrCapReached) {
		t.Fatalf("second instance: %v", err)
	}
	// Lowering the cap below the seat count removes nothing; it only refuses new seats.
	if _, err := s.Activate(ctx, tenant, key, "b", hash(key, "b"), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Activate(ctx, tenant, key, "c", hash(key, "c"), cap32(1)); !errors.Is(err, ErrCapReached) {
		t.Fatalf("over a lowered cap: %v", err)
	}
	if seats, _ := s.Seats(ctx, tenant, key); len(seats) != 2 {
		t.Fatalf("seats %v", seats)
	}
	// The same key in another tenant is another license.
	if _, err := s.Activate(ctx, tenant+"-other", key, "b", hash(tenant+"-other/"+key, "b"), cap32(1)); err != nil {
		t.Fatal(err)
	}
}

func TestTokensFindOnlyTheirOwnSeat(t *testing.T) {
	t.Parallel()
	s, tenant, key := fresh(t)
	ctx := context.Background()
	mustActivate(t, s, tenant, key, "a")
	mustActivate(t, s, tenant, key+"-2", "b")
	if ok, err := s.DeactivateByToken(ctx, tenant, key, hash(key+"-2", "b")); err != nil || ok {
		t.Fatalf("another license's token deactivated: %v %v", ok, err)
	}
	if ok, _ := s.Reissue(ctx, tenant, key, "app", "a", hash(key, "a2")); !ok {
		t.Fatal("reissue")
	}
	if ok, _ := s.DeactivateByToken(ctx, tenant, key, hash(key, "a")); ok {
		t.Fatal("the old token still works after a reissue")
	}
	if ok, _ := s.DeactivateByToken(ctx, tenant, key, hash(key, "a2")); !ok {
		t.Fatal("the new token does not work")
	}
	if ok, _, _ := s.HasSeat(ctx, tenant, key, "a"); ok {
		t.Fatal("seat still there")
	}
	if ok, _ := s.Reissue(ctx, tenant, key, "app", "a", hash(key, "a3")); ok {
		t.Fatal("reissue without a seat")
	}
}

func mustActivate(t *testing.T, s *Store, tenant, key, instance string) {
	t.Helper()
	if _, err := s.Activate(context.Background(), tenant, key, instance, hash(key, instance), nil); err != nil {
		t.Fatal(err)
	}
}

// mustAdd adds inc to the metric as the seat "a" of key (limit 1000) and says whether it
// was applied.
func mustAdd(t *testing.T, s *Store, tenant, key, metric string, inc int64) bool {
	t.Helper()
	a, err := s.AddUsage(context.Background(), tenant, key, hash(key, "a"), metric, inc, 1000, true)
	if err != nil || !a.SeatOK {
		t.Fatalf("add: %+v %v", a, err)
	}
	return a.Applied
}

func TestAddUsageAppliesOnlyForASeatAnAllowedMetricAndWithinTheLimit(t *testing.T) {
	t.Parallel()
	s, tenant, key := fresh(t)
	ctx := context.Background()
	mustActivate(t, s, tenant, key, "a")
	add := func(token string, inc int64, limit float64, allowed bool) Added {
		t.Helper()
		a, err := s.AddUsage(ctx, tenant, key, hash(key, token), "users", inc, limit, allowed)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	if a := add("nope", 1, 10, true); a.SeatOK || a.Applied {
		t.Fatalf("an unknown token: %+v", a)
	}
	if a := add("a", 1, 10, false); !a.SeatOK || a.Applied {
		t.Fatalf("a metric not allowed: %+v", a)
	}
	if a := add("a", 11, 10, true); a.Applied {
		t.Fatalf("a first increment over the limit: %+v", a)
	}
	if a := add("a", 4, 10, true); !a.Applied || a.Used != 4 {
		t.Fatalf("first increment: %+v", a)
	}
	if a := add("a", 6, 10, true); !a.Applied || a.Used != 10 {
		t.Fatalf("up to the limit: %+v", a)
	}
	if a := add("a", 1, 11.5, true); !a.Applied || a.Used != 11 {
		t.Fatalf("a fractional limit: %+v", a)
	}
	if a := add("a", 1, 11.5, true); a.Applied {
		t.Fatalf("past the limit: %+v", a)
	}
	if u, _ := s.Usage(ctx, tenant, key); u["users"] != 11 {
		t.Fatalf("usage %v", u)
	}
}

// Invariant 3: increments of one metric from many connections (replicas) at once are each
// applied once or not at all, report distinct totals, and stop exactly at the limit.
func TestAddUsageInParallelLandsExactlyOnTheLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := openDB(t).Config().Copy()
	cfg.MaxConns, cfg.MinConns = 32, 32
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s := New(pool, nil)
	tenant, key := ids()
	mustActivate(t, s, tenant, key, "a")
	const tries, limit = 64, 40
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := map[int64]bool{}
	refused := 0
	start := make(chan struct{})
	for range tries {
		wg.Go(func() {
			<-start
			a, err := s.AddUsage(ctx, tenant, key, hash(key, "a"), "users", 1, limit, true)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				t.Error(err)
			case !a.Applied:
				refused++
			case seen[a.Used] || a.Used < 1 || a.Used > limit:
				t.Errorf("total %d reported twice or out of range", a.Used)
			default:
				seen[a.Used] = true
			}
		})
	}
	close(start)
	wg.Wait()
	if len(seen) != limit || refused != tries-limit {
		t.Errorf("%d applied, %d refused; want %d and %d", len(seen), refused, limit, tries-limit)
	}
	if u, _ := s.Usage(ctx, tenant, key); u["users"] != limit {
		t.Errorf("usage %v, want %d", u, limit)
	}
}

// A reset lands wholly between increments: they count again from zero.
// One batch decides each increment as if alone: increments of one metric in the order
// given, a refused one leaving the others untouched.
func TestAddUsagesDecidesEachIncrementInOrder(t *testing.T) {
	t.Parallel()
	s, tenant, key := fresh(t)
	ctx := context.Background()
	mustActivate(t, s, tenant, key, "a")
	inc := func(token, metric string, n int64) Increment {
		return Increment{Tenant: tenant, Key: key, TokenHash: hash(key, token), Metric: metric, Inc: n, Limit: 10, Allowed: true}
	}
	got, err := s.AddUsages(ctx, []Increment{
		inc("a", "users", 3), inc("nope", "users", 1), inc("a", "seats", 2), inc("a", "users", 4),
		inc("a", "users", 5), inc("a", "users", 3),
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []Added{
		{SeatOK: true, Applied: true, Used: 3}, {}, {SeatOK: true, Applied: true, Used: 2}, {SeatOK: true, Applied: true, Used: 7},
		{SeatOK: true}, {SeatOK: true, Applied: true, Used: 10},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("decided %+v, want %+v", got, want)
	}
	if u, _ := s.Usage(ctx, tenant, key); u["users"] != 10 || u["seats"] != 2 {
		t.Fatalf("usage %v", u)
	}
}

// Invariant 3 for batches: many batches at once (gateways, replicas), each over the same
// licenses and metrics in its own order, neither deadlock nor pass a limit, and each
// increment is applied once or not at all.
func TestAddUsagesInParallelBatchesLandExactlyOnTheLimits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := openDB(t).Config().Copy()
	cfg.MaxConns, cfg.MinConns = 16, 16
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s := New(pool, nil)
	tenant, k1 := ids()
	_, k2 := ids()
	mustActivate(t, s, tenant, k1, "a")
	mustActivate(t, s, tenant, k2, "a")
	type counter struct{ key, metric string }
	counters := []counter{{k1, "users"}, {k1, "seats"}, {k2, "users"}, {k2, "seats"}}
	const batches, perBatch, limit = 32, 8, 40 // 64 tries per counter
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := map[counter]map[int64]bool{}
	start := make(chan struct{})
	for b := range batches {
		wg.Go(func() {
			var incs []Increment
			for i := range perBatch {
				c := counters[(b+i*3)%len(counters)] // every batch in its own order
				incs = append(incs, Increment{Tenant: tenant, Key: c.key, TokenHash: hash(c.key, "a"), Metric: c.metric, Inc: 1, Limit: limit, Allowed: true})
			}
			<-start
			added, err := s.AddUsages(ctx, incs)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Error(err)
				return
			}
			for i, a := range added {
				c := counter{incs[i].Key, incs[i].Metric}
				if seen[c] == nil {
					seen[c] = map[int64]bool{}
				}
				switch {
				case !a.Applied:
				case seen[c][a.Used] || a.Used < 1 || a.Used > limit:
					t.Errorf("%v: total %d reported twice or out of range", c, a.Used)
				default:
					seen[c][a.Used] = true
				}
			}
		})
	}
	close(start)
	wg.Wait()
	for _, c := range counters {
		if len(seen[c]) != limit {
			t.Errorf("%v: %d increments applied, want exactly %d", c, len(seen[c]), limit)
		}
		if u, _ := s.Usage(ctx, tenant, c.key); u[c.metric] != limit {
			t.Errorf("%v: total %d, want %d", c, u[c.metric], limit)
		}
	}
}

func TestResetUsageThenIncrementsCountFromZero(t *testing.T) {
	t.Parallel()
	s, tenant, key := fresh(t)
	ctx := context.Background()
	mustActivate(t, s, tenant, key, "a")
	mustAdd(t, s, tenant, key, "users", 40)
	metric := "users"
	u, err := s.ResetUsage(ctx, tenant, key, "app", &metric)
	if err != nil || u["users"] != 0 {
		t.Fatalf("reset one: %v %v", u, err)
	}
	mustAdd(t, s, tenant, key, "users", 1)
	if u, err := s.ResetUsage(ctx, tenant, key, "app", nil); err != nil || len(u) != 0 {
		t.Fatalf("reset all: %v %v", u, err)
	}
	mustAdd(t, s, tenant, key, "users", 2)
	if u, _ := s.Usage(ctx, tenant, key); u["users"] != 2 {
		t.Fatalf("usage after the resets %v", u)
	}
	// Resetting a metric that was never used records it as 0.
	metric = "projects"
	if u, err := s.ResetUsage(ctx, tenant, key, "app", &metric); err != nil || u["projects"] != 0 || len(u) != 2 {
		t.Fatalf("reset unused: %v %v", u, err)
	}
}

func TestPurgeForgetsTheLicenseForGood(t *testing.T) {
	t.Parallel()
	s, tenant, key := fresh(t)
	ctx := context.Background()
	mustActivate(t, s, tenant, key, "a")
	mustActivate(t, s, tenant, key+"-kept", "a")
	mustAdd(t, s, tenant, key, "users", 3)
	for range 2 { // idempotent: a redelivered event changes nothing
		if err := s.Purge(ctx, tenant, key, "app", time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if seats, _ := s.Seats(ctx, tenant, key); len(seats) != 0 {
		t.Fatalf("seats %v", seats)
	}
	if u, _ := s.Usage(ctx, tenant, key); len(u) != 0 {
		t.Fatalf("usage %v", u)
	}
	// An activation that read the license before its deletion cannot bring a seat back.
	if _, err := s.Activate(ctx, tenant, key, "b", hash(key, "b"), nil); !errors.Is(err, ErrLicenseDeleted) {
		t.Fatalf("activation after the purge: %v", err)
	}
	if seats, _ := s.Seats(ctx, tenant, key+"-kept"); len(seats) != 1 {
		t.Fatal("another license lost its seat")
	}
}

func TestRecentCountsAndSummariesAreScopedByTenant(t *testing.T) {
	t.Parallel()
	s, tenant, key := fresh(t)
	ctx := context.Background()
	for _, id := range []string{"a", "b", "c"} {
		mustActivate(t, s, tenant, key, id)
	}
	mustActivate(t, s, tenant+"-other", key, "z")
	mustAdd(t, s, tenant, key, "users", 5)

	recent, err := s.Recent(ctx, tenant, 2, nil)
	if err != nil || len(recent) != 2 || recent[0].InstanceID != "c" || recent[1].InstanceID != "b" {
		t.Fatalf("recent %v %v", recent, err)
	}
	if n, _ := s.CountSeats(ctx, tenant, nil); n != 3 {
		t.Fatalf("count %d", n)
	}
	// The seats of licenses licensing deleted (not purged here yet) are left out.
	mustActivate(t, s, tenant, key+"-deleted", "d")
	if recent, err := s.Recent(ctx, tenant, 10, []string{key + "-deleted", "OTHER"}); err != nil || len(recent) != 3 || recent[0].InstanceID != "c" {
		t.Fatalf("recent without the deleted license %v %v", recent, err)
	}
	if n, _ := s.CountSeats(ctx, tenant, []string{key + "-deleted"}); n != 3 {
		t.Fatalf("count without the deleted license %d", n)
	}
	if n, _ := s.CountSeats(ctx, tenant, []string{key}); n != 1 {
		t.Fatalf("count without the first license %d", n)
	}
	sums, err := s.Summaries(ctx, tenant, []string{key, "UNKNOWN"})
	if err != nil || len(sums) != 1 || sums[key].Seats != 3 || sums[key].Usage["users"] != 5 {
		t.Fatalf("summaries %v %v", sums, err)
	}
}

// An increment racing the purge of its license either lands before the purge (and is
// purged with the rest) or finds the seat gone: it never leaves a usage row behind, which
// nothing could read or remove any more. A trigger of this test's database holds every
// new usage row for a moment, so the increment's snapshot (seat present) is taken well
// before the purge commits and its insert happens well after, every time.
func TestIncrementRacingThePurgeLeavesNoUsageRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openDB(t)
	if _, err := db.Exec(ctx, `CREATE FUNCTION slow_usage() RETURNS trigger LANGUAGE plpgsql AS
		$$ BEGIN PERFORM pg_sleep(0.3); RETURN NEW; END $$;
		CREATE TRIGGER slow_usage BEFORE INSERT ON usage FOR EACH ROW EXECUTE FUNCTION slow_usage()`); err != nil {
		t.Fatal(err)
	}
	s := New(db, nil)
	for round := range 4 {
		tenant, key := ids()
		mustActivate(t, s, tenant, key, "a")
		var wg sync.WaitGroup
		errs := make([]error, 3)
		for i, metric := range []string{"users", "seats"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = s.AddUsage(ctx, tenant, key, hash(key, "a"), metric, 1, 100, true)
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The purge starts while the increments are held in the trigger (or, in odd
			// rounds, just before they start).
			time.Sleep(time.Duration(100+round%2*-99) * time.Millisecond)
			errs[2] = s.Purge(ctx, tenant, key, "app", time.Now())
		}()
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		if u, err := s.Usage(ctx, tenant, key); err != nil || len(u) != 0 {
			t.Fatalf("round %d: the deleted license kept usage %v (%v)", round, u, err)
		}
	}
}

// A batch decides each change as if alone: removals first, then activations in the order
// given, each counting the seats the ones before it left.
func TestChangeSeatsDecidesEachChangeAsIfAlone(t *testing.T) {
	t.Parallel()
	s, tenant, key := fresh(t)
	ctx := context.Background()
	mustActivate(t, s, tenant, key, "a")
	_, gone := ids()
	if err := s.Purge(ctx, tenant, gone, "app", time.Now()); err != nil {
		t.Fatal(err)
	}
	activate := func(k, instance string) SeatChange {
		return SeatChange{Tenant: tenant, Key: k, Activate: true, Instance: instance, TokenHash: hash(k, instance+"-new"), MaxSeats: cap32(2)}
	}
	got, err := s.ChangeSeats(ctx, []SeatChange{
		activate(key, "b"),
		activate(key, "c"),
		{Tenant: tenant, Key: key, TokenHash: hash(key, "a")},
		activate(key, "a"),
		{Tenant: tenant, Key: key, TokenHash: hash(key, "nobody")},
		activate(gone, "x"),
		activate(key, "c"),
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []SeatChanged{{}, {}, {Removed: true}, {Err: ErrCapReached}, {}, {Err: ErrLicenseDeleted}, {Already: true}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("decided %+v, want %+v", got, want)
	}
	seats, err := s.Seats(ctx, tenant, key)
	if err != nil {
		t.Fatal(err)
	}
	var instances []string
	for _, seat := range seats {
		instances = append(instances, seat.InstanceID)
	}
	if fmt.Sprint(instances) != "[b c]" {
		t.Fatalf("seats %v, want [b c]", instances)
	}
}

// Invariant 2 for batches: many batches at once (gateways, replicas), each activating on
// the same licenses in its own order while others remove seats and meter the same
// licenses (shared locks, taken in the same order), neither deadlock nor pass a cap.
func TestChangeSeatsInParallelBatchesHoldEveryCap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := openDB(t).Config().Copy()
	cfg.MaxConns, cfg.MinConns = 24, 24
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s := New(pool, nil)
	tenant, _ := ids()
	var keys []string
	for range 4 {
		_, k := ids()
		keys = append(keys, k)
		mustActivate(t, s, tenant, k, "meter")
	}
	const batches, perBatch, limit = 24, 8, 6 // 48 activations per license, cap 6 (one is the meter)
	var created [4]atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for b := range batches {
		wg.Go(func() {
			var changes []SeatChange
			for i := range perBatch {
				k := (b + i*3) % len(keys) // every batch in its own order
				instance := fmt.Sprintf("host-%d-%d", b, i)
				changes = append(changes, SeatChange{Tenant: tenant, Key: keys[k], Activate: true, Instance: instance, TokenHash: hash(keys[k], instance), MaxSeats: cap32(limit)})
			}
			// And a removal in every batch (of a token that holds no seat): removals share the
			// transaction of the activations.
			changes = append(changes, SeatChange{Tenant: tenant, Key: keys[b%len(keys)], TokenHash: hash(keys[b%len(keys)], "nobody")})
			<-start
			changed, err := s.ChangeSeats(ctx, changes)
			if err != nil {
				t.Error(err)
				return
			}
			for i, c := range changed[:perBatch] {
				switch {
				case errors.Is(c.Err, ErrCapReached):
				case c.Err != nil || c.Already:
					t.Errorf("%+v", c)
				default:
					created[(b+i*3)%len(keys)].Add(1)
				}
			}
		})
		wg.Go(func() {
			var incs []Increment
			for i := range len(keys) {
				k := keys[(b+i)%len(keys)]
				incs = append(incs, Increment{Tenant: tenant, Key: k, TokenHash: hash(k, "meter"), Metric: "calls", Inc: 1, Limit: 1 << 40, Allowed: true})
			}
			<-start
			if _, err := s.AddUsages(ctx, incs); err != nil {
				t.Error(err)
			}
		})
	}
	close(start)
	wg.Wait()
	for i, k := range keys {
		seats, err := s.Seats(ctx, tenant, k)
		if err != nil {
			t.Fatal(err)
		}
		if len(seats) != limit || created[i].Load() != limit-1 {
			t.Errorf("license %d: %d seats, %d created, want %d seats", i, len(seats), created[i].Load(), limit)
		}
		if u, _ := s.Usage(ctx, tenant, k); u["calls"] != batches {
			t.Errorf("license %d: %d increments, want %d", i, u["calls"], batches)
		}
	}
}

// A batch of seat changes is one transaction although it is sent in two round trips: when
// its events cannot be written (here an event without a tenant, which Emit refuses), none
// of its changes stays, and the connection goes back to the pool usable.
func TestChangeSeatsKeepsNothingWhenItsEventsFail(t *testing.T) {
	t.Parallel()
	st, tenant, key := fresh(t)
	ctx := context.Background()
	mustActivate(t, st, tenant, key, "kept")
	changes := []SeatChange{
		{Tenant: tenant, Key: key, ProductID: "app", TokenHash: hash(key, "kept")},
		{Tenant: "", Key: key, ProductID: "app", Activate: true, Instance: "orphan", TokenHash: hash(key, "orphan")},
	}
	if _, err := st.ChangeSeats(ctx, changes); err == nil {
		t.Fatal("a batch whose event has no tenant was applied")
	}
	var n int
	if err := st.db.QueryRow(ctx, `SELECT count(*) FROM seats WHERE license_key = $1`, key).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d seats of the license after the failed batch (want the one it would have removed): %v", n, err)
	}
	if err := st.db.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE tenant_id = $1`, tenant).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d outbox rows of the tenant (want the first activation's): %v", n, err)
	}
	for range 2 * int(st.db.Config().MaxConns) {
		changed, err := st.ChangeSeats(ctx, []SeatChange{{Tenant: tenant, Key: key, ProductID: "app", Activate: true, Instance: "kept", TokenHash: hash(key, "kept")}})
		if err != nil || !changed[0].Already {
			t.Fatalf("after the failed batch: %+v, %v", changed, err)
		}
	}
}

// The newest seats are read in the index's order up to the limit, however many seats share
// the newest activation time (activated in one statement: an import, a bulk load); the
// seats tied on it come in license and instance order.
func TestRecentReadsNoMoreThanItsLimitWhenSeatsShareAnActivationTime(t *testing.T) {
	t.Parallel()
	s, tenant, key := fresh(t)
	ctx := context.Background()
	mustActivate(t, s, tenant, key, "older")
	if _, err := s.db.Exec(ctx, `INSERT INTO seats (tenant_id, license_key, instance_id, token_hash, activated_at)
		SELECT $1, $2 || '-' || lpad((i % 50)::text, 2, '0'), 'host-' || lpad(i::text, 4, '0'), convert_to($1 || $2 || i, 'UTF8'), now() + interval '1 minute'
		FROM generate_series(1, 5000) AS i`, tenant, key); err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.Exec(ctx, `ANALYZE seats`); err != nil {
		t.Fatal(err)
	}
	recent, err := s.Recent(ctx, tenant, 3, []string{key + "-00"})
	if err != nil || len(recent) != 3 {
		t.Fatalf("recent: %v, %v", recent, err)
	}
	var got []string
	for _, r := range recent {
		got = append(got, r.Key[len(key):]+"/"+r.InstanceID)
	}
	if strings.Join(got, " ") != "-01/host-0001 -01/host-0051 -01/host-0101" {
		t.Errorf("newest seats %v, want the first license's first instances", got)
	}
	var plan string
	if err := s.db.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) `+recentSQL, tenant, 3, []string{key + "-00"}).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(plan, `Sort"`) {
		t.Errorf("the newest seats were sorted, not read in the index's order:\n%s", plan)
	}
}
