package migrations_test

import (
	"context"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/keyhouse/keyhouse/devinfra/testkit"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
	"github.com/keyhouse/keyhouse/services/storefront/migrations"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// upTo is the migrations before the file named last.
func upTo(t *testing.T, last string) fs.FS {
	t.Helper()
	names, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	out := fstest.MapFS{}
	for _, n := range names {
		if n < last {
			b, err := fs.ReadFile(migrations.FS, n)
			if err != nil {
				t.Fatal(err)
			}
			out[n] = &fstest.MapFile{Data: b}
		}
	}
	return out
}

// schemaBefore is a pool on a fresh database migrated up to, not including, the file
// named last: the schema a migration test fills before the rest of the migrations run.
func schemaBefore(t *testing.T, last string) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	url := testkit.DatabaseURL(t, testkit.Empty)
	if err := (pgxx.Migrations{Schema: "storefront", FS: upTo(t, last)}).Apply(ctx, url); err != nil {
		t.Fatal(err)
	}
	pool, err := pgxx.Open(ctx, url, "storefront")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Purchases revoked (or not) under the single revoked_for reason keep their state as
// facts: the refunds and disputes their deliveries recorded, and a dispute whose delivery
// is gone still keeps the license revoked.
func TestLifecycleFactsMigration(t *testing.T) {
	ctx := context.Background()
	pool := schemaBefore(t, "00008")
	if _, err := pool.Exec(ctx, `
		INSERT INTO fulfillments (tenant_id, checkout_session_id, license_key, revoked_for, revoked_applied, won_disputes) VALUES
			('t', 'cs_refund_then_won', 'K1', NULL, false, '{dp_1}'),
			('t', 'cs_two_disputes', 'K2', NULL, false, '{dp_1}'),
			('t', 'cs_refund', 'K3', 'refund', true, '{}'),
			('t', 'cs_dispute_gone', 'K4', 'dispute', true, '{}'),
			('t', 'cs_quiet', 'K5', NULL, false, '{}');
		INSERT INTO deliveries (tenant_id, webhook_id, event_id, event_type, checkout_session_id, payment_status, session_created, outcome, detail) VALUES
			('t', 'wh', 'e1', 'charge.dispute.created', 'cs_refund_then_won', '', now(), 'revoked_dispute', '{"dispute_id":"dp_1","dispute_status":"needs_response"}'),
			('t', 'wh', 'e2', 'charge.refunded', 'cs_refund_then_won', '', now(), 'revoked_refund', '{"amount":1900,"amount_refunded":1900}'),
			('t', 'wh', 'e3', 'charge.dispute.closed', 'cs_refund_then_won', '', now(), 'reactivated', '{"dispute_id":"dp_1","dispute_status":"won"}'),
			('t', 'wh', 'e4', 'charge.dispute.created', 'cs_two_disputes', '', now(), 'revoked_dispute', '{"dispute_id":"dp_2"}'),
			('t', 'wh', 'e5', 'charge.dispute.created', 'cs_two_disputes', '', now(), 'revoked_dispute', '{"dispute_id":"dp_1"}'),
			('t', 'wh', 'e6', 'charge.refunded', 'cs_quiet', '', now(), 'ignored', '{"amount":1900,"amount_refunded":100}')`); err != nil {
		t.Fatal(err)
	}
	if _, err := (pgxx.Migrations{Schema: "storefront", FS: migrations.FS}).Up(ctx, pool); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `SELECT checkout_session_id, refunded, disputes, revoked_applied, revoked_elsewhere FROM fulfillments ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var session string
		var refunded, applied, elsewhere bool
		var disputes []string
		if err := rows.Scan(&session, &refunded, &disputes, &applied, &elsewhere); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprint(session, " ", refunded, " ", disputes, " ", applied, " ", elsewhere))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"cs_dispute_gone false [(an earlier dispute)] true false",
		"cs_quiet false [] false false",
		"cs_refund true [] true false",
		"cs_refund_then_won true [dp_1] false false",
		"cs_two_disputes false [dp_1 dp_2] false false",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("after the migration:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
