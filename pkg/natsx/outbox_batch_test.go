package natsx

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/keyhouse/keyhouse/devinfra/devnats"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
	"github.com/nats-io/nats.go/jetstream"
)

func TestEnqueueAllWritesOneRowPerMessageInTheOrderGiven(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, pool := newOutboxDB(t)
	_, js := connect(t, devnats.SharedURL(t), nil)
	stream, prefix := newStream(t, js)
	log, _ := newLog(t)

	enqueue(t, pool, Message{TenantID: "a", Subject: prefix + ".ev", MsgID: "a:0", Payload: []byte("first")})
	err := pgxx.InTx(ctx, pool, func(tx pgx.Tx) error {
		return EnqueueAll(ctx, tx,
			Message{TenantID: "a", Subject: prefix + ".ev", MsgID: "a:1", Payload: []byte("one")},
			Message{TenantID: "b", Subject: prefix + ".ev", MsgID: "b:1"},
			Message{TenantID: "a", Subject: prefix + ".other", MsgID: "a:2", Payload: []byte("two"), Header: map[string]string{"X-Kind": "k"}},
			// The same event twice, in the batch and already in the outbox: the first kept.
			Message{TenantID: "a", Subject: prefix + ".ev", MsgID: "a:1", Payload: []byte("again")},
			Message{TenantID: "a", Subject: prefix + ".ev", MsgID: "a:0", Payload: []byte("again")},
		)
	})
	if err != nil {
		t.Fatal(err)
	}

	rows, err := pool.Query(ctx, `SELECT msg_id, tenant_id, subject, payload, headers FROM outbox ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		msgID, tenant, subject, payload string
		headers                         map[string]string
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var o row
		var payload []byte
		err := r.Scan(&o.msgID, &o.tenant, &o.subject, &payload, &o.headers)
		o.payload = string(payload)
		return o, err
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []row{
		{"a:0", "a", prefix + ".ev", "first", map[string]string{}},
		{"a:1", "a", prefix + ".ev", "one", map[string]string{}},
		{"b:1", "b", prefix + ".ev", "", map[string]string{}},
		{"a:2", "a", prefix + ".other", "two", map[string]string{"X-Kind": "k"}},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("outbox rows in id order:\n got %v\nwant %v", got, want)
	}

	relay := NewRelay(pool, js, log)
	background(t, relay.Run)
	relay.Notify()
	eventually(t, 10*time.Second, "every row sent", func() bool { return countRows(t, pool, "true") == 0 })
	var ofA []string
	for _, m := range streamMsgs(t, js, stream) {
		if m.Header.Get(HeaderTenant) == "a" {
			ofA = append(ofA, m.Header.Get(jetstream.MsgIDHeader))
		}
		if id := m.Header.Get(jetstream.MsgIDHeader); id == "a:2" && m.Header.Get("X-Kind") != "k" {
			t.Errorf("a:2 published without its header")
		}
	}
	if !slices.Equal(ofA, []string{"a:0", "a:1", "a:2"}) {
		t.Fatalf("tenant a's messages in the stream: %v, want a:0 a:1 a:2", ofA)
	}
}

func TestEnqueueAllWritesNothingWhenOneMessageIsInvalid(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, pool := newOutboxDB(t)

	var inTx int
	err := pgxx.InTx(ctx, pool, func(tx pgx.Tx) error {
		err := EnqueueAll(ctx, tx,
			Message{TenantID: "a", Subject: "x.ev", MsgID: "a:1"},
			Message{TenantID: "a", Subject: "x.*", MsgID: "a:2"},
		)
		if qerr := tx.QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&inTx); qerr != nil {
			return qerr
		}
		return err
	})
	if err == nil || !strings.Contains(err.Error(), `invalid subject "x.*"`) {
		t.Fatalf("EnqueueAll with an invalid subject = %v, want it named", err)
	}
	if inTx != 0 {
		t.Fatalf("%d rows written before the invalid message was refused, want none", inTx)
	}
}

// TestClaimUsesTheOutboxIndexesOnABigOutbox holds the claim to its indexes on an outbox
// of many tenants, most rows sent (kept, WithRetention) and some parked, whether the
// table was analyzed or not: no sequential scan of the outbox, and the test "does a row
// of this tenant wait to retry" answered by outbox_retrying, not by reading every pending
// row of the tenant. It also checks what the claim takes: tenants in turns, and a tenant
// stopped before its row that waits to retry.
func TestClaimUsesTheOutboxIndexesOnABigOutbox(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, pool := newOutboxDB(t)

	// 50 tenants × 1,000 sent rows, 20 parked; 3 tenants × 2,000 pending rows, the
	// 11th row of tenant p1 waiting to retry.
	if _, err := pool.Exec(ctx, `
		INSERT INTO outbox (tenant_id, subject, msg_id, payload, sent_at)
		SELECT 't' || (i % 50), 'x.ev', 'sent:' || i, '\x00', now() FROM generate_series(1, 50000) i;
		INSERT INTO outbox (tenant_id, subject, msg_id, payload, parked_at, park_reason)
		SELECT 't' || i, 'x.ev', 'parked:' || i, '\x00', now(), 'test' FROM generate_series(1, 20) i;
		INSERT INTO outbox (tenant_id, subject, msg_id, payload)
		SELECT 'p' || (i % 3), 'x.ev', 'pending:' || i, '\x00' FROM generate_series(0, 5999) i;
		UPDATE outbox SET retry_at = now() + interval '1 hour', failures = 1
		WHERE id = (SELECT id FROM outbox WHERE tenant_id = 'p1' AND sent_at IS NULL AND parked_at IS NULL ORDER BY id OFFSET 10 LIMIT 1)`); err != nil {
		t.Fatal(err)
	}
	for _, analyzed := range []bool{false, true} {
		if analyzed {
			if _, err := pool.Exec(ctx, `ANALYZE outbox`); err != nil {
				t.Fatal(err)
			}
		}
		var plan string
		if err := pool.QueryRow(ctx, `EXPLAIN (FORMAT JSON) `+claimSQL, 32, []string{}, []int64{}).Scan(&plan); err != nil {
			t.Fatal(err)
		}
		nodes := planNodes(t, plan)
		for _, n := range nodes {
			if n.Relation == "outbox" && n.NodeType == "Seq Scan" {
				t.Errorf("analyzed=%v: the claim scans the whole outbox:\n%s", analyzed, plan)
			}
			if n.IndexName == "outbox_pending" {
				t.Errorf("analyzed=%v: the claim reads outbox_pending, which the outbox no longer has", analyzed)
			}
		}
		if !slices.ContainsFunc(nodes, func(n pgxx.PlanNode) bool { return n.IndexName == "outbox_retrying" }) {
			t.Errorf("analyzed=%v: the retry test does not read outbox_retrying:\n%s", analyzed, plan)
		}

		var claimed []string
		err := pgxx.InTx(ctx, pool, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, claimSQL, 32, []string{}, []int64{})
			if err != nil {
				return err
			}
			rowsClaimed, err := collectClaim(rows)
			if err != nil {
				return err
			}
			claimed = nil
			for _, o := range rowsClaimed {
				claimed = append(claimed, o.tenantID)
			}
			return errors.New("roll back the claim")
		})
		if err == nil || err.Error() != "roll back the claim" {
			t.Fatal(err)
		}
		perTenant := map[string]int{}
		for _, tenant := range claimed {
			perTenant[tenant]++
		}
		// p1 stops before its 11th row; p0 and p2 share the rest of the batch in turns.
		if want := map[string]int{"p0": 11, "p1": 10, "p2": 11}; fmt.Sprint(perTenant) != fmt.Sprint(want) {
			t.Errorf("analyzed=%v: claimed per tenant %v, want %v", analyzed, perTenant, want)
		}
	}
}

// planNodes flattens an EXPLAIN (FORMAT JSON) plan (pgxx.PlanNodes).
func planNodes(t *testing.T, plan string) []pgxx.PlanNode {
	t.Helper()
	nodes, err := pgxx.PlanNodes(plan)
	if err != nil {
		t.Fatal(err)
	}
	return nodes
}

// Commits that keep coming are relayed in few rounds: after the first, each wake-up
// lingers for more. The linger is long here (300 ms, so commits within 100 ms of a round
// keep it lingering, against commits 5 ms apart) so that a slow machine gathers as many
// commits per round as a fast one.
func TestRelayGathersCommitsThatKeepComingIntoFewRounds(t *testing.T) {
	t.Parallel()
	_, pool := newOutboxDB(t)
	_, js := connect(t, devnats.SharedURL(t), nil)
	stream, prefix := newStream(t, js)
	log, _ := newLog(t)

	relay := NewRelay(pool, js, log, WithLinger(300*time.Millisecond))
	var rounds atomic.Int32
	relay.beforeMark = func() error { rounds.Add(1); return nil }
	background(t, relay.Run)

	const commits = 30
	for i := range commits {
		enqueue(t, pool, Message{TenantID: "t", Subject: prefix + ".ev", MsgID: fmt.Sprintf("m:%d", i)})
		relay.Notify()
		time.Sleep(5 * time.Millisecond)
	}
	eventually(t, 10*time.Second, "every row relayed", func() bool { return countRows(t, pool, "true") == 0 })
	if got := len(streamMsgs(t, js, stream)); got != commits {
		t.Fatalf("stream holds %d messages, want %d", got, commits)
	}
	// The first commit after the quiet start goes alone, the rest in one or two lingers.
	if n := rounds.Load(); n > 5 {
		t.Errorf("%d commits went out in %d rounds, want at most 5: the relay did not linger for the commits that kept coming", commits, n)
	}
}

func TestRelayLingersOnlyWhileCommitsKeepComing(t *testing.T) {
	r := NewRelay(nil, nil, nil)
	for _, c := range []struct {
		idle, want time.Duration
	}{
		{0, 30 * time.Millisecond},
		{9 * time.Millisecond, 30 * time.Millisecond},
		{10 * time.Millisecond, 0},
		{20 * time.Millisecond, 0},
		{time.Second, 0},
	} {
		if got := r.lingerAfter(c.idle); got != c.want {
			t.Errorf("woken %v after its last round, the relay lingers %v; want %v", c.idle, got, c.want)
		}
	}
	if got := NewRelay(nil, nil, nil, WithLinger(0)).lingerAfter(0); got != 0 {
		t.Errorf("WithLinger(0) lingers %v", got)
	}
}
