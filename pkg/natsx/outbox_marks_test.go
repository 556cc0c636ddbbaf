package natsx

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/keyhouse/keyhouse/devinfra/devnats"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
)

// The relay's connection keeps one generic plan per statement (pgxx.WithGenericPlans),
// and a new deployment's relay makes those plans while the outbox is empty, where a
// sequential scan is the cheapest way to find a list of rows. The marks of a batch (the
// published rows' delete, or their mark as sent) run under marksPlanMode, planned for
// their own list of versions, so on an outbox of thousands they still read only their
// rows: the generic plan read the whole outbox, dead rows included, for every batch.
func TestRelayMarksFindTheirRowsWhateverTheTableWas(t *testing.T) {
	ctx := context.Background()
	_, pool := newOutboxDB(t)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	marks := map[string]string{"delete_published": deletePublishedSQL, "mark_sent": markSentSQL}
	if _, err := conn.Exec(ctx, `SET plan_cache_mode = force_generic_plan`); err != nil {
		t.Fatal(err)
	}
	for name, sql := range marks {
		if _, err := conn.Exec(ctx, `PREPARE `+name+` (tid[]) AS `+sql); err != nil {
			t.Fatal(err)
		}
		// The plan is made at the first run, on the empty outbox.
		if _, err := conn.Exec(ctx, `EXECUTE `+name+` ('{}')`); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `INSERT INTO outbox (tenant_id, subject, msg_id, payload)
		SELECT 't1', 'keyhouse.events.x', 'm' || g, convert_to(repeat('x', 600), 'UTF8') FROM generate_series(1, 20000) g`); err != nil {
		t.Fatal(err)
	}
	for name := range marks {
		var plan string
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, claimSQL, 24, []string{}, []int64{})
			if err != nil {
				return err
			}
			claimed, err := collectClaim(rows)
			if err != nil {
				return err
			}
			if len(claimed) != 24 {
				return fmt.Errorf("claimed %d rows, want 24", len(claimed))
			}
			if _, err := tx.Exec(ctx, marksPlanMode); err != nil {
				return err
			}
			// EXECUTE takes no protocol parameters: the versions go in as a literal.
			tids := make([]string, len(claimed))
			for i, o := range claimed {
				tids[i] = fmt.Sprintf(`"(%d,%d)"`, o.version.BlockNumber, o.version.OffsetNumber)
			}
			if err := tx.QueryRow(ctx, `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE `+name+` ('{`+strings.Join(tids, ",")+`}')`).Scan(&plan); err != nil {
				return err
			}
			var left int
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE sent_at IS NULL`).Scan(&left); err != nil {
				return err
			}
			if left != 20000-24 {
				return fmt.Errorf("%s left %d rows pending, want %d", name, left, 20000-24)
			}
			return errRollback
		})
		if !errors.Is(err, errRollback) {
			t.Fatal(err)
		}
		nodes, err := pgxx.PlanNodes(plan)
		if err != nil {
			t.Fatal(err)
		}
		var scans []string
		for _, n := range nodes {
			if n.Relation == "outbox" && n.NodeType != "ModifyTable" {
				scans = append(scans, n.NodeType)
			}
		}
		buffers, err := pgxx.PlanBuffers(plan)
		if err != nil {
			t.Fatal(err)
		}
		// A sequential scan read about 1,900 buffers here; the rows (and, for the mark, their
		// new versions with their index entries) about 10 a row.
		if !slices.Equal(scans, []string{"Tid Scan"}) || buffers > 400 {
			t.Errorf("%s of 24 claimed rows in a 20,000-row outbox: outbox read by %v, %d buffers; want one Tid Scan of its rows", name, scans, buffers)
		}
	}
}

// The same on the relay's own path: a relay on a connection with generic plans, started
// on an empty outbox, then relaying rows of an outbox that holds 20,000 rows, deletes
// what it published without one sequential scan of the outbox (what the statistics
// every backend reports count, once the relay's connection has reported them).
func TestRelayOnGenericPlansNeverScansTheWholeOutbox(t *testing.T) {
	ctx := context.Background()
	url, setup := newOutboxDB(t)
	pool, err := pgxx.Open(ctx, url, "svc", pgxx.WithGenericPlans())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	_, js := connect(t, devnats.SharedURL(t), nil)
	_, prefix := newStream(t, js)
	log, _ := newLog(t)
	relay := NewRelay(pool, js, log, WithPollInterval(20*time.Millisecond))
	background(t, relay.Run)
	// pending counts the rows left to relay through the pending index: the test's own
	// reads must not scan the outbox either.
	pending := func() (n int) {
		t.Helper()
		err := pgxx.InTx(ctx, setup, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL enable_seqscan = off`); err != nil {
				return err
			}
			return tx.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE sent_at IS NULL AND parked_at IS NULL`).Scan(&n)
		})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	relayAll := func(from, n int) {
		t.Helper()
		msgs := make([]Message, n)
		for i := range msgs {
			msgs[i] = Message{TenantID: "t1", Subject: prefix + ".ev", MsgID: fmt.Sprintf("m:%d", from+i), Payload: []byte("x")}
		}
		if err := pgxx.InTx(ctx, setup, func(tx pgx.Tx) error { return EnqueueAll(ctx, tx, msgs...) }); err != nil {
			t.Fatal(err)
		}
		relay.Notify()
		eventually(t, 20*time.Second, "every row relayed", func() bool { return pending() == 0 })
	}
	// scans reads the outbox's sequential scans and deleted rows as reported so far;
	// reported waits until the relay's connection has reported its deletes.
	scans := func() (seq, deleted int64) {
		t.Helper()
		if err := setup.QueryRow(ctx, `SELECT seq_scan, n_tup_del FROM pg_stat_user_tables WHERE schemaname = 'svc' AND relname = 'outbox'`).Scan(&seq, &deleted); err != nil {
			t.Fatal(err)
		}
		return seq, deleted
	}
	reported := func(deleted int64) (seq int64) {
		t.Helper()
		eventually(t, 30*time.Second, "the relay's deletes reported", func() bool {
			var d int64
			seq, d = scans()
			return d >= deleted
		})
		return seq
	}

	relayAll(0, 30) // the relay's plans, made on an outbox of a few rows
	before := reported(30)
	if _, err := setup.Exec(ctx, `INSERT INTO outbox (tenant_id, subject, msg_id, payload, sent_at)
		SELECT 't1', 'keyhouse.events.x', 'sent:' || g, convert_to(repeat('x', 600), 'UTF8'), now() FROM generate_series(1, 20000) g`); err != nil {
		t.Fatal(err)
	}
	relayAll(30, 200)
	if after := reported(230); after != before {
		t.Fatalf("relaying 200 rows of a 20,000-row outbox scanned the whole outbox %d times", after-before)
	}
}
