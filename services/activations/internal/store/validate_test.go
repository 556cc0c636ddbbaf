package store

import (
	"context"
	"testing"
	"time"
)

// LiveSeats answers each seat as HasSeat does: present or not, a floating seat with its
// lease end, a lapsed one absent, another tenant's or another license's seat absent,
// in the order asked (the same seat asked twice answered twice).
func TestLiveSeatsAnswersEachSeatAsHasSeat(t *testing.T) {
	t.Parallel()
	st, tenant, key := fresh(t)
	ctx := context.Background()
	for _, c := range []SeatChange{
		{Tenant: tenant, Key: key, Activate: true, Instance: "fixed", TokenHash: hash(key, "fixed")},
		{Tenant: tenant, Key: key, Activate: true, Instance: "floating", TokenHash: hash(key, "floating"), LeaseTTL: ttl(time.Hour)},
		{Tenant: tenant, Key: key, Activate: true, Instance: "lapsed", TokenHash: hash(key, "lapsed"), LeaseTTL: ttl(time.Hour)},
	} {
		if _, err := st.ChangeSeats(ctx, []SeatChange{c}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.db.Exec(ctx, `UPDATE seats SET lease_expires_at = now() - interval '1 second' WHERE tenant_id = $1 AND license_key = $2 AND instance_id = 'lapsed'`, tenant, key); err != nil {
		t.Fatal(err)
	}
	asked := []SeatKey{
		{tenant, key, "lapsed"},
		{tenant, key, "fixed"},
		{tenant, key, "none"},
		{"other-tenant", key, "fixed"},
		{tenant, key + "X", "fixed"},
		{tenant, key, "floating"},
		{tenant, key, "fixed"},
	}
	got, err := st.LiveSeats(ctx, asked)
	if err != nil || len(got) != len(asked) {
		t.Fatalf("%d answers for %d seats: %v", len(got), len(asked), err)
	}
	present := 0
	for i, a := range asked {
		ok, ends, err := st.HasSeat(ctx, a.Tenant, a.Key, a.Instance)
		if err != nil {
			t.Fatal(err)
		}
		if got[i].Present != ok || (ends == nil) != (got[i].LeaseEnds == nil) || (ends != nil && !ends.Equal(*got[i].LeaseEnds)) {
			t.Fatalf("%v: LiveSeats %+v, HasSeat %v %v", a, got[i], ok, ends)
		}
		if ok {
			present++
		}
	}
	if present != 3 || got[5].LeaseEnds == nil {
		t.Fatalf("%d present (want fixed twice and floating), floating's lease %v", present, got[5].LeaseEnds)
	}
}
