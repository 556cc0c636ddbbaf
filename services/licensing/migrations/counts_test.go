package migrations_test

import (
	"context"
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/keyhouse/keyhouse/devinfra/testkit"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
	"github.com/keyhouse/keyhouse/services/licensing/migrations"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// upTo is the migrations before the one named first.
func upTo(t *testing.T, first string) fs.FS {
	t.Helper()
	files, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	before := fstest.MapFS{}
	for _, name := range files {
		if strings.HasPrefix(name, first) {
			return before
		}
		data, err := fs.ReadFile(migrations.FS, name)
		if err != nil {
			t.Fatal(err)
		}
		before[name] = &fstest.MapFile{Data: data}
	}
	t.Fatalf("no migration %s", first)
	return nil
}

// An installation upgraded to the kept license counts starts with its licenses counted:
// the migration counts what the tables hold when it runs.
func TestLicenseCountsStartFromTheLicensesAnUpgradeFinds(t *testing.T) {
	ctx := context.Background()
	db, err := pgxx.Open(ctx, testkit.DatabaseURL(t, testkit.Empty), "licensing")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	if _, err := (pgxx.Migrations{Schema: "licensing", FS: upTo(t, "00008_")}).Up(ctx, db); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `INSERT INTO licenses (key_hash, key, tenant_id, tier, product_id, issued_to, status)
		SELECT sha256(k::bytea), k, t, 'pro', 'app', 'x', s FROM (VALUES
			('A1', 't1', 'active'), ('A2', 't1', 'active'), ('A3', 't1', 'revoked'), ('B1', 't2', 'revoked')) v (k, t, s)`); err != nil {
		t.Fatal(err)
	}
	if _, err := (pgxx.Migrations{Schema: "licensing", FS: migrations.FS}).Up(ctx, db); err != nil {
		t.Fatal(err)
	}
	var got string
	if err := db.QueryRow(ctx, `SELECT string_agg(tenant_id || ':' || active || '/' || revoked, ' ' ORDER BY tenant_id)
		FROM (SELECT tenant_id, sum(active) AS active, sum(revoked) AS revoked FROM license_counts GROUP BY tenant_id) c`).Scan(&got); err != nil {
		t.Fatal(err)
	}
	if got != "t1:2/1 t2:0/1" {
		t.Errorf("counts after the upgrade: %q, want t1:2/1 t2:0/1 (active/revoked)", got)
	}
}
