package store

import (
	"context"
	"errors"
	"fmt"
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
// migrations: the cap and the compare-and-swap are properties of the SQL, not of Go.

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
	return New(openDB(t)), tenant, key
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
	s := New(pool)
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
	if ok, _ := s.Reissue(ctx, tenant, key, "a", hash(key, "a2")); !ok {
		t.Fatal("reissue")
	}
	if ok, _ := s.DeactivateByToken(ctx, tenant, key, hash(key, "a")); ok {
		t.Fatal("the old token still works after a reissue")
	}
	if ok, _ := s.DeactivateByToken(ctx, tenant, key, hash(key, "a2")); !ok {
		t.Fatal("the new token does not work")
	}
	if ok, _ := s.HasSeat(ctx, tenant, key, "a"); ok {
		t.Fatal("seat still there")
	}
	if ok, _ := s.Reissue(ctx, tenant, key, "a", hash(key, "a3")); ok {
		t.Fatal("reissue without a seat")
	}
}

func mustActivate(t *testing.T, s *Store, tenant, key, instance string) {
	t.Helper()
	if _, err := s.Activate(context.Background(), tenant, key, instance, hash(key, instance), nil); err != nil {
		t.Fatal(err)
	}
}

func mustRead(t *testing.T, s *Store, tenant, key, token, metric string) UsageState {
	t.Helper()
	st, err := s.ReadUsage(context.Background(), tenant, key, hash(key, token), metric)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func mustSwap(t *testing.T, s *Store, tenant, key, metric string, prev UsageState, used int64) bool {
	t.Helper()
	ok, err := s.SwapUsage(context.Background(), tenant, key, metric, prev, used)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// Invariant 3: two writers that read the same total cannot both write.
func TestSwapUsageLetsOneOfTwoWritersWin(t *testing.T) {
	t.Parallel()
	s, tenant, key := fresh(t)
	mustActivate(t, s, tenant, key, "a")
	if st := mustRead(t, s, tenant, key, "nope", "users"); st.SeatOK {
		t.Fatal("an unknown token holds a seat")
	}
	// First write of a metric: both read "no row".
	a, b := mustRead(t, s, tenant, key, "a", "users"), mustRead(t, s, tenant, key, "a", "users")
	if !a.SeatOK || a.Exists {
		t.Fatalf("state %+v", a)
	}
	if !mustSwap(t, s, tenant, key, "users", a, 1) || mustSwap(t, s, tenant, key, "users", b, 1) {
		t.Fatal("both first writers won")
	}
	// Later writes: both read total 1 at the same version.
	a, b = mustRead(t, s, tenant, key, "a", "users"), mustRead(t, s, tenant, key, "a", "users")
	if !mustSwap(t, s, tenant, key, "users", a, 2) || mustSwap(t, s, tenant, key, "users", b, 2) {
		t.Fatal("both writers won")
	}
	if u, _ := s.Usage(context.Background(), tenant, key); u["users"] != 2 {
		t.Fatalf("usage %v", u)
	}
}

// A reset between a track-usage's read and its write makes the write lose, so the total
// from before the reset is never written back.
func TestResetUsageMakesAnEarlierReadLose(t *testing.T) {
	t.Parallel()
	s, tenant, key := fresh(t)
	ctx := context.Background()
	mustActivate(t, s, tenant, key, "a")
	st := mustRead(t, s, tenant, key, "a", "users")
	mustSwap(t, s, tenant, key, "users", st, 40)

	before := mustRead(t, s, tenant, key, "a", "users")
	metric := "users"
	u, err := s.ResetUsage(ctx, tenant, key, &metric)
	if err != nil || u["users"] != 0 {
		t.Fatalf("reset one: %v %v", u, err)
	}
	if mustSwap(t, s, tenant, key, "users", before, 41) {
		t.Fatal("a read from before the reset wrote 41")
	}

	// Clearing every metric deletes the rows; a read from before it still loses, even
	// after another writer created the row again (versions are never reused).
	before = mustRead(t, s, tenant, key, "a", "users")
	if u, err := s.ResetUsage(ctx, tenant, key, nil); err != nil || len(u) != 0 {
		t.Fatalf("reset all: %v %v", u, err)
	}
	again := mustRead(t, s, tenant, key, "a", "users")
	if !mustSwap(t, s, tenant, key, "users", again, 1) {
		t.Fatal("write after the reset")
	}
	if mustSwap(t, s, tenant, key, "users", before, 1) {
		t.Fatal("a read from before the reset-all won")
	}

	// Resetting a metric that was never used records it as 0.
	metric = "projects"
	if u, err := s.ResetUsage(ctx, tenant, key, &metric); err != nil || u["projects"] != 0 || len(u) != 2 {
		t.Fatalf("reset unused: %v %v", u, err)
	}
}

func TestPurgeForgetsTheLicenseForGood(t *testing.T) {
	t.Parallel()
	s, tenant, key := fresh(t)
	ctx := context.Background()
	mustActivate(t, s, tenant, key, "a")
	mustActivate(t, s, tenant, key+"-kept", "a")
	mustSwap(t, s, tenant, key, "users", mustRead(t, s, tenant, key, "a", "users"), 3)
	for range 2 { // idempotent: a redelivered event changes nothing
		if err := s.Purge(ctx, tenant, key, time.Now()); err != nil {
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
	mustSwap(t, s, tenant, key, "users", mustRead(t, s, tenant, key, "a", "users"), 5)

	recent, err := s.Recent(ctx, tenant, 2)
	if err != nil || len(recent) != 2 || recent[0].InstanceID != "c" || recent[1].InstanceID != "b" {
		t.Fatalf("recent %v %v", recent, err)
	}
	if n, _ := s.CountSeats(ctx, tenant); n != 3 {
		t.Fatalf("count %d", n)
	}
	sums, err := s.Summaries(ctx, tenant, []string{key, "UNKNOWN"})
	if err != nil || len(sums) != 1 || sums[key].Seats != 3 || sums[key].Usage["users"] != 5 {
		t.Fatalf("summaries %v %v", sums, err)
	}
}
