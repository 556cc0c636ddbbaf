package migrations_test

import (
	"context"
	"io/fs"
	"slices"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5"
	"github.com/keyhouse/keyhouse/devinfra/testkit"

	"github.com/keyhouse/keyhouse/pkg/idempotency"
	"github.com/keyhouse/keyhouse/pkg/natsx"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
	"github.com/keyhouse/keyhouse/pkg/tenantpurge"
	"github.com/keyhouse/keyhouse/services/billing/migrations"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// The events this service emits (pkg/events) go through pkg/natsx's outbox and relay, and its
// creates' Idempotency-Keys pkg/idempotency, on tables this schema holds: they must be the
// packages' tables, verbatim.
func TestMigrationsHoldTheSharedOutboxTable(t *testing.T) {
	if err := pgxx.CheckSharedTables(migrations.FS, pgxx.SharedTable{Create: idempotency.TableSQL}, natsx.OutboxTable); err != nil {
		t.Fatal(err)
	}
}

// The purge of a deleted tenant leaves its tombstone in the shared table.
func TestMigrationsHoldTheSharedTombstoneTable(t *testing.T) {
	if err := pgxx.CheckSharedDDL(migrations.FS, tenantpurge.TombstoneTableSQL); err != nil {
		t.Fatal(err)
	}
}

// upTo is the migrations before the file whose name starts with first: the schema a
// migration test fills before the rest of the migrations run.
func upTo(t *testing.T, first string) fs.FS {
	t.Helper()
	names, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	before := fstest.MapFS{}
	for _, name := range names {
		if name >= first {
			continue
		}
		b, err := migrations.FS.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		before[name] = &fstest.MapFile{Data: b}
	}
	return before
}

// Tenants that shared an email before emails became unique: the oldest keeps it, the
// others get it plus-addressed with their tenant id, and each rename is recorded.
func TestUniqueEmailsResolveExistingDuplicates(t *testing.T) {
	ctx := context.Background()
	url := testkit.DatabaseURL(t, testkit.Empty)
	if err := (pgxx.Migrations{Schema: "billing", FS: upTo(t, "00006")}).Apply(ctx, url); err != nil {
		t.Fatal(err)
	}
	db, err := pgxx.Open(ctx, url, "billing")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(ctx, `INSERT INTO tenants (tenant_id, name, email, api_key_hash, created_at) VALUES
		('t_b', 'B', 'Ops@Acme.test', 'h2', '2026-01-02'), ('t_a', 'A', 'ops@acme.test', 'h1', '2026-01-01'),
		('t_c', 'C', 'ops@acme.test', 'h3', '2026-01-03'), ('t_d', 'D', 'solo@acme.test', 'h4', '2026-01-04')`); err != nil {
		t.Fatal(err)
	}
	if err := (pgxx.Migrations{Schema: "billing", FS: migrations.FS}).Apply(ctx, url); err != nil {
		t.Fatal(err)
	}
	rows, _ := db.Query(ctx, `SELECT t.tenant_id || ' ' || t.email || ' ' || coalesce(r.old_email, '-')
		FROM tenants t LEFT JOIN tenant_email_renames r USING (tenant_id) ORDER BY t.tenant_id`)
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"t_a ops@acme.test -", "t_b Ops+t_b@Acme.test Ops@Acme.test", "t_c ops+t_c@acme.test ops@acme.test", "t_d solo@acme.test -"}
	if !slices.Equal(got, want) {
		t.Fatalf("after the migration:\n got  %q\n want %q", got, want)
	}
	_, err = db.Exec(ctx, `INSERT INTO tenants (tenant_id, name, email, api_key_hash) VALUES ('t_e', 'E', 'OPS@acme.test', 'h5')`)
	if !pgxx.IsUniqueViolation(err, "tenants_email_unique") {
		t.Fatalf("a duplicate email after the migration: %v", err)
	}
}

// Subscriptions that ended before never_paid existed: those without a snapshot (an unpaid
// checkout and an incomplete subscription set none, a paid one always has one) are the
// ones that never paid, and are marked so; the others are left as they were.
func TestNeverPaidMarksTheEndedSubscriptionsThatHadNoSnapshot(t *testing.T) {
	ctx := context.Background()
	url := testkit.DatabaseURL(t, testkit.Empty)
	if err := (pgxx.Migrations{Schema: "billing", FS: upTo(t, "00012")}).Apply(ctx, url); err != nil {
		t.Fatal(err)
	}
	db, err := pgxx.Open(ctx, url, "billing")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(ctx, `INSERT INTO tenants (tenant_id, name, email, api_key_hash) VALUES ('t_a', 'A', 'a@acme.test', 'h1');
		INSERT INTO subscriptions (subscription_id, tenant_id, snapshot_plan, snapshot_status, snapshot_at, snapshot_rank, failed_at, failed_rank, ended) VALUES
		('sub_expired', 't_a', NULL, NULL, NULL, NULL, NULL, NULL, true),
		('sub_expired_failed', 't_a', NULL, NULL, NULL, NULL, '2026-01-01', 3, true),
		('sub_paid_ended', 't_a', 'pro', 'active', '2026-01-01', 0, NULL, NULL, true),
		('sub_failing', 't_a', NULL, NULL, NULL, NULL, '2026-01-01', 3, false),
		('sub_live', 't_a', 'pro', 'past_due', '2026-01-01', 2, NULL, NULL, false)`); err != nil {
		t.Fatal(err)
	}
	if err := (pgxx.Migrations{Schema: "billing", FS: migrations.FS}).Apply(ctx, url); err != nil {
		t.Fatal(err)
	}
	rows, _ := db.Query(ctx, `SELECT subscription_id || ' ' || never_paid || ' ' || coalesce(snapshot_reason, '-')
		FROM subscriptions ORDER BY subscription_id`)
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"sub_expired true -", "sub_expired_failed true -", "sub_failing false -", "sub_live false -", "sub_paid_ended false -"}
	if !slices.Equal(got, want) {
		t.Fatalf("after the migration:\n got  %q\n want %q", got, want)
	}
	_, err = db.Exec(ctx, `UPDATE subscriptions SET never_paid = true WHERE subscription_id = 'sub_live'`)
	if err == nil {
		t.Fatal("a subscription that has not ended marked never paid")
	}
}
