package ingest

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/keyhouse/keyhouse/devinfra/testkit"
	"github.com/keyhouse/keyhouse/pkg/events"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
	"github.com/keyhouse/keyhouse/pkg/tenantpurge"
	eventsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/events/v1"
	"github.com/keyhouse/keyhouse/services/events/internal/store"
	"github.com/keyhouse/keyhouse/services/events/migrations"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func TestMain(m *testing.M) { testkit.Main(m) }

var schema = testkit.Template{Name: "events", Migrate: pgxx.Migrations{Schema: "events", FS: migrations.FS}.Apply}

func newStore(t testing.TB) *store.Store {
	t.Helper()
	db, err := pgxx.Open(context.Background(), testkit.DatabaseURL(t, schema), "events")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	return store.New(db)
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func stamped(ev *eventsv1.Event, at time.Time) *eventsv1.Event {
	ev.Id, ev.CreatedAt, ev.Actor = events.NewID(), timestamppb.New(at), events.Actor(events.ActorAdmin, "")
	return ev
}

type fanout struct {
	stored, committed atomic.Int32
	fail              error
	writesNothing     bool // no endpoint subscribes to the events
}

func (f *fanout) Stored(_ context.Context, _ pgx.Tx, evs []Stored) (bool, error) {
	f.stored.Add(int32(len(evs)))
	return !f.writesNothing && len(evs) > 0, f.fail
}
func (f *fanout) Committed(evs []Stored) { f.committed.Add(int32(len(evs))) }

// An event delivered many times at once (redeliveries, a relay's re-publish, two
// replicas) is stored once, and the fan-out runs once; a fan-out failure stores nothing,
// so the redelivery does it all.
func TestAnEventIsStoredOnceHoweverOftenItArrives(t *testing.T) {
	st := newStore(t)
	f := &fanout{}
	in := New(st, quiet, WithFanout(f))
	ev := stamped(events.LicenseRevoked("t1", "K-1", "app"), time.Now())
	var fresh atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			ok, err := in.Store(context.Background(), ev)
			if err != nil {
				t.Error(err)
			}
			if ok {
				fresh.Add(1)
			}
		})
	}
	wg.Wait()
	if fresh.Load() != 1 || f.stored.Load() != 1 || f.committed.Load() != 1 {
		t.Fatalf("stored fresh %d times, fan-out %d/%d", fresh.Load(), f.stored.Load(), f.committed.Load())
	}
	got, err := st.Get(context.Background(), "t1", ev.Id)
	want, _ := events.JSON(ev)
	if err != nil || string(got.Body) != string(want) || got.LicenseKey != "K-1" {
		t.Fatalf("%+v %v", got, err)
	}
	if _, err := st.Get(context.Background(), "t2", ev.Id); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("another tenant's event: %v", err)
	}

	f.fail = errors.New("deliveries table down")
	other := stamped(events.LicenseRevoked("t1", "K-2", "app"), time.Now())
	if _, err := in.Store(context.Background(), other); err == nil {
		t.Fatal("a failed fan-out was stored")
	}
	if _, err := st.Get(context.Background(), "t1", other.Id); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("event stored without its fan-out: %v", err)
	}
}

// The log lists newest first, pages by starting_after without gaps or repeats, filters
// by type (exact, prefix), license and time, and only in the tenant.
func TestListPagesAndFilters(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	in := New(st, quiet)
	base := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	var ids []string
	for i := range 10 {
		ev := events.LicenseNotesUpdated("t1", "K-1", "app")
		if i%3 == 0 {
			ev = events.SeatActivated("t1", "K-2", "app", "host")
		}
		ev = stamped(ev, base.Add(time.Duration(i)*time.Minute))
		if _, err := in.Store(ctx, ev); err != nil {
			t.Fatal(err)
		}
		ids = append([]string{ev.Id}, ids...) // newest first
	}
	if _, err := in.Store(ctx, stamped(events.LicenseNotesUpdated("t2", "K-9", "app"), base)); err != nil {
		t.Fatal(err)
	}
	var paged []string
	f := store.Filter{Limit: 4}
	for {
		page, more, err := st.List(ctx, "t1", f)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page {
			paged = append(paged, e.ID)
		}
		if !more {
			break
		}
		f.StartingAfter = page[len(page)-1].ID
	}
	if len(paged) != 10 || paged[0] != ids[0] || paged[9] != ids[9] {
		t.Fatalf("pages %v\nwant  %v", paged, ids)
	}
	count := func(f store.Filter) int {
		f.Limit = 100
		page, _, err := st.List(ctx, "t1", f)
		if err != nil {
			t.Fatal(err)
		}
		return len(page)
	}
	for name, tc := range map[string]struct {
		f    store.Filter
		want int
	}{
		"exact type":      {store.Filter{Type: events.TypeSeatActivated}, 4},
		"prefix":          {store.Filter{Type: "license."}, 6},
		"license":         {store.Filter{LicenseKey: "K-2"}, 4},
		"since":           {store.Filter{Since: base.Add(8 * time.Minute)}, 2},
		"until":           {store.Filter{Until: base.Add(time.Minute)}, 2},
		"window and type": {store.Filter{Since: base.Add(2 * time.Minute), Until: base.Add(6 * time.Minute), Type: "seat."}, 2},
		// Bounds are inclusive at any precision: created_at holds microseconds.
		"since 1ns after an event":   {store.Filter{Since: base.Add(8*time.Minute + time.Nanosecond)}, 1},
		"since 999ns after an event": {store.Filter{Since: base.Add(8*time.Minute + 999*time.Nanosecond)}, 1},
		"since 1ns before an event":  {store.Filter{Since: base.Add(8*time.Minute - time.Nanosecond)}, 2},
		"until 999ns after an event": {store.Filter{Until: base.Add(time.Minute + 999*time.Nanosecond)}, 2},
		"until 1ns before an event":  {store.Filter{Until: base.Add(time.Minute - time.Nanosecond)}, 1},
	} {
		if got := count(tc.f); got != tc.want {
			t.Errorf("%s: %d events, want %d", name, got, tc.want)
		}
	}
	if _, _, err := st.List(ctx, "t2", store.Filter{Limit: 5, StartingAfter: ids[0]}); !errors.Is(err, store.ErrUnknownCursor) {
		t.Fatalf("another tenant's cursor: %v", err)
	}
}

// The log lists events in the order they reached it, not by created_at: an event created
// earlier that arrives later is listed above the ones before it. Its position is taken
// under the log's append lock, held until the storing transaction ends, so a transaction
// that would store an event while another's are uncommitted waits for it: no reader sees
// an event above one that is still to appear (docs/events.md, "Following the log"). The
// events of one batch take their positions in created_at order.
func TestTheLogListsInTheOrderEventsReachedIt(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	in := New(st, quiet)
	base := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)
	list := func() []string {
		t.Helper()
		page, _, err := st.List(ctx, "t1", store.Filter{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		ids := make([]string, len(page))
		for i, e := range page {
			ids[i] = e.ID
		}
		return ids
	}
	early := stamped(events.LicenseRevoked("t1", "K-1", "app"), base.Add(time.Minute))
	late := stamped(events.LicenseReactivated("t1", "K-1", "app"), base.Add(2*time.Minute))
	// One batch, out of created_at order: the earlier event is first.
	if _, err := in.StoreAll(ctx, []*eventsv1.Event{late, early}); err != nil {
		t.Fatal(err)
	}
	// Created before both, arrived after: listed above them.
	straggler := stamped(events.LicenseNotesUpdated("t1", "K-1", "app"), base)
	if _, err := in.Store(ctx, straggler); err != nil {
		t.Fatal(err)
	}
	if got, want := list(), []string{straggler.Id, late.Id, early.Id}; !slices.Equal(got, want) {
		t.Fatalf("listed %v, want %v (newest arrival first)", got, want)
	}
	page, _, err := st.List(ctx, "t1", store.Filter{Limit: 100, StartingAfter: straggler.Id})
	if err != nil || len(page) != 2 || page[0].ID != late.Id {
		t.Fatalf("after the straggler: %v %v", page, err)
	}
	// since and until still bound created_at, the straggler's too (it came late: its
	// place is far past its time).
	for _, tc := range []struct {
		f    store.Filter
		want []string
	}{
		{store.Filter{Until: base}, []string{straggler.Id}},
		{store.Filter{Until: base.Add(time.Minute)}, []string{straggler.Id, early.Id}},
		{store.Filter{Since: base.Add(90 * time.Second)}, []string{late.Id}},
		{store.Filter{Since: base, Until: base.Add(time.Minute)}, []string{straggler.Id, early.Id}},
		{store.Filter{Until: base.Add(time.Minute), StartingAfter: straggler.Id}, []string{early.Id}},
		{store.Filter{Since: base.Add(time.Minute), StartingAfter: late.Id}, []string{early.Id}},
	} {
		tc.f.Limit = 100
		page, _, err := st.List(ctx, "t1", tc.f)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range page {
			got = append(got, e.ID)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%+v: listed %v, want %v", tc.f, got, tc.want)
		}
	}

	// A transaction that took its positions and has not ended yet holds back the next.
	tx, err := st.DB().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	held := stamped(events.SeatActivated("t1", "K-1", "app", "h1"), base.Add(3*time.Minute))
	body, _ := events.JSON(held)
	if _, err := store.InsertAll(ctx, tx, []store.Event{{ID: held.Id, TenantID: "t1", Type: held.Type, LicenseKey: "K-1", CreatedAt: held.CreatedAt.AsTime(), Body: body}}); err != nil {
		t.Fatal(err)
	}
	next := stamped(events.SeatActivated("t1", "K-1", "app", "h2"), base.Add(4*time.Minute))
	stored := make(chan error, 1)
	go func() { _, err := in.Store(ctx, next); stored <- err }()
	select {
	case err := <-stored:
		t.Fatalf("stored while an earlier position was uncommitted (%v): a reader could list it above one still to appear", err)
	case <-time.After(300 * time.Millisecond):
	}
	if got := list(); len(got) != 3 {
		t.Fatalf("listed %v while both were uncommitted", got)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-stored; err != nil {
		t.Fatal(err)
	}
	if got, want := list()[:2], []string{next.Id, held.Id}; !slices.Equal(got, want) {
		t.Fatalf("listed %v first, want %v", got, want)
	}
}

// Retention deletes what is older than the cutoff, and only that.
func TestRetentionDeletesOnlyOldEvents(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	in := New(st, quiet)
	now := time.Now()
	old := stamped(events.Ping("t1"), now.Add(-91*24*time.Hour))
	fresh := stamped(events.Ping("t1"), now.Add(-89*24*time.Hour))
	for _, ev := range []*eventsv1.Event{old, fresh} {
		if _, err := in.Store(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		Retain(rctx, st, 90*24*time.Hour, time.Hour, func() time.Time { return now }, quiet)
		close(done)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := st.Get(ctx, "t1", old.Id); errors.Is(err, store.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the old event is still there")
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	<-done
	if _, err := st.Get(ctx, "t1", fresh.Id); err != nil {
		t.Fatalf("a recent event went: %v", err)
	}
}

// tenant.deleted purges the tenant's log and is not logged itself; an event of the tenant
// that arrives afterwards (a slower relay) is dropped; other tenants keep theirs.
func TestTenantDeletedForgetsTheTenantsLogAndDropsItsLateEvents(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	in := New(st, quiet)
	kept := stamped(events.LicenseRevoked("t2", "K-2", "app"), time.Now())
	gone := stamped(events.LicenseRevoked("t1", "K-1", "app"), time.Now())
	for _, ev := range []*eventsv1.Event{kept, gone} {
		if _, err := in.Store(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 { // a redelivery changes nothing
		if fresh, err := in.Store(ctx, stamped(events.TenantDeleted("t1"), time.Now())); err != nil || fresh {
			t.Fatalf("tenant.deleted: fresh %v, %v", fresh, err)
		}
	}
	late := stamped(events.LicenseNotesUpdated("t1", "K-1", "app"), time.Now())
	if fresh, err := in.Store(ctx, late); err != nil || fresh {
		t.Fatalf("a late event of a deleted tenant: fresh %v, %v", fresh, err)
	}
	var left int
	if err := st.DB().QueryRow(ctx, `SELECT count(*) FROM events WHERE tenant_id = 't1'`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d events of the deleted tenant left, %v", left, err)
	}
	if _, err := st.Get(ctx, "t2", kept.Id); err != nil {
		t.Fatalf("another tenant's event: %v", err)
	}
}

// A batch holding events of several tenants takes every tenant's shared lock: one whose
// purge is under way makes the batch wait, and once the purge commits its events are
// dropped while the other tenants' are stored.
func TestABatchThatWaitedForAPurgeDropsOnlyThePurgedTenantsEvents(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	in := New(st, quiet)
	purge, err := st.DB().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer purge.Rollback(ctx)
	if err := tenantpurge.ForgetInTx(ctx, purge, "t-purged"); err != nil {
		t.Fatal(err)
	}
	batch := []*eventsv1.Event{
		stamped(events.LicenseRevoked("t-b", "K-B", "app"), time.Now()),
		stamped(events.LicenseRevoked("t-purged", "K-P", "app"), time.Now()),
		stamped(events.LicenseRevoked("t-a", "K-A", "app"), time.Now()),
	}
	type result struct {
		fresh []Stored
		err   error
	}
	done := make(chan result, 1)
	go func() {
		fresh, err := in.StoreAll(ctx, batch)
		done <- result{fresh, err}
	}()
	// The batch waits for the purge's lock before it reads the tombstones.
	for waiting := false; !waiting; {
		select {
		case r := <-done:
			t.Fatalf("the batch was stored (%d events, %v) while the purge held its tenant's lock", len(r.fresh), r.err)
		default:
		}
		if err := st.DB().QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted)`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
	}
	if err := purge.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	var stored []string
	for _, s := range r.fresh {
		stored = append(stored, s.Event.GetTenantId())
	}
	if len(stored) != 2 || stored[0] != "t-b" || stored[1] != "t-a" {
		t.Fatalf("stored the events of %v; want t-b's and t-a's, in the batch's order", stored)
	}
	var left int
	if err := st.DB().QueryRow(ctx, `SELECT count(*) FROM events WHERE tenant_id = 't-purged'`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d events of the purged tenant stored, %v", left, err)
	}
}

// A fan-out that wrote nothing for the stored events (no endpoint subscribes to them) is
// not told of the commit: a tenant without webhooks wakes no delivery worker.
func TestAFanOutThatWroteNothingIsNotToldOfTheCommit(t *testing.T) {
	st := newStore(t)
	f := &fanout{writesNothing: true}
	in := New(st, quiet, WithFanout(f))
	for _, ev := range []*eventsv1.Event{
		stamped(events.LicenseRevoked("t1", "K-1", "app"), time.Now()),
		stamped(events.LicenseRevoked("t1", "K-2", "app"), time.Now()),
	} {
		if ok, err := in.Store(context.Background(), ev); !ok || err != nil {
			t.Fatalf("stored %v, %v", ok, err)
		}
	}
	if f.stored.Load() != 2 || f.committed.Load() != 0 {
		t.Fatalf("fan-out given %d events, told of %d commits; want 2 and none", f.stored.Load(), f.committed.Load())
	}
	f.writesNothing = false
	if ok, err := in.Store(context.Background(), stamped(events.LicenseRevoked("t1", "K-3", "app"), time.Now())); !ok || err != nil {
		t.Fatalf("stored %v, %v", ok, err)
	}
	if f.committed.Load() != 1 {
		t.Fatalf("a fan-out that wrote was told of %d commits, want 1", f.committed.Load())
	}
}
