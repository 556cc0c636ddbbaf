package keyhouse

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// A hosted server whose operator suspended the vendor's account answers 403 Tenant is
// suspended. That is the vendor's matter, not the customer's license: the stored lease
// and token are kept, the lease answers licensed until its exp and tenant_suspended after
// it, the server is asked at most once a minute, and one answer after the suspension is
// lifted licenses the app again.
func TestTenantSuspendedKeepsTheLeaseAndPacesTheRequests(t *testing.T) {
	f, srv := newFakeServer(t, "t_vendor")
	clock := &fakeClock{now: time.Now()}
	store := filepath.Join(t.TempDir(), "store.json")
	c := activated(t, srv.URL, Config{StorePath: store, Now: clock.Now})
	ctx := context.Background()
	if v := c.Check(ctx); !v.Licensed || v.Offline {
		t.Fatalf("online: %+v", v)
	}
	f.setSuspended(true)
	asked := f.count("/v1/leases")
	// Past renew_after, for ten minutes a check every second: each starts a renewal the
	// server refuses, and each is licensed from the lease.
	clock.Advance(1801 * time.Second)
	for i := range 600 {
		if v := c.Check(ctx); !v.Licensed || !v.Offline {
			t.Fatalf("check %d, suspended: %+v", i, v)
		}
		c.WaitRenewal()
		clock.Advance(time.Second)
	}
	if n := f.count("/v1/leases") - asked; n < 2 || n > 10 {
		t.Fatalf("%d lease requests in 600 checks over ten minutes, want one a minute (2 to 10)", n)
	}
	if got := storedState(t, store); got["lease"] == nil || got["token"] == nil || got["suspended_at"] == nil {
		t.Fatalf("the store after the suspension: lease %t, token %t, suspended_at %v", got["lease"] != nil, got["token"] != nil, got["suspended_at"])
	}

	// Other calls fail with tenant_suspended, at the same pace, and drop nothing.
	clock.Advance(time.Minute)
	if _, err := c.Verify(ctx); !errors.Is(err, ErrTenantSuspended) {
		t.Fatalf("verify: %v", err)
	}
	if _, err := c.TrackUsage(ctx, "users", 1); !errors.Is(err, ErrBackingOff) {
		t.Fatalf("track usage right after: %v", err)
	}
	clock.Advance(time.Minute)
	if _, err := c.TrackUsage(ctx, "users", 1); !errors.Is(err, ErrTenantSuspended) {
		t.Fatalf("track usage a minute later: %v", err)
	}
	// A restarted app keeps the pace: no request within the minute, licensed from the lease.
	asked = f.count("/v1/leases")
	restarted, err := New(Config{URL: srv.URL, ProductID: "app", Key: "KEY-1", StorePath: store, Components: map[string]string{}, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if v := restarted.Check(ctx); !v.Licensed || !v.Offline {
		t.Fatalf("restarted: %+v", v)
	}
	restarted.WaitRenewal()
	if n := f.count("/v1/leases") - asked; n != 0 {
		t.Fatalf("a restarted app asked %d times within the minute", n)
	}

	// Past the lease's exp: tenant_suspended, not expired; still one request a minute.
	clock.Advance(time.Hour)
	asked = f.count("/v1/leases")
	for i := range 120 {
		if v := c.Check(ctx); v.Licensed || v.Reason != "tenant_suspended" {
			t.Fatalf("check %d past exp: %+v", i, v)
		}
		clock.Advance(time.Second)
	}
	if n := f.count("/v1/leases") - asked; n < 1 || n > 2 {
		t.Fatalf("%d lease requests in two minutes past exp, want one a minute", n)
	}
	if got := storedState(t, store); got["lease"] == nil || got["token"] == nil {
		t.Fatal("the lease or the token was dropped")
	}

	// The suspension is lifted: the first renewal a minute after the last ask is licensed.
	f.setSuspended(false)
	clock.Advance(time.Minute)
	if v := c.Check(ctx); !v.Licensed || v.Offline {
		t.Fatalf("after the suspension was lifted: %+v", v)
	}
	if got := storedState(t, store); got["suspended_at"] != nil {
		t.Fatal("the suspension is still stored after a lease")
	}
}

// With no lease at all the verdict is tenant_suspended, not unreachable, and the checks
// in between the asks send nothing.
func TestTenantSuspendedWithNoLease(t *testing.T) {
	f, srv := newFakeServer(t, "t_vendor")
	clock := &fakeClock{now: time.Now()}
	c := activated(t, srv.URL, Config{Now: clock.Now})
	ctx := context.Background()
	f.setSuspended(true)
	for i := range 30 {
		if v := c.Check(ctx); v.Licensed || v.Reason != "tenant_suspended" {
			t.Fatalf("check %d: %+v", i, v)
		}
		clock.Advance(time.Second)
	}
	if n := f.count("/v1/leases"); n != 1 {
		t.Fatalf("%d lease requests in 30 checks, want 1", n)
	}
	f.setSuspended(false)
	clock.Advance(time.Minute)
	if v := c.Renew(ctx); !v.Licensed {
		t.Fatalf("lifted: %+v", v)
	}
}

// A floating seat whose lease ran out while suspended is seat_lapsed, as out of reach
// (the server let the seat go at its exp), reported once; the token is kept.
func TestTenantSuspendedFloatingLeaseLapses(t *testing.T) {
	f, srv := newFakeServer(t, "t_vendor")
	f.floating = true
	clock := &fakeClock{now: time.Now()}
	store := filepath.Join(t.TempDir(), "store.json")
	var mu sync.Mutex
	var lapsed []Verdict
	c := activated(t, srv.URL, Config{StorePath: store, Now: clock.Now, OnLapsed: func(v Verdict) { mu.Lock(); lapsed = append(lapsed, v); mu.Unlock() }})
	ctx := context.Background()
	if v := c.Check(ctx); !v.Licensed || !v.Floating {
		t.Fatalf("%+v", v)
	}
	f.setSuspended(true)
	clock.Advance(3601 * time.Second)
	for i := range 3 {
		if v := c.Check(ctx); v.Licensed || v.Reason != "seat_lapsed" {
			t.Fatalf("check %d: %+v", i, v)
		}
		clock.Advance(time.Minute)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(lapsed) != 1 {
		t.Fatalf("OnLapsed calls: %+v", lapsed)
	}
	if got := storedState(t, store); got["token"] == nil {
		t.Fatal("the token was dropped")
	}
}

// storedState is the store file's JSON.
func storedState(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var s map[string]any
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	return s
}
