package store

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/pkg/events"
	"github.com/keyhouse/keyhouse/pkg/events/eventstest"
	eventsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/events/v1"
)

func ttl(d time.Duration) *time.Duration { return &d }

// Invariant 11 in the SQL: floating activations and renewals on many connections (as from
// many replicas) while seats lapse never leave more live seats than the cap, and a lapsed
// seat counts for nothing before any sweep.
func TestFloatingCapHoldsWhileSeatsLapse(t *testing.T) {
	st, tenant, key := fresh(t)
	ctx := context.Background()
	const limit = 3
	live := func() int {
		var n int
		if err := st.db.QueryRow(ctx, `SELECT count(*) FROM seats WHERE tenant_id = $1 AND license_key = $2 AND `+liveSeat, tenant, key).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var worst int
	wg.Go(func() {
		for {
			worst = max(worst, live())
			select {
			case <-stop:
				return
			default:
			}
		}
	})
	var clients sync.WaitGroup
	for c := range 24 {
		clients.Go(func() {
			for round := range 8 {
				name := string(rune('a'+c)) + string(rune('a'+round))
				_, err := st.Activate(ctx, tenant, key, name, hash(key, name), cap32(limit))
				if err != nil && err != ErrCapReached {
					t.Error(err)
					return
				}
				if err == nil {
					// Renew once, with a lease so short it lapses while others activate.
					exp := time.Now().Add(300 * time.Millisecond)
					if _, err := st.RenewLease(ctx, LeaseRenewal{Tenant: tenant, Key: key, Instance: name, TokenHash: hash(key, name), LeaseExpiresAt: &exp}); err != nil {
						t.Error(err)
					}
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
	clients.Wait()
	close(stop)
	wg.Wait()
	if worst > limit {
		t.Fatalf("%d live seats on a license of cap %d", worst, limit)
	}
}

// A floating seat activated with a lease counts until the lease ends, then not at all;
// the sweepers of two replicas remove each lapsed seat once, and its token is remembered
// as lapsed (that a lapsed seat frees the cap at once before any sweep:
// TestALapsedSeatLapsesOnceBeforeWhatTakesItsPlace).
func TestSweepersShareTheLapsedSeats(t *testing.T) {
	st, tenant, key := fresh(t)
	ctx := context.Background()
	if _, err := st.Activate(ctx, tenant, key, "e", hash(key, "e"), nil); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b", "c", "d"} {
		change := SeatChange{Tenant: tenant, Key: key, Activate: true, Instance: name, TokenHash: hash(key, name), LeaseTTL: ttl(time.Second)}
		if _, err := st.ChangeSeats(ctx, []SeatChange{change}); err != nil {
			t.Fatal(err)
		}
	}
	if ok, _, _ := st.HasSeat(ctx, tenant, key, "a"); !ok {
		t.Fatal("a leased floating seat does not count")
	}
	time.Sleep(1100 * time.Millisecond)
	if ok, _, _ := st.HasSeat(ctx, tenant, key, "a"); ok {
		t.Fatal("a lapsed floating seat still counts before the sweep")
	}
	var mu sync.Mutex
	removed := map[string]int{}
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			lapsed, err := st.SweepLapsed(ctx, 1, time.Hour)
			for err == nil && len(lapsed) > 0 {
				mu.Lock()
				for _, l := range lapsed {
					removed[l.Instance]++
				}
				mu.Unlock()
				lapsed, err = st.SweepLapsed(ctx, 1, time.Hour)
			}
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for _, name := range []string{"a", "b", "c", "d"} {
		if removed[name] != 1 {
			t.Errorf("seat %s removed %d times, want once", name, removed[name])
		}
		if ok, err := st.LapsedWithin(ctx, tenant, key, hash(key, name), time.Hour); err != nil || !ok {
			t.Errorf("seat %s not remembered as lapsed: %v", name, err)
		}
	}
	if removed["e"] != 0 {
		t.Error("a seat that is not floating was swept")
	}
}

// A lease's one read finds the seat by token or by instance, the tier's policy before the
// product's default, and the active key; what is missing comes back nil.
func TestLeaseBasisIsOneReadOfSeatPolicyAndKey(t *testing.T) {
	t.Parallel()
	st, tenant, key := fresh(t)
	ctx := context.Background()
	if _, err := st.Activate(ctx, tenant, key, "pc", hash(key, "pc"), nil); err != nil {
		t.Fatal(err)
	}
	b, err := st.LeaseBasis(ctx, tenant, key, "app", "pro", hash(key, "pc"), "")
	if err != nil || b.Seat == nil || b.Seat.Instance != "pc" || !b.Seat.Live || b.Policy != nil || b.Key != nil {
		t.Fatalf("basis before any policy or key: %+v, %v", b, err)
	}
	for _, p := range []Policy{
		{ProductID: "app", Tier: "*", LeaseTTL: time.Hour, RenewAfter: time.Minute, FingerprintMatch: "none"},
		{ProductID: "app", Tier: "pro", Floating: true, LeaseTTL: 2 * time.Hour, RenewAfter: time.Minute, FingerprintMatch: "all", Entitlements: []string{"sync"}},
	} {
		if _, err := st.PutPolicy(ctx, tenant, p); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.AddFirstLeaseKey(ctx, tenant, LeaseKey{Kid: "k1", PublicKey: []byte("pub"), SealedPrivate: []byte("sealed")}); err != nil {
		t.Fatal(err)
	}
	b, err = st.LeaseBasis(ctx, tenant, key, "app", "pro", hash(key, "pc"), "")
	if err != nil || b.Policy == nil || b.Policy.Tier != "pro" || !b.Policy.Floating || b.Policy.LeaseTTL != 2*time.Hour ||
		len(b.Policy.Entitlements) != 1 || b.Key == nil || b.Key.Kid != "k1" || string(b.Key.SealedPrivate) != "sealed" {
		t.Fatalf("basis of tier pro: %+v %+v, %v", b.Policy, b.Key, err)
	}
	b, err = st.LeaseBasis(ctx, tenant, key, "app", "basic", nil, "pc")
	if err != nil || b.Seat == nil || b.Seat.Instance != "pc" || b.Policy == nil || b.Policy.Tier != "*" {
		t.Fatalf("basis by instance, tier without a policy: %+v, %v", b, err)
	}
	for _, missing := range []struct {
		token    []byte
		instance string
	}{{hash(key, "other"), ""}, {nil, "other"}} {
		if b, err := st.LeaseBasis(ctx, tenant, key, "app", "pro", missing.token, missing.instance); err != nil || b.Seat != nil || b.Key == nil {
			t.Fatalf("basis without a seat: %+v, %v", b, err)
		}
	}
}

// A tenant's first key made by many callers at once (as replicas serving the first reads
// of its JWKS would, each on its own connection) is one key, the one every caller gets.
func TestFirstLeaseKeyIsOneUnderConcurrency(t *testing.T) {
	t.Parallel()
	st, tenant, _ := fresh(t)
	ctx := context.Background()
	const callers = 16
	got := make([]string, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			kid := fmt.Sprintf("kid-%d", i)
			k, err := st.AddFirstLeaseKey(ctx, tenant, LeaseKey{Kid: kid, PublicKey: []byte(kid), SealedPrivate: []byte(kid)})
			if err != nil || k == nil {
				t.Errorf("caller %d: %v, %v", i, k, err)
				return
			}
			got[i] = k.Kid
		})
	}
	wg.Wait()
	keys, err := st.LeaseKeys(ctx, tenant)
	if err != nil || len(keys) != 1 {
		t.Fatalf("%d keys after concurrent first keys (%v)", len(keys), err)
	}
	for i, kid := range got {
		if kid != keys[0].Kid {
			t.Errorf("caller %d got key %s, the tenant's is %s", i, kid, keys[0].Kid)
		}
	}
}

// Replicas that find the same active key unreadable at once (each its own new key) replace
// it once: one replacement wins, the old key is retiring, and the others' keys are not
// stored.
func TestAnUnreadableLeaseKeyIsReplacedOnceUnderConcurrency(t *testing.T) {
	t.Parallel()
	st, tenant, _ := fresh(t)
	ctx := context.Background()
	if _, err := st.AddFirstLeaseKey(ctx, tenant, LeaseKey{Kid: "lost", PublicKey: []byte("lost"), SealedPrivate: []byte("lost")}); err != nil {
		t.Fatal(err)
	}
	const callers = 16
	var replaced atomic.Int32
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			kid := fmt.Sprintf("kid-%d", i)
			done, err := st.ReplaceLeaseKey(ctx, tenant, "lost", LeaseKey{Kid: kid, PublicKey: []byte(kid), SealedPrivate: []byte(kid)}, time.Hour)
			if err != nil {
				t.Errorf("caller %d: %v", i, err)
			}
			if done {
				replaced.Add(1)
			}
		})
	}
	wg.Wait()
	keys, err := st.LeaseKeys(ctx, tenant)
	if err != nil || replaced.Load() != 1 || len(keys) != 2 || keys[0].Status != "active" || keys[1].Kid != "lost" || keys[1].Status != "retiring" {
		t.Fatalf("%d replacements, keys %+v (%v)", replaced.Load(), keys, err)
	}
}

// The sweeper finds seats by lease_sweep_after, which a renewal leaves as it is (so that a
// renewal is a HOT update): a seat renewed past its first lease end is not swept and,
// rescheduled, stays out of the sweeper's range; a seat whose renewal shortened its lease
// is swept at the shorter end; a seat that stopped renewing is swept. Two replicas'
// sweepers at once each take other seats.
func TestSweeperFollowsRenewalsThatKeepTheSweepColumn(t *testing.T) {
	st, tenant, key := fresh(t)
	ctx := context.Background()
	activate := func(name string, lease time.Duration) {
		t.Helper()
		change := SeatChange{Tenant: tenant, Key: key, Activate: true, Instance: name, TokenHash: hash(key, name), LeaseTTL: ttl(lease)}
		if _, err := st.ChangeSeats(ctx, []SeatChange{change}); err != nil {
			t.Fatal(err)
		}
	}
	renew := func(name string, until time.Time) {
		t.Helper()
		ok, err := st.RenewLease(ctx, LeaseRenewal{Tenant: tenant, Key: key, Instance: name, TokenHash: hash(key, name), LeaseExpiresAt: &until})
		if err != nil || !ok {
			t.Fatalf("renewal of %s: %v, %v", name, ok, err)
		}
	}
	activate("renewed", time.Second)
	activate("stopped", time.Second)
	activate("shortened", time.Hour)
	renew("renewed", time.Now().Add(time.Hour))
	renew("shortened", time.Now().Add(time.Second))
	time.Sleep(1100 * time.Millisecond)

	var mu sync.Mutex
	removed := map[string]int{}
	moved := 0
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			n, err := st.RescheduleRenewed(ctx, 10)
			if err != nil {
				t.Error(err)
			}
			lapsed, err := st.SweepLapsed(ctx, 10, time.Hour)
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			defer mu.Unlock()
			moved += n
			for _, l := range lapsed {
				removed[l.Instance]++
			}
		})
	}
	wg.Wait()
	if removed["stopped"] != 1 || removed["shortened"] != 1 || removed["renewed"] != 0 {
		t.Fatalf("sweeps removed %v; want stopped and shortened once, renewed never", removed)
	}
	if moved != 1 {
		t.Fatalf("%d seats rescheduled, want the renewed one once", moved)
	}
	if ok, _, err := st.HasSeat(ctx, tenant, key, "renewed"); err != nil || !ok {
		t.Fatalf("the renewed seat does not count after the sweep: %v", err)
	}
	// Rescheduled to its lease end, it is out of the sweeper's range until then.
	if n, err := st.RescheduleRenewed(ctx, 10); err != nil || n != 0 {
		t.Fatalf("rescheduled again: %d, %v", n, err)
	}
	var sweepAfter, leaseEnd time.Time
	if err := st.db.QueryRow(ctx, `SELECT lease_sweep_after, lease_expires_at FROM seats WHERE tenant_id = $1 AND license_key = $2 AND instance_id = 'renewed'`,
		tenant, key).Scan(&sweepAfter, &leaseEnd); err != nil || !sweepAfter.Equal(leaseEnd) {
		t.Fatalf("renewed seat's sweep at %v, lease end %v: %v", sweepAfter, leaseEnd, err)
	}
	// A renewal that makes the seat not floating takes it out of the sweeper's index.
	ok, err := st.RenewLease(ctx, LeaseRenewal{Tenant: tenant, Key: key, Instance: "renewed", TokenHash: hash(key, "renewed")})
	if err != nil || !ok {
		t.Fatalf("renewal to not floating: %v, %v", ok, err)
	}
	var stillScheduled bool
	if err := st.db.QueryRow(ctx, `SELECT lease_sweep_after IS NOT NULL FROM seats WHERE tenant_id = $1 AND license_key = $2 AND instance_id = 'renewed'`,
		tenant, key).Scan(&stillScheduled); err != nil || stillScheduled {
		t.Fatalf("a seat that is not floating is still in the sweeper's range: %v", err)
	}
}

// seatLog is evs as "activated <instance>" and "deactivated <instance> <reason> <actor>".
func seatLog(evs []*eventsv1.Event) []string {
	out := []string{}
	for _, ev := range evs {
		switch {
		case ev.GetSeatActivated() != nil:
			out = append(out, "activated "+ev.GetSeatActivated().GetInstanceId())
		case ev.GetSeatDeactivated() != nil:
			d := ev.GetSeatDeactivated()
			out = append(out, "deactivated "+d.GetInstanceId()+" "+d.GetReason()+" "+ev.GetActor().GetType())
		default:
			out = append(out, ev.GetType())
		}
	}
	return out
}

// A floating seat whose lease ran out lapses once, by the sweeper's statement, whichever
// change meets it first, in that change's transaction and before it: an activation of
// its instance that takes its place, one of another instance that takes its slot under
// the cap, the purge of its license. Each lapse is seat.deactivated with reason
// lease_expired (the system's), and its token is remembered as lapsed. A deactivation or
// a reissue finds no live seat and leaves it to its lapse, with the token it had.
// (Leases that ran out as they began stand for a seat past its lease before the sweep.)
func TestALapsedSeatLapsesOnceBeforeWhatTakesItsPlace(t *testing.T) {
	ctx := context.Background()
	db := openDB(t)
	st := New(db, nil)
	ranOut, leased := ttl(-time.Second), ttl(time.Hour)
	activate := func(tenant, key, instance, token string, lease *time.Duration, maxSeats *int32) SeatChanged {
		t.Helper()
		changed, err := st.ChangeSeats(ctx, []SeatChange{{Tenant: tenant, Key: key, ProductID: "app", Activate: true,
			Instance: instance, TokenHash: hash(key, token), MaxSeats: maxSeats, LeaseTTL: lease, RequestID: "req-" + token}})
		if err != nil {
			t.Fatal(err)
		}
		return changed[0]
	}
	created := func(c SeatChanged) bool { return c.Err == nil && !c.Already }
	lapsedToken := func(tenant, key, token string) bool {
		t.Helper()
		ok, err := st.LapsedWithin(ctx, tenant, key, hash(key, token), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	out := eventstest.Watch(t, db)
	expect := func(what string, want ...string) {
		t.Helper()
		if got := seatLog(out.Next(t)); !slices.Equal(got, want) {
			t.Errorf("%s: events %v, want %v", what, got, want)
		}
	}

	// The same instance activated again: the lapsed seat's row becomes the new seat's.
	tenant, key := ids()
	if c := activate(tenant, key, "x", "x1", ranOut, cap32(1)); !created(c) {
		t.Fatalf("first activation %+v", c)
	}
	if c := activate(tenant, key, "x", "x2", leased, cap32(1)); !created(c) {
		t.Fatalf("activation of the lapsed seat's instance %+v", c)
	}
	expect("the instance activated again", "activated x", "deactivated x lease_expired system", "activated x")
	if !lapsedToken(tenant, key, "x1") {
		t.Error("the replaced seat's token is not remembered as lapsed")
	}
	if ok, _, _ := st.HasSeat(ctx, tenant, key, "x"); !ok {
		t.Error("the new seat does not count")
	}

	// Another instance takes the cap's only slot: the lapse comes first.
	tenant, key = ids()
	activate(tenant, key, "a", "a1", ranOut, cap32(1))
	if c := activate(tenant, key, "b", "b1", leased, cap32(1)); !created(c) {
		t.Fatalf("activation over a lapsed seat at the cap %+v", c)
	}
	expect("another instance at the cap", "activated a", "deactivated a lease_expired system", "activated b")
	if !lapsedToken(tenant, key, "a1") {
		t.Error("the lapsed seat's token is not remembered as lapsed")
	}

	// Deactivations and a reissue find no live seat; the sweeper lapses it later, with the
	// token its holder has.
	tenant, key = ids()
	activate(tenant, key, "y", "y1", ranOut, nil)
	if removed, err := st.DeactivateByToken(ctx, tenant, key, hash(key, "y1")); err != nil || removed {
		t.Errorf("deactivation by the lapsed seat's token: removed %v, %v", removed, err)
	}
	if removed, err := st.DeactivateInstance(ctx, tenant, key, "app", "y", events.ReasonAdmin); err != nil || removed {
		t.Errorf("deactivation of the lapsed seat's instance: removed %v, %v", removed, err)
	}
	if ok, err := st.Reissue(ctx, tenant, key, "app", "y", hash(key, "y2")); err != nil || ok {
		t.Errorf("reissue of the lapsed seat: %v, %v", ok, err)
	}
	expect("deactivations and a reissue of a lapsed seat", "activated y")
	if _, err := st.SweepLapsed(ctx, 10, time.Hour); err != nil {
		t.Fatal(err)
	}
	expect("the sweep", "deactivated y lease_expired system")
	if !lapsedToken(tenant, key, "y1") {
		t.Error("the lapsed seat's token is not remembered as lapsed")
	}

	// A purge: the lapsed seat had gone before the license did.
	tenant, key = ids()
	activate(tenant, key, "q", "q1", leased, nil)
	activate(tenant, key, "p", "p1", ranOut, nil)
	if err := st.Purge(events.WithActor(ctx, events.ActorSystem), tenant, key, "app", time.Now()); err != nil {
		t.Fatal(err)
	}
	expect("the purge", "activated q", "activated p", "deactivated p lease_expired system", "deactivated q license_deleted system")
}
