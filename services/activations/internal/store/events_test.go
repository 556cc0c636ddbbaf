package store

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/pkg/events"
	"github.com/keyhouse/keyhouse/pkg/events/eventstest"
	eventsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/events/v1"
)

// Every writing method of the store emits its events of addendum §11 in its transaction,
// and only for what changed; the table lists each with what it must emit, and every
// other method is listed as emitting nothing, so a new method cannot go undecided.
func TestEveryWriteEmitsItsEvent(t *testing.T) {
	ctx := context.Background()
	db := openDB(t)
	s := New(db, nil)
	tenant, key := ids()
	activate := func(instance string) SeatChange {
		return SeatChange{Tenant: tenant, Key: key, ProductID: "app", Activate: true, Instance: instance, TokenHash: hash(key, instance), RequestID: "req-" + instance}
	}
	writes := []struct {
		method string
		run    func(t *testing.T) error
		want   []string
	}{
		{"ChangeSeats activate", func(*testing.T) error {
			_, err := s.ChangeSeats(ctx, []SeatChange{activate("a"), activate("b"), activate("c")})
			return err
		}, []string{events.TypeSeatActivated, events.TypeSeatActivated, events.TypeSeatActivated}},
		{"ChangeSeats activate again (nothing changes)", func(*testing.T) error {
			_, err := s.ChangeSeats(ctx, []SeatChange{activate("a")})
			return err
		}, nil},
		{"ChangeSeats deactivate", func(*testing.T) error {
			_, err := s.ChangeSeats(ctx, []SeatChange{{Tenant: tenant, Key: key, ProductID: "app", TokenHash: hash(key, "a")},
				{Tenant: tenant, Key: key, ProductID: "app", TokenHash: hash(key, "nobody")}})
			return err
		}, []string{events.TypeSeatDeactivated}},
		{"Reissue", func(*testing.T) error {
			_, err := s.Reissue(ctx, tenant, key, "app", "b", hash(key, "b2"))
			return err
		}, []string{events.TypeSeatTokenReissued}},
		{"Reissue of no seat", func(*testing.T) error {
			_, err := s.Reissue(ctx, tenant, key, "app", "zz", hash(key, "zz"))
			return err
		}, nil},
		{"AddUsages below, onto and past the limit", func(*testing.T) error {
			inc := Increment{Tenant: tenant, Key: key, ProductID: "app", TokenHash: hash(key, "c"), Metric: "api_calls", Inc: 2, Limit: 4, Allowed: true}
			_, err := s.AddUsages(ctx, []Increment{inc, inc, inc})
			return err
		}, []string{events.TypeUsageLimitReached}},
		{"AddUsageOnce onto the limit, then its retry", func(*testing.T) error {
			inc := Increment{Tenant: tenant, Key: key, ProductID: "app", TokenHash: hash(key, "c"), Metric: "seats", Inc: 3, Limit: 3, Allowed: true}
			answer := func(Added) ([]byte, error) { return []byte(`{}`), nil }
			for range 2 {
				if _, err := s.AddUsageOnce(ctx, "idem-"+key, []byte("hash"), inc, answer); err != nil {
					return err
				}
			}
			return nil
		}, []string{events.TypeUsageLimitReached}},
		{"ResetUsage", func(*testing.T) error {
			_, err := s.ResetUsage(ctx, tenant, key, "app", nil)
			return err
		}, []string{events.TypeUsageReset}},
		{"ResetUsage with no total above 0 (nothing changes)", func(*testing.T) error {
			_, err := s.ResetUsage(ctx, tenant, key, "app", nil)
			return err
		}, nil},
		{"ResetUsage of a metric never used (nothing changes; the answer lists it at 0)", func(t *testing.T) error {
			metric := "api_calls"
			u, err := s.ResetUsage(ctx, tenant, key, "app", &metric)
			if v, ok := u[metric]; err == nil && (!ok || v != 0) {
				t.Errorf("usage after the reset %v", u)
			}
			return err
		}, nil},
		{"ResetUsage of a metric at 0 (nothing changes)", func(*testing.T) error {
			metric := "api_calls"
			_, err := s.ResetUsage(ctx, tenant, key, "app", &metric)
			return err
		}, nil},
		{"ResetUsage of a metric above 0", func(*testing.T) error {
			metric := "api_calls"
			inc := Increment{Tenant: tenant, Key: key, ProductID: "app", TokenHash: hash(key, "c"), Metric: metric, Inc: 1, Limit: 100, Allowed: true}
			if _, err := s.AddUsages(ctx, []Increment{inc}); err != nil {
				return err
			}
			_, err := s.ResetUsage(ctx, tenant, key, "app", &metric)
			return err
		}, []string{events.TypeUsageReset}},
		{"DeactivateInstance", func(*testing.T) error {
			_, err := s.DeactivateInstance(ctx, tenant, key, "app", "b", events.ReasonAdmin)
			return err
		}, []string{events.TypeSeatDeactivated}},
		{"DeactivateInstance of no seat", func(*testing.T) error {
			_, err := s.DeactivateInstance(ctx, tenant, key, "app", "b", events.ReasonAdmin)
			return err
		}, nil},
		{"SweepLapsed of a floating seat whose lease ran out", func(*testing.T) error {
			lapsed := -time.Second
			f := activate("f")
			f.LeaseTTL = &lapsed
			if _, err := s.ChangeSeats(ctx, []SeatChange{f}); err != nil {
				return err
			}
			_, err := s.SweepLapsed(ctx, 10, time.Hour)
			return err
		}, []string{events.TypeSeatActivated, events.TypeSeatDeactivated}},
		{"RenewLease (a renewal is no event)", func(*testing.T) error {
			_, err := s.RenewLease(ctx, LeaseRenewal{Tenant: tenant, Key: key, ProductID: "app", Instance: "c", TokenHash: hash(key, "c")})
			return err
		}, nil},
		{"RenewLeases (renewals are no events)", func(*testing.T) error {
			_, err := s.RenewLeases(ctx, []LeaseRenewal{{Tenant: tenant, Key: key, ProductID: "app", Instance: "c", TokenHash: hash(key, "c")}})
			return err
		}, nil},
		{"RenewLease of a reinstall (a new token)", func(*testing.T) error {
			_, err := s.RenewLease(ctx, LeaseRenewal{Tenant: tenant, Key: key, ProductID: "app", Instance: "c", TokenHash: hash(key, "c"), NewTokenHash: hash(key, "c2")})
			return err
		}, []string{events.TypeSeatTokenReissued}},
		{"RotateLeaseKey", func(*testing.T) error {
			if _, err := s.AddFirstLeaseKey(ctx, tenant, LeaseKey{Kid: "k1-" + key, PublicKey: []byte("pub1"), SealedPrivate: []byte("sealed1")}); err != nil {
				return err
			}
			_, err := s.RotateLeaseKey(ctx, "", nil, tenant, LeaseKey{Kid: "k2-" + key, PublicKey: []byte("pub2"), SealedPrivate: []byte("sealed2")}, time.Hour,
				func(*LeaseKey) ([]byte, error) { return nil, nil })
			return err
		}, []string{events.TypeLeaseKeyRotated}},
		{"ReplaceLeaseKey (a key that no longer opens, replaced as a rotation)", func(t *testing.T) error {
			replaced, err := s.ReplaceLeaseKey(ctx, tenant, "k2-"+key, LeaseKey{Kid: "k3-" + key, PublicKey: []byte("pub3"), SealedPrivate: []byte("sealed3")}, time.Hour)
			if err == nil && !replaced {
				t.Error("the active key was not replaced")
			}
			return err
		}, []string{events.TypeLeaseKeyRotated}},
		{"ReplaceLeaseKey of a key another replica replaced already", func(t *testing.T) error {
			replaced, err := s.ReplaceLeaseKey(ctx, tenant, "k2-"+key, LeaseKey{Kid: "k4-" + key, PublicKey: []byte("pub4"), SealedPrivate: []byte("sealed4")}, time.Hour)
			if err == nil && replaced {
				t.Error("a key no longer active was replaced again")
			}
			if active, _ := s.ActiveLeaseKey(ctx, tenant); active == nil || active.Kid != "k3-"+key {
				t.Errorf("active key %+v, want k3", active)
			}
			return err
		}, nil},
		{"Purge", func(*testing.T) error { return s.Purge(ctx, tenant, key, "app", time.Now()) }, []string{events.TypeSeatDeactivated}},
		{"Purge again", func(*testing.T) error { return s.Purge(ctx, tenant, key, "app", time.Now()) }, nil},
	}
	out := eventstest.Watch(t, db)
	var all []*eventsv1.Event
	for _, w := range writes {
		if err := w.run(t); err != nil {
			t.Fatalf("%s: %v", w.method, err)
		}
		got := out.Next(t)
		if !slices.Equal(eventstest.Types(got), w.want) {
			t.Errorf("%s emitted %v, want %v", w.method, eventstest.Types(got), w.want)
		}
		all = append(all, got...)
	}
	// The data names the seat and why it went; a client's change carries its request id.
	var reasons []string
	for _, ev := range all {
		if d := ev.GetSeatDeactivated(); d != nil {
			reasons = append(reasons, d.GetInstanceId()+":"+d.GetReason())
		}
		if ev.GetTenantId() != tenant || (ev.GetLeaseKeyRotated() == nil && events.LicenseKey(ev) != key) {
			t.Errorf("event %v is not the license's", ev)
		}
	}
	if want := []string{"a:client", "b:admin", "f:lease_expired", "c:license_deleted"}; !slices.Equal(reasons, want) {
		t.Errorf("seat.deactivated reasons %v, want %v", reasons, want)
	}
	if a := all[0].GetActor(); a.GetType() != events.ActorClient || a.GetRequestId().GetValue() != "req-a" {
		t.Errorf("activation's actor %v", a)
	}
	if d := all[5].GetUsageLimitReached(); d.GetUsed() != 4 || d.GetLimit() != 4 || d.GetMetric() != "api_calls" {
		t.Errorf("limit reached %v", d)
	}
	eventstest.RequireListed(t, s,
		[]string{"ChangeSeats", "Activate", "DeactivateByToken", "DeactivateInstance", "Reissue", "AddUsage", "AddUsages", "AddUsageOnce", "ResetUsage", "Purge",
			"SweepLapsed", "RenewLease", "RenewLeases", "RotateLeaseKey", "ReplaceLeaseKey"},
		// PurgeCommits forgets the bookkeeping of usage changes (commit.go), no change of §11.
		[]string{"HasSeat", "LiveSeats", "Usage", "Seats", "Recent", "CountSeats", "Summaries", "SeatsForKeys", "PurgeCommits",
			// Reads of leases, and the writes of them that addendum §11 does not list: policies,
			// a tenant's first lease key, retired keys' removal.
			"ActiveLeaseKey", "LapsedWithin", "LeaseBasis", "LeaseBases", "LeaseKeys", "LongestLeaseTTL", "Policies", "Policy", "PolicyFor",
			"SeatLeases", "PutPolicy", "DeletePolicy", "AddFirstLeaseKey", "RemoveRetiredLeaseKeys",
			// The sweeper's bookkeeping of when to look at a floating seat again.
			"RescheduleRenewed",
			// The starting usage of imported licenses: part of the import, whose event is
			// licensing's license.issued; addendum §11 has no usage event for it.
			"ImportUsage"})
}

// A change whose transaction fails after the write leaves no event; an event that cannot
// be written takes its change with it.
func TestNoEventWithoutItsChangeAndNoChangeWithoutItsEvent(t *testing.T) {
	ctx := context.Background()
	db := openDB(t)
	s := New(db, nil)
	tenant, key := ids()
	if _, err := s.Activate(ctx, tenant, key, "a", hash(key, "a"), nil); err != nil {
		t.Fatal(err)
	}
	out := eventstest.Watch(t, db)
	// The outbox refuses the event (a trigger stands in for any failure of its insert).
	if _, err := db.Exec(ctx, `CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'outbox refused'; END $$;
		CREATE TRIGGER refuse BEFORE INSERT ON outbox FOR EACH ROW EXECUTE FUNCTION refuse()`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeactivateInstance(ctx, tenant, key, "app", "a", events.ReasonAdmin); err == nil {
		t.Fatal("seat removed without its event")
	}
	if _, err := s.ChangeSeats(ctx, []SeatChange{{Tenant: tenant, Key: key, Activate: true, Instance: "b", TokenHash: hash(key, "b")}}); err == nil {
		t.Fatal("seat created without its event")
	}
	if seats, err := s.Seats(ctx, tenant, key); err != nil || len(seats) != 1 || seats[0].InstanceID != "a" {
		t.Fatalf("seats %v, %v: a change committed without its event", seats, err)
	}
	// A failure after the write (the commit refused by a deferred check) leaves no event.
	if _, err := db.Exec(ctx, `DROP TRIGGER refuse ON outbox;
		CREATE CONSTRAINT TRIGGER refuse_commit AFTER DELETE ON seats DEFERRABLE INITIALLY DEFERRED
		FOR EACH ROW EXECUTE FUNCTION refuse()`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeactivateInstance(ctx, tenant, key, "app", "a", events.ReasonAdmin); err == nil {
		t.Fatal("the commit was refused, yet the call succeeded")
	} else if errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if evs := out.Next(t); len(evs) != 0 {
		t.Fatalf("rolled back changes left events %v", eventstest.Types(evs))
	}
}
