package tenantpurge_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/keyhouse/keyhouse/devinfra/testkit"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
	"github.com/keyhouse/keyhouse/pkg/tenantpurge"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// Every table with a tenant_id loses that tenant's rows and keeps the others', whatever
// order the foreign keys between them impose, and whatever a delete's trigger writes into
// a table purged before it (as licensing's license counts are kept); a second purge
// changes nothing.
func TestPurgeDeletesTheTenantFromEveryTableInForeignKeyOrder(t *testing.T) {
	ctx := context.Background()
	db, err := pgxx.Open(ctx, testkit.DatabaseURL(t, testkit.Empty), "svc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	if _, err := db.Exec(ctx, `CREATE SCHEMA svc;
		-- "a_children" sorts before its parent: the first attempt at "b_parents" is refused.
		CREATE TABLE svc.b_parents (id text PRIMARY KEY, tenant_id text NOT NULL);
		CREATE TABLE svc.a_children (id text PRIMARY KEY, tenant_id text NOT NULL, parent text NOT NULL REFERENCES svc.b_parents (id));
		CREATE TABLE svc.c_global (id text PRIMARY KEY);
		-- "a_tallies" sorts before "b_parents", whose deletes append to it.
		CREATE TABLE svc.a_tallies (tenant_id text NOT NULL, change int NOT NULL);
		CREATE FUNCTION svc.tally() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN INSERT INTO svc.a_tallies VALUES (OLD.tenant_id, -1); RETURN NULL; END $$;
		CREATE TRIGGER tally AFTER DELETE ON svc.b_parents FOR EACH ROW EXECUTE FUNCTION svc.tally();
		INSERT INTO svc.a_tallies VALUES ('t1', 1), ('t2', 1);
		CREATE VIEW svc.v AS SELECT tenant_id FROM svc.b_parents;
		INSERT INTO svc.b_parents VALUES ('p1', 't1'), ('p2', 't2');
		INSERT INTO svc.a_children VALUES ('c1', 't1', 'p1'), ('c2', 't1', 'p1'), ('c3', 't2', 'p2');
		INSERT INTO svc.c_global VALUES ('g');`); err != nil {
		t.Fatal(err)
	}
	// 2 children, the tally, the parent; then the tally its delete wrote.
	for i, want := range []int64{5, 0} {
		var n int64
		err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) (err error) {
			n, err = tenantpurge.Purge(ctx, tx, "t1")
			return err
		})
		if err != nil || n != want {
			t.Fatalf("purge %d: %d rows, %v; want %d", i+1, n, err, want)
		}
	}
	var left string
	if err := db.QueryRow(ctx, `SELECT string_agg(tenant_id, ',' ORDER BY tenant_id) FROM
		(SELECT tenant_id FROM svc.b_parents UNION ALL SELECT tenant_id FROM svc.a_children
		 UNION ALL SELECT tenant_id FROM svc.a_tallies) r`).Scan(&left); err != nil || left != "t2,t2,t2" {
		t.Fatalf("rows left: %q, %v", left, err)
	}
	var global int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM svc.c_global`).Scan(&global); err != nil || global != 1 {
		t.Fatalf("a table without tenant_id was touched: %d, %v", global, err)
	}
}
