package ingest

import (
	"context"
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/keyhouse/keyhouse/devinfra/testkit"
	"github.com/keyhouse/keyhouse/pkg/events"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
	"github.com/keyhouse/keyhouse/services/events/internal/store"
	"github.com/keyhouse/keyhouse/services/events/migrations"
)

// The migration that gives the log its order (00050) keeps the order the events already
// stored were listed in, created_at then id, gives each a seq no lower than its created_at
// in microseconds, and the events stored after it are listed above them.
func TestTheOrderMigrationKeepsTheStoredOrder(t *testing.T) {
	ctx := context.Background()
	url := testkit.DatabaseURL(t, testkit.Empty)
	before := fstest.MapFS{}
	err := fs.WalkDir(migrations.FS, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(name, ".sql") || name >= "00050" {
			return err
		}
		data, err := fs.ReadFile(migrations.FS, name)
		before[name] = &fstest.MapFile{Data: data}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := (pgxx.Migrations{Schema: "events", FS: before}).Apply(ctx, url); err != nil {
		t.Fatal(err)
	}
	db, err := pgxx.Open(ctx, url, "events")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	base := time.Date(2026, 11, 3, 0, 0, 0, 0, time.UTC)
	// Stored out of created_at order, two at the same microsecond.
	old := []struct {
		id string
		at time.Time
	}{{"evt_c", base.Add(2 * time.Second)}, {"evt_a", base}, {"evt_b2", base.Add(time.Second)}, {"evt_b1", base.Add(time.Second)}}
	for _, e := range old {
		if _, err := db.Exec(ctx, `INSERT INTO events (id, tenant_id, type, created_at, body) VALUES ($1, 't1', 'license.revoked', $2, '{}')`, e.id, e.at); err != nil {
			t.Fatal(err)
		}
	}
	if err := (pgxx.Migrations{Schema: "events", FS: migrations.FS}).Apply(ctx, url); err != nil {
		t.Fatal(err)
	}
	st := store.New(db)
	if _, err := New(st, quiet).Store(ctx, stamped(events.LicenseRevoked("t1", "K-1", "app"), base)); err != nil {
		t.Fatal(err)
	}
	page, _, err := st.List(ctx, "t1", store.Filter{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range page {
		got = append(got, e.ID)
	}
	if len(got) != 5 || strings.Join(got[1:], " ") != "evt_c evt_b2 evt_b1 evt_a" {
		t.Fatalf("listed %v, want the new event, then evt_c evt_b2 evt_b1 evt_a", got)
	}
	var bad int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM events WHERE seq < (extract(epoch FROM created_at) * 1000000)::bigint OR late <> (seq - (extract(epoch FROM created_at) * 1000000)::bigint > 1000000)`).Scan(&bad); err != nil || bad != 0 {
		t.Fatalf("%d events with a seq below their time or a wrong late flag (%v)", bad, err)
	}
	// The event stored after the migration, created before every one of them, is late.
	if page, _, err := st.List(ctx, "t1", store.Filter{Limit: 10, Until: base}); err != nil || len(page) != 2 || page[0].ID != got[0] {
		t.Fatalf("until the first: %v %v", page, err)
	}
	// A binary from before the migration (a rolling upgrade's old pods, or a rollback,
	// which runs no migration) stores as it did, naming no seq: the row is stored and
	// listed first, not refused.
	if _, err := db.Exec(ctx, `INSERT INTO events (id, tenant_id, type, created_at, body) VALUES ('evt_old_binary', 't1', 'license.revoked', $1, '{}')`, base); err != nil {
		t.Fatalf("an insert by a binary from before the migration: %v", err)
	}
	if page, _, err := st.List(ctx, "t1", store.Filter{Limit: 1}); err != nil || len(page) != 1 || page[0].ID != "evt_old_binary" {
		t.Fatalf("after an old binary's insert, listed %v %v, want evt_old_binary first", page, err)
	}
}
