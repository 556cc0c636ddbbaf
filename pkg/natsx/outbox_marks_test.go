package natsx

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/keyhouse/keyhouse/devinfra/devnats"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
)

// The relay's connection keeps one generic plan per statement (pgxx.WithGenericPlans),
// and a new deployment's relay makes those plans while the outbox is empty, where a
// sequential scan is the cheapest way to find a list of rows. The marks of a batch run
// under marksPlanMode, planned for their own list of versions: a relay started on an
// empty outbox, then relaying rows of an outbox that holds 20,000 rows, deletes what it
// published (or, WithRetention, marks it sent) without one sequential scan of the outbox
// (what the statistics every backend reports count, once the relay's connection has
// reported them). The generic plan read the whole outbox, dead rows included, for every
// batch.
func TestRelayOnGenericPlansNeverScansTheWholeOutbox(t *testing.T) {
	for _, retention := range []time.Duration{0, time.Hour} {
		t.Run(fmt.Sprintf("retention %s", retention), func(t *testing.T) { relayWithoutScans(t, retention) })
	}
}

func relayWithoutScans(t *testing.T, retention time.Duration) {
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
	relay := NewRelay(pool, js, log, WithPollInterval(20*time.Millisecond), WithRetention(retention))
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
	// reported waits until the relay's connection has reported marking (deleting or
	// updating) at least marked rows, and returns the outbox's sequential scans so far.
	reported := func(marked int64) (seq int64) {
		t.Helper()
		eventually(t, 30*time.Second, "the relay's marks reported", func() bool {
			var m int64
			if err := setup.QueryRow(ctx, `SELECT seq_scan, n_tup_del + n_tup_upd FROM pg_stat_user_tables
				WHERE schemaname = 'svc' AND relname = 'outbox'`).Scan(&seq, &m); err != nil {
				t.Fatal(err)
			}
			return m >= marked
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
