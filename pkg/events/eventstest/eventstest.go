// Package eventstest helps a store's tests pin that each writing method emits its event:
// read what a call wrote into the service's outbox, and check that a table of methods
// covers every exported method of the store, so a new write path cannot go unlisted.
package eventstest

import (
	"context"
	"reflect"
	"slices"
	"sort"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/keyhouse/keyhouse/pkg/events"
	eventsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/events/v1"
)

// Outbox is a cursor on a service's outbox table.
type Outbox struct {
	db   *pgxpool.Pool
	last int64
}

// Watch starts reading db's outbox (search_path = the service's schema) after its
// current last row.
func Watch(t testing.TB, db *pgxpool.Pool) *Outbox {
	t.Helper()
	o := &Outbox{db: db}
	if err := db.QueryRow(context.Background(), `SELECT COALESCE(max(id), 0) FROM outbox`).Scan(&o.last); err != nil {
		t.Fatal(err)
	}
	return o
}

// Next returns the events written since the last call (or Watch), in outbox order; other
// messages of the outbox (the storefront's fulfillment jobs) are passed over.
func (o *Outbox) Next(t testing.TB) []*eventsv1.Event {
	t.Helper()
	rows, err := o.db.Query(context.Background(), `SELECT id, payload FROM outbox WHERE id > $1
		AND starts_with(subject, $2) ORDER BY id`, o.last, events.SubjectPrefix)
	if err != nil {
		t.Fatal(err)
	}
	var out []*eventsv1.Event
	var id int64
	var payload []byte
	if _, err := pgx.ForEachRow(rows, []any{&id, &payload}, func() error {
		ev, err := events.Unmarshal(payload)
		if err != nil {
			return err
		}
		out = append(out, ev)
		o.last = id
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// Types is the types of evs, in order.
func Types(evs []*eventsv1.Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.GetType()
	}
	return out
}

// RequireListed fails unless every exported method of v's type (a store, a transaction
// interface) appears in one of the lists: the table of writing methods and their events,
// and the methods that write nothing of addendum §11. A method added later fails here
// until someone decided which it is.
func RequireListed(t testing.TB, v any, lists ...[]string) {
	t.Helper()
	typ := reflect.TypeOf(v)
	if typ.Kind() == reflect.Pointer && typ.Elem().Kind() == reflect.Interface {
		typ = typ.Elem()
	}
	var missing []string
	for i := range typ.NumMethod() {
		name := typ.Method(i).Name
		if !slices.ContainsFunc(lists, func(l []string) bool { return slices.Contains(l, name) }) {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Fatalf("%s: methods neither in the table of writes and their events nor listed as emitting none: %v",
			typ, missing)
	}
}
