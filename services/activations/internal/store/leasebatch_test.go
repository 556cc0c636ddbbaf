package store

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"
)

// The batch read answers each ask, in their order, exactly as LeaseBasis answers it
// alone: by token or by instance, another tenant's or license's seat not at all, a
// lapsed seat as not live, the tier's policy before the default, the tenant's own key.
func TestLeaseBasesAnswerEachAskAsLeaseBasis(t *testing.T) {
	t.Parallel()
	st, tenant, key := fresh(t)
	other, otherKey := ids()
	ctx := context.Background()
	for _, a := range []struct{ tenant, key, name string }{{tenant, key, "pc"}, {tenant, key, "laptop"}, {other, otherKey, "pc"}} {
		if _, err := st.Activate(ctx, a.tenant, a.key, a.name, hash(a.key, a.name), nil); err != nil {
			t.Fatal(err)
		}
	}
	lapsed := SeatChange{Tenant: tenant, Key: key, Activate: true, Instance: "gone", TokenHash: hash(key, "gone"), LeaseTTL: ttl(time.Millisecond)}
	if _, err := st.ChangeSeats(ctx, []SeatChange{lapsed}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutPolicy(ctx, tenant, Policy{ProductID: "app", Tier: "pro", Floating: true, LeaseTTL: time.Hour, RenewAfter: time.Minute, FingerprintMatch: "any"}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.AddFirstLeaseKey(ctx, tenant, LeaseKey{Kid: "mine", PublicKey: []byte("pub"), SealedPrivate: []byte("sealed")}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond) // "gone" lapses
	asks := []LeaseAsk{
		{Tenant: tenant, Key: key, ProductID: "app", Tier: "pro", TokenHash: hash(key, "pc")},
		{Tenant: tenant, Key: key, ProductID: "app", Tier: "basic", Instance: "laptop"},
		{Tenant: tenant, Key: key, ProductID: "app", Tier: "pro", TokenHash: hash(otherKey, "pc")}, // another tenant's token
		{Tenant: other, Key: otherKey, ProductID: "app", Tier: "pro", TokenHash: hash(otherKey, "pc")},
		{Tenant: tenant, Key: key, ProductID: "app", Tier: "pro", TokenHash: hash(key, "gone")},
		{Tenant: tenant, Key: key, ProductID: "app", Tier: "pro", TokenHash: hash(key, "pc")}, // the same seat twice
		{Tenant: tenant, Key: key, ProductID: "app", Tier: "pro", Instance: "nobody"},
	}
	got, err := st.LeaseBases(ctx, asks)
	if err != nil || len(got) != len(asks) {
		t.Fatalf("%d bases for %d asks: %v", len(got), len(asks), err)
	}
	for i, a := range asks {
		alone, err := st.LeaseBasis(ctx, a.Tenant, a.Key, a.ProductID, a.Tier, a.TokenHash, a.Instance)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got[i], alone) {
			t.Errorf("ask %d: batch %+v, alone %+v", i, got[i], alone)
		}
	}
	if got[0].Seat == nil || got[0].Policy == nil || got[0].Key == nil || got[1].Seat == nil || got[1].Seat.Instance != "laptop" ||
		got[2].Seat != nil || got[3].Seat == nil || got[3].Key != nil || got[4].Seat == nil || got[4].Seat.Live || got[6].Seat != nil {
		t.Fatalf("bases: %+v", got)
	}
}

// A batch of renewals moves each live seat whose token and binding are as its caller saw
// them, in one statement, and reports each: a lapsed seat is not revived, a wrong token or
// a binding changed meanwhile is not applied, and a seat renewed twice in one batch once.
func TestRenewLeasesAppliesEachAsRenewLease(t *testing.T) {
	t.Parallel()
	st, tenant, key := fresh(t)
	ctx := context.Background()
	for _, name := range []string{"a", "b", "bound", "gone"} {
		lease := time.Hour
		if name == "gone" {
			lease = time.Millisecond
		}
		change := SeatChange{Tenant: tenant, Key: key, Activate: true, Instance: name, TokenHash: hash(key, name), LeaseTTL: ttl(lease)}
		if _, err := st.ChangeSeats(ctx, []SeatChange{change}); err != nil {
			t.Fatal(err)
		}
	}
	machine := map[string]string{"cpu": "x"}
	if ok, err := st.RenewLease(ctx, LeaseRenewal{Tenant: tenant, Key: key, Instance: "bound", TokenHash: hash(key, "bound"), Bind: machine, LeaseExpiresAt: ptr(time.Now().Add(time.Hour))}); err != nil || !ok {
		t.Fatalf("binding: %v, %v", ok, err)
	}
	time.Sleep(5 * time.Millisecond)
	until := time.Now().Add(2 * time.Hour).Truncate(time.Second)
	renewal := func(name string, token []byte, seen map[string]string) LeaseRenewal {
		return LeaseRenewal{Tenant: tenant, Key: key, Instance: name, TokenHash: token, SeenComponents: seen, LeaseExpiresAt: &until, ProductID: "app"}
	}
	batch := []LeaseRenewal{
		renewal("a", hash(key, "a"), nil),
		renewal("b", hash(key, "a"), nil),         // another seat's token
		renewal("bound", hash(key, "bound"), nil), // seen unbound, it is bound
		renewal("gone", hash(key, "gone"), nil),   // lapsed
		renewal("a", hash(key, "a"), nil),         // twice in one batch
		renewal("bound", hash(key, "bound"), machine),
	}
	got, err := st.RenewLeases(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	want := []bool{true, false, false, false, false, true}
	if got[0] && got[4] {
		t.Fatal("one seat renewed twice by one batch")
	}
	if got[4] { // either of the two may be the one applied
		want[0], want[4] = false, true
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("renewed %v, want %v", got, want)
	}
	seats, err := st.SeatLeases(ctx, tenant, key)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range seats {
		renewedTo := s.LeaseExpiresAt != nil && s.LeaseExpiresAt.Equal(until)
		if renewedTo != (s.Instance == "a" || s.Instance == "bound") {
			t.Errorf("seat %s leased until %v", s.Instance, s.LeaseExpiresAt)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// Invariant 11 with batched renewals: batches of renewals on many connections (as from
// many replicas' batches) beside activations, while seats lapse, never leave more live
// seats than the cap.
func TestFloatingCapHoldsUnderBatchedRenewals(t *testing.T) {
	st, tenant, key := fresh(t)
	ctx := context.Background()
	const limit = 3
	var worst int
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		for {
			var n int
			if err := st.db.QueryRow(ctx, `SELECT count(*) FROM seats WHERE tenant_id = $1 AND license_key = $2 AND `+liveSeat, tenant, key).Scan(&n); err != nil {
				t.Error(err)
				return
			}
			worst = max(worst, n)
			select {
			case <-stop:
				return
			default:
			}
		}
	})
	var clients sync.WaitGroup
	for c := range 12 {
		clients.Go(func() {
			var held []string
			for round := range 8 {
				name := fmt.Sprintf("%d-%d", c, round)
				change := SeatChange{Tenant: tenant, Key: key, Activate: true, Instance: name, TokenHash: hash(key, name), LeaseTTL: ttl(300 * time.Millisecond), MaxSeats: cap32(limit)}
				if _, err := st.ChangeSeats(ctx, []SeatChange{change}); err != nil {
					t.Error(err)
					return
				}
				held = append(held, name)
				// Renew every seat this client ever held, lapsed or not, in one batch with
				// a lease so short it lapses while others activate.
				until := time.Now().Add(300 * time.Millisecond)
				var batch []LeaseRenewal
				for _, h := range held {
					batch = append(batch, LeaseRenewal{Tenant: tenant, Key: key, Instance: h, TokenHash: hash(key, h), LeaseExpiresAt: &until})
				}
				if _, err := st.RenewLeases(ctx, batch); err != nil {
					t.Error(err)
				}
				time.Sleep(40 * time.Millisecond)
			}
		})
	}
	clients.Wait()
	close(stop)
	sampler.Wait()
	if worst > limit {
		t.Fatalf("%d live seats on a license of cap %d", worst, limit)
	}
}

// An activation with a tier follows the lease policy in force when its statement runs:
// the tier's before the product's default, floating only when that policy is, for its
// lease_ttl; a tier without a policy of its own follows the default; no tier, no policy
// and a non-floating policy make a seat that does not float.
func TestActivationFollowsTheLeasePolicyOfItsTier(t *testing.T) {
	t.Parallel()
	st, tenant, key := fresh(t)
	ctx := context.Background()
	for _, p := range []Policy{
		{ProductID: "app", Tier: "*", Floating: true, LeaseTTL: 2 * time.Hour, RenewAfter: time.Minute, FingerprintMatch: "none"},
		{ProductID: "app", Tier: "pro", Floating: true, LeaseTTL: time.Hour, RenewAfter: time.Minute, FingerprintMatch: "none"},
		{ProductID: "app", Tier: "fixed", Floating: false, LeaseTTL: time.Hour, RenewAfter: time.Minute, FingerprintMatch: "none"},
	} {
		if _, err := st.PutPolicy(ctx, tenant, p); err != nil {
			t.Fatal(err)
		}
	}
	tier := func(s string) *string { return &s }
	cases := []struct {
		name, product string
		tier          *string
		lease         time.Duration // 0: not floating
	}{
		{"pro", "app", tier("pro"), time.Hour},
		{"basic", "app", tier("basic"), 2 * time.Hour},
		{"fixed", "app", tier("fixed"), 0},
		{"untiered", "app", nil, 0},
		{"other-product", "other", tier("pro"), 0},
	}
	for _, c := range cases {
		change := SeatChange{Tenant: tenant, Key: key, ProductID: c.product, Activate: true, Instance: c.name, TokenHash: hash(key, c.name), Tier: c.tier}
		if changed, err := st.ChangeSeats(ctx, []SeatChange{change}); err != nil || changed[0].Err != nil {
			t.Fatalf("%s: %v %+v", c.name, err, changed)
		}
		var lease *time.Duration
		if err := st.db.QueryRow(ctx, `SELECT extract(epoch FROM lease_expires_at - activated_at)::float8 * interval '1 second'
			FROM seats WHERE tenant_id = $1 AND license_key = $2 AND instance_id = $3`, tenant, key, c.name).Scan(&lease); err != nil {
			t.Fatal(err)
		}
		switch {
		case c.lease == 0 && lease != nil:
			t.Errorf("%s: leased for %v, want not floating", c.name, *lease)
		case c.lease != 0 && (lease == nil || (*lease-c.lease).Abs() > time.Minute):
			t.Errorf("%s: leased for %v, want %v", c.name, lease, c.lease)
		}
	}
}
