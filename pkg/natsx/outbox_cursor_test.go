package natsx

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/keyhouse/keyhouse/devinfra/devnats"
	"github.com/keyhouse/keyhouse/devinfra/testkit"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
	"github.com/nats-io/nats.go/jetstream"
)

var errRollback = errors.New("roll back")

// claimBuffers runs claimSQL (batch, cursors) under EXPLAIN (ANALYZE, BUFFERS) in a
// transaction it rolls back, then the claim itself in another, and returns the shared
// buffers the claim read and the ids it claimed. generic runs the generic plan, the one
// the relay's own connection uses (pgxx.WithGenericPlans), instead of one planned for the
// arguments.
func claimBuffers(t *testing.T, pool *pgxpool.Pool, batch int, tenants []string, after []int64, generic bool) (int64, []int64) {
	t.Helper()
	ctx := context.Background()
	explain, claim := `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) `+claimSQL, claimSQL
	prepare := func(tx pgx.Tx) error {
		if !generic {
			return nil
		}
		// A prepared statement outlives the transaction: this connection may have one.
		var prepared bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_prepared_statements WHERE name = 'claim_generic')`).Scan(&prepared); err != nil {
			return err
		}
		if prepared {
			if _, err := tx.Exec(ctx, `DEALLOCATE claim_generic`); err != nil {
				return err
			}
		}
		// The relay's connection's settings (pgxx.WithGenericPlans), then the statement.
		var setup []string
		for name, value := range pgxx.GenericPlanSettings {
			setup = append(setup, fmt.Sprintf("SET LOCAL %s = %s", name, value))
		}
		for _, q := range append(setup, `PREPARE claim_generic (int, text[], bigint[]) AS `+claimSQL) {
			if _, err := tx.Exec(ctx, q); err != nil {
				return err
			}
		}
		claim = executeClaim("claim_generic", batch, tenants, after)
		explain = `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ` + claim
		return nil
	}
	args := []any{batch, tenants, after}
	if generic {
		args = nil
	}
	var plan string
	var ids []int64
	err := pgxx.InTx(ctx, pool, func(tx pgx.Tx) error {
		if err := prepare(tx); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, explain, args...).Scan(&plan); err != nil {
			return err
		}
		return errRollback
	})
	if !errors.Is(err, errRollback) {
		t.Fatal(err)
	}
	err = pgxx.InTx(ctx, pool, func(tx pgx.Tx) error {
		if err := prepare(tx); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, claim, args...)
		if err != nil {
			return err
		}
		claimed, err := collectClaim(rows)
		for _, o := range claimed {
			ids = append(ids, o.id)
		}
		if err != nil {
			return err
		}
		return errRollback
	})
	if !errors.Is(err, errRollback) {
		t.Fatal(err)
	}
	buffers, err := pgxx.PlanBuffers(plan)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(ids)
	return buffers, ids
}

// executeClaim is the EXECUTE of claimSQL prepared as name, for a batch and cursors.
// EXECUTE takes no protocol parameters: the arguments go in as literals.
func executeClaim(name string, batch int, tenants []string, after []int64) string {
	quoted := make([]string, len(tenants))
	for i, tenant := range tenants {
		quoted[i] = "'" + strings.ReplaceAll(tenant, "'", "''") + "'"
	}
	cursors := make([]string, len(after))
	for i, id := range after {
		cursors[i] = strconv.FormatInt(id, 10)
	}
	return fmt.Sprintf(`EXECUTE %s (%d, ARRAY[%s]::text[], ARRAY[%s]::bigint[])`, name, batch, strings.Join(quoted, ","), strings.Join(cursors, ","))
}

// The claim from the relay's cursors reads each known tenant's rows after its cursor, not
// the entries the deleted rows left at the front of outbox_pending_tenant, even while an
// old snapshot keeps those entries from being marked dead, analyzed or not; and it still
// finds a tenant the relay does not know, between and after the known ones.
func TestClaimFromTheCursorsSkipsTheDeadFront(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, pool := newOutboxDB(t)

	// 12,000 rows of tenants a, b, c and gone, relayed (deleted below); then 10 pending
	// rows each of a, b and c, and 5 of tenants the relay has not seen (b2 sorts between
	// b and c, d after every known tenant).
	if _, err := pool.Exec(ctx, `
		INSERT INTO outbox (tenant_id, subject, msg_id, payload)
		SELECT (ARRAY['a','b','c','gone'])[1 + i % 4], 'x.ev', 'relayed:' || i, '\x00' FROM generate_series(1, 12000) i;
		INSERT INTO outbox (tenant_id, subject, msg_id, payload)
		SELECT (ARRAY['a','b','c'])[1 + i % 3], 'x.ev', 'pending:' || i, '\x00' FROM generate_series(1, 30) i;
		INSERT INTO outbox (tenant_id, subject, msg_id, payload)
		SELECT (ARRAY['b2','d'])[1 + i % 2], 'x.ev', 'new:' || i, '\x00' FROM generate_series(1, 5) i`); err != nil {
		t.Fatal(err)
	}
	// An older snapshot (a long transaction elsewhere in the database) holds the deleted
	// versions, so their index entries cannot be marked dead.
	defer testkit.HoldSnapshot(t, pool)()
	tenants := []string{"a", "b", "c", "gone"}
	var after []int64
	if err := pool.QueryRow(ctx, `WITH d AS (DELETE FROM outbox WHERE msg_id LIKE 'relayed:%' RETURNING tenant_id, id)
		SELECT array_agg(m ORDER BY t) FROM (SELECT tenant_id t, max(id) m FROM d GROUP BY tenant_id) x`).Scan(&after); err != nil {
		t.Fatal(err)
	}
	for _, analyzed := range []bool{false, true} {
		if analyzed {
			if _, err := pool.Exec(ctx, `ANALYZE outbox`); err != nil {
				t.Fatal(err)
			}
		}
		for _, generic := range []bool{false, true} {
			fromFront, frontIDs := claimBuffers(t, pool, 64, []string{}, []int64{}, generic)
			fromCursors, cursorIDs := claimBuffers(t, pool, 64, tenants, after, generic)
			if len(frontIDs) != 35 || !slices.Equal(frontIDs, cursorIDs) {
				t.Fatalf("analyzed=%v generic=%v: claimed from the front %v, from the cursors %v; want the same 35 pending rows", analyzed, generic, frontIDs, cursorIDs)
			}
			// From the front the claim reads the index entries and heap pages of the
			// 12,000 deleted rows (twice per tenant: finding it, then its rows); from the
			// cursors, a descent of the index per tenant and per gap, and the rows it takes.
			if fromCursors*5 > fromFront {
				t.Errorf("analyzed=%v generic=%v: the claim read %d buffers from the cursors, %d from the front; want a fifth or less", analyzed, generic, fromCursors, fromFront)
			}
			t.Logf("analyzed=%v generic=%v: %d buffers from the cursors, %d from the front (35 rows claimed)", analyzed, generic, fromCursors, fromFront)
		}
	}
}

// A row that commits after the relay has relayed a later row of its tenant is behind the
// relay's cursor; it is published all the same, when the cursors find nothing.
func TestRelayPublishesARowThatCommittedBehindItsCursor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, pool := newOutboxDB(t)
	_, js := connect(t, devnats.SharedURL(t), nil)
	stream, prefix := newStream(t, js)
	log, _ := newLog(t)

	late, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer late.Rollback(ctx) //nolint:errcheck // committed below
	if err := Enqueue(ctx, late, Message{TenantID: "t1", Subject: prefix + ".ev", MsgID: "late"}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		enqueue(t, pool, Message{TenantID: "t1", Subject: prefix + ".ev", MsgID: fmt.Sprintf("early:%d", i)})
	}
	relay := NewRelay(pool, js, log, WithPollInterval(20*time.Millisecond))
	background(t, relay.Run)
	eventually(t, 10*time.Second, "the committed rows sent", func() bool { return countRows(t, pool, "true") == 0 })
	if err := late.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the late row sent", func() bool { return countRows(t, pool, "true") == 0 })
	var got []string
	for _, m := range streamMsgs(t, js, stream) {
		got = append(got, m.Header.Get(jetstream.MsgIDHeader))
	}
	if !slices.Equal(got, []string{"early:0", "early:1", "early:2", "late"}) {
		t.Fatalf("stream holds %v", got)
	}
}

// A tenant's cursor moves past what was published or parked, in order, and stops before
// the first row that was neither, so that row goes first in the next claim.
func TestRelayCursorsStopBeforeATenantsHeldRow(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	c := relayCursors{now: func() time.Time { return now }}
	if _, _, front := c.next(); !front {
		t.Fatal("a relay that knows no tenant claims from its cursors, want the front")
	}
	c.fromFront()
	row := func(id int64, tenant string) outboxRow { return outboxRow{id: id, tenantID: tenant} }
	claimed := []outboxRow{row(10, "a"), row(20, "b"), row(11, "a"), row(21, "b"), row(12, "a"), row(22, "b")}
	// a: 10 published, 11 held (12 published but behind it); b: 20 parked, 21 and 22 published.
	c.advance(claimed, []int64{10, 12, 21, 22}, []parkedRow{{row: row(20, "b")}})
	tenants, after, front := c.next()
	if front {
		t.Fatal("claim from the front, want from the cursors")
	}
	got := map[string]int64{}
	for i, tenant := range tenants {
		got[tenant] = after[i]
	}
	if want := map[string]int64{"a": 10, "b": 22}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("cursors %v, want %v", got, want)
	}
	// A row of a behind its cursor (it committed late) held: the cursor goes back before it.
	c.advance([]outboxRow{row(5, "a")}, nil, nil)
	if tenants, after, _ := c.next(); fmt.Sprint(tenants, after) != "[a b] [4 22]" && fmt.Sprint(tenants, after) != "[b a] [22 4]" {
		t.Fatalf("cursors %v %v, want a at 4", tenants, after)
	}
	for range relayRescanEvery {
		if _, _, front := c.next(); front {
			return
		}
	}
	t.Fatalf("no claim from the front in %d claims", relayRescanEvery)
}

// Under a steady flow every claim finds rows after the cursors, so only the clock brings
// the claim from the front that finds a row committed behind a cursor: relayRescanAfter
// after the last one, however few claims were made since.
func TestRelayClaimsFromTheFrontAQuarterSecondAfterTheLast(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	c := relayCursors{now: func() time.Time { return now }}
	if _, _, front := c.next(); !front {
		t.Fatal("first claim from the cursors, want the front")
	}
	c.fromFront()
	c.advance([]outboxRow{{id: 7, tenantID: "a"}}, []int64{7}, nil)
	for i := range 3 {
		now = now.Add(relayRescanAfter / 4)
		if _, _, front := c.next(); front {
			t.Fatalf("claim %d, %v after the front, from the front", i+2, now.Sub(time.Unix(1_800_000_000, 0)))
		}
	}
	now = now.Add(relayRescanAfter / 4)
	if _, _, front := c.next(); !front {
		t.Fatalf("claim %v after the last from the front still from the cursors", relayRescanAfter)
	}
	c.fromFront()
	if _, _, front := c.next(); front {
		t.Fatal("the claim right after one from the front is from the front again")
	}
}

// The relay plans its claim once, and Postgres plans it again after each analyze of the
// outbox. An outbox analyzed while empty (autovacuum after a quiet spell, a VACUUM after
// a bulk load elsewhere in the database) has neither pages nor rows for the planner,
// whose cheapest plan is then a sequential scan for every lookup, and the connection
// keeps that plan while the table fills: the claim read the whole table, dead rows and
// all, dozens of times. The relay's connection (pgxx.WithGenericPlans) plans from the
// indexes whatever the statistics say.
func TestAClaimPlannedOnAnOutboxAnalyzedEmptyReadsItsIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, pool := newOutboxDB(t)
	if _, err := pool.Exec(ctx, `VACUUM (ANALYZE) outbox`); err != nil {
		t.Fatal(err)
	}
	relayDB, err := pgxx.Open(ctx, url, "svc", pgxx.WithMaxConns(1), pgxx.WithGenericPlans())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(relayDB.Close)
	conn, err := relayDB.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	// The relay's first claim, on the empty outbox, makes the plan the connection keeps.
	claim := func(explain string, tenants []string, after []int64) (string, error) {
		var plan string
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			q := explain + executeClaim("claim", 64, tenants, after)
			if explain == "" {
				if _, err := tx.Exec(ctx, q); err != nil {
					return err
				}
			} else if err := tx.QueryRow(ctx, q).Scan(&plan); err != nil {
				return err
			}
			return errRollback // the claim's locks go with it
		})
		if !errors.Is(err, errRollback) {
			return "", err
		}
		return plan, nil
	}
	if _, err := conn.Exec(ctx, `PREPARE claim (int, text[], bigint[]) AS `+claimSQL); err != nil {
		t.Fatal(err)
	}
	if _, err := claim("", []string{}, []int64{}); err != nil {
		t.Fatal(err)
	}
	// What the relay finds a minute later: 13,000 rows relayed and deleted, batch by
	// batch, and 200 pending.
	if _, err := pool.Exec(ctx, `
		INSERT INTO outbox (tenant_id, subject, msg_id, payload)
		SELECT 'default', 'x.ev', 'relayed:' || i, '\x00' FROM generate_series(1, 13000) i;
		INSERT INTO outbox (tenant_id, subject, msg_id, payload)
		SELECT 'default', 'x.ev', 'pending:' || i, '\x00' FROM generate_series(1, 200) i`); err != nil {
		t.Fatal(err)
	}
	var last int64
	if err := pool.QueryRow(ctx, `SELECT max(id) FROM outbox WHERE msg_id LIKE 'relayed:%'`).Scan(&last); err != nil {
		t.Fatal(err)
	}
	for from := int64(0); from < last; from += 24 {
		if _, err := pool.Exec(ctx, `DELETE FROM outbox WHERE id > $1 AND id <= $2`, from, min(from+24, last)); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name    string
		tenants []string
		after   []int64
	}{{"from the front", []string{}, []int64{}}, {"from the cursor", []string{"default"}, []int64{last}}} {
		plan, err := claim("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ", c.tenants, c.after)
		if err != nil {
			t.Fatal(err)
		}
		buffers, err := pgxx.PlanBuffers(plan)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(plan, `"Seq Scan"`) {
			t.Errorf("%s: the claim scans the outbox whole (%d buffers)", c.name, buffers)
		}
		t.Logf("%s: %d buffers", c.name, buffers)
	}
}
