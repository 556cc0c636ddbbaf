package store

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/keyhouse/keyhouse/pkg/events"
	"github.com/keyhouse/keyhouse/pkg/events/eventstest"
)

// Every writing method of the store emits its event of addendum §11 in its transaction,
// and only when something changed; every other method is listed as emitting nothing, so
// a new method cannot go undecided.
func TestEveryWriteEmitsItsEvent(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	out := eventstest.Watch(t, s.db)
	var id int32
	writes := []struct {
		method string
		run    func() error
		want   []string
	}{
		{"Register", func() (err error) {
			id, err = s.Register(ctx, "t1", "", nil, release("1.0.0", "stable"), 5, nil)
			return err
		}, []string{events.TypeReleasePublished}},
		{"Register with an Idempotency-Key, twice", func() error {
			for range 2 {
				if _, err := s.Register(ctx, "t1", "idem-1", []byte("h"), release("1.0.1", "stable"), 5, nil); err != nil {
					return err
				}
			}
			return nil
		}, []string{events.TypeReleasePublished}},
		{"Register refused (duplicate)", func() error {
			if _, err := s.Register(ctx, "t1", "", nil, release("1.0.0", "stable"), 5, nil); !errors.Is(err, ErrDuplicate) {
				return err
			}
			return nil
		}, nil},
		{"Unpublish", func() error { return s.Unpublish(ctx, "t1", id) }, []string{events.TypeReleaseUnpublished}},
		{"Unpublish again", func() error { return s.Unpublish(ctx, "t1", id) }, nil},
	}
	for _, w := range writes {
		if err := w.run(); err != nil {
			t.Fatalf("%s: %v", w.method, err)
		}
		got := out.Next(t)
		if !slices.Equal(eventstest.Types(got), w.want) {
			t.Errorf("%s emitted %v, want %v", w.method, eventstest.Types(got), w.want)
		}
		for _, ev := range got {
			r := ev.GetReleasePublished()
			if r == nil {
				r = ev.GetReleaseUnpublished()
			}
			if ev.GetTenantId() != "t1" || r.GetProductId() != "App" || r.GetPlatform() != "linux" || r.GetChannel() != "stable" || r.GetId() == 0 {
				t.Errorf("%s: event %v", w.method, ev)
			}
		}
	}
	eventstest.RequireListed(t, s, []string{"Register", "Unpublish"}, []string{"Get", "Latest", "LatestOf", "List", "WithLatestCache"})
}

// An event that cannot be written takes its change with it.
func TestNoChangeWithoutItsEvent(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	if _, err := s.db.Exec(ctx, `CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'outbox refused'; END $$;
		CREATE TRIGGER refuse BEFORE INSERT ON outbox FOR EACH ROW EXECUTE FUNCTION refuse()`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Register(ctx, "t1", "", nil, release("1.0.0", "stable"), 5, nil); err == nil {
		t.Fatal("registered without its event")
	}
	if rows, _, err := s.List(ctx, "t1", Filter{Limit: 10}); err != nil || len(rows) != 0 {
		t.Fatalf("%d releases, %v: a change committed without its event", len(rows), err)
	}
}
