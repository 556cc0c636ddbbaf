package webhooks

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/keyhouse/keyhouse/devinfra/testkit"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
	"github.com/keyhouse/keyhouse/pkg/webhook"
)

// fanout stores n events of tenant in one fan-out, as one batch of the log's ingest: their
// deliveries share one due time.
func (f *fixture) fanout(tenant, prefix string, n int) []string {
	f.t.Helper()
	evs := make([]NewEvent, n)
	ids := make([]string, n)
	for i := range evs {
		ids[i] = fmt.Sprintf("%s_%05d", prefix, i)
		evs[i] = NewEvent{TenantID: tenant, ID: ids[i], Type: "license.issued", Body: []byte(`{"id":"` + ids[i] + `"}`)}
	}
	err := pgxx.InTx(context.Background(), f.store.db, func(tx pgx.Tx) error {
		_, err := f.store.FanoutAll(context.Background(), tx, evs, f.clock.Now())
		return err
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return ids
}

// A claim writes its lease with a HOT update (no index entry, no copy of the row into
// the indexes), and the delivery log still shows a claimed delivery's next attempt as the
// lease's end.
func TestClaimIsAHotUpdate(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	ep, _ := f.endpoint("t1", "http://127.0.0.1:1/hook")
	f.fanout("t1", "evt_hot", 2)
	err := pgxx.InTx(ctx, f.store.db, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, claimNextSQL, f.clock.Now(), DefaultLease, "t1", ep.ID, time.Unix(0, 0), 0)
		if err != nil {
			return err
		}
		rows.Close()
		var updated, hot int64
		if err := tx.QueryRow(ctx, `SELECT pg_stat_get_xact_tuples_updated('webhook_deliveries'::regclass),
			pg_stat_get_xact_tuples_hot_updated('webhook_deliveries'::regclass)`).Scan(&updated, &hot); err != nil {
			return err
		}
		if updated != 1 || hot != 1 {
			t.Errorf("the claim updated %d rows, %d of them HOT; want 1 HOT update", updated, hot)
		}
		return errRollback
	})
	if err != errRollback {
		t.Fatal(err)
	}
	d, ok, err := f.store.ClaimNext(ctx, f.clock.Now(), DefaultLease, "t1", ep.ID, Cursor{})
	if err != nil || !ok {
		t.Fatalf("claim: %v %v", ok, err)
	}
	for _, got := range f.deliveries("t1", ep.ID) {
		if got.ID != d.ID {
			continue
		}
		if got.Status != StatusPending || got.NextAttemptAt == nil || !got.NextAttemptAt.Equal(f.clock.Now().Add(DefaultLease)) {
			t.Fatalf("a claimed delivery shows %s, next attempt %v; want pending, at the lease's end", got.Status, got.NextAttemptAt)
		}
	}
	// Leased, it is not due again until the lease runs out.
	if next, ok, err := f.store.ClaimNext(ctx, f.clock.Now(), DefaultLease, "t1", ep.ID, Cursor{}); err != nil || !ok || next.ID == d.ID {
		t.Fatalf("second claim: %v %v %v, want the other delivery", next.ID, ok, err)
	}
	if _, ok, err := f.store.ClaimNext(ctx, f.clock.Now(), DefaultLease, "t1", ep.ID, Cursor{}); err != nil || ok {
		t.Fatalf("third claim: %v %v, want none while both are leased", ok, err)
	}
}

// One lane delivers a fan-out batch (deliveries sharing a due time) once each, in the
// order they were stored: the cursor is (due time, seq), not the due time alone.
func TestLaneDeliversAFanoutBatchInOrder(t *testing.T) {
	f := newFixture(t)
	var mu sync.Mutex
	var got []string
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var ev struct{ ID string }
		_ = json.Unmarshal(body, &ev)
		mu.Lock()
		got = append(got, ev.ID)
		mu.Unlock()
	}))
	t.Cleanup(recv.Close)
	f.endpoint("t1", recv.URL)
	ids := f.fanout("t1", "evt_batch", 20)
	f.worker.Concurrency, f.worker.PerEndpoint = 4, 1
	if n := f.worker.RunOnce(context.Background()); n != 1 {
		t.Fatalf("the claiming round took %d deliveries, want one lane", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(got, ids) {
		t.Fatalf("the lane delivered %v, want %v", got, ids)
	}
}

// The lane's claim from its cursor reads the due index from the cursor on, not the
// entries the endpoint's earlier deliveries left at its front, even while an old snapshot
// keeps those entries from being marked dead, analyzed or not.
func TestClaimFromTheCursorSkipsTheDeadFront(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	ep, _ := f.endpoint("t1", "http://127.0.0.1:1/hook")
	f.fanout("t1", "evt_front", 8000)
	var seqs []int64
	rows, err := f.store.db.Query(ctx, `SELECT seq FROM webhook_deliveries WHERE tenant_id = 't1' ORDER BY seq`)
	if err == nil {
		seqs, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	}
	if err != nil || len(seqs) != 8000 {
		t.Fatalf("seqs: %d %v", len(seqs), err)
	}
	// An older snapshot (a long transaction elsewhere in the database) holds the versions
	// the successes leave behind.
	defer testkit.HoldSnapshot(t, f.store.db)()
	done := seqs[6999]
	if _, err := f.store.db.Exec(ctx, `UPDATE webhook_deliveries SET status = 'succeeded', next_attempt_at = NULL WHERE seq <= $1`, done); err != nil {
		t.Fatal(err)
	}
	cursor := Cursor{DueAt: f.clock.Now(), Seq: done}
	for _, analyzed := range []bool{false, true} {
		if analyzed {
			if _, err := f.store.db.Exec(ctx, `ANALYZE webhook_deliveries`); err != nil {
				t.Fatal(err)
			}
		}
		buffers := func(c Cursor) (int64, int64) {
			var plan string
			var seq int64
			err := pgxx.InTx(ctx, f.store.db, func(tx pgx.Tx) error {
				if err := tx.QueryRow(ctx, `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) `+claimNextSQL,
					f.clock.Now(), DefaultLease, "t1", ep.ID, c.DueAt, c.Seq).Scan(&plan); err != nil {
					return err
				}
				if err := tx.QueryRow(ctx, `SELECT seq FROM webhook_deliveries WHERE leased_until IS NOT NULL`).Scan(&seq); err != nil {
					return err
				}
				return errRollback
			})
			if err != errRollback {
				t.Fatal(err)
			}
			buffers, err := pgxx.PlanBuffers(plan)
			if err != nil {
				t.Fatal(err)
			}
			return buffers, seq
		}
		fromCursor, seq := buffers(cursor)
		if seq != seqs[7000] {
			t.Fatalf("analyzed=%v: the claim from the cursor took seq %d, want %d", analyzed, seq, seqs[7000])
		}
		fromFront, seq := buffers(Cursor{})
		if seq != seqs[7000] {
			t.Fatalf("analyzed=%v: the claim from the front took seq %d, want %d", analyzed, seq, seqs[7000])
		}
		// From the front the scan reads the index entries and heap pages of the 7,000 dead
		// versions; from the cursor, a descent of the index and the row it takes.
		if fromCursor*5 > fromFront {
			t.Errorf("analyzed=%v: the claim read %d buffers from the cursor, %d from the front; want a fifth or less", analyzed, fromCursor, fromFront)
		}
		t.Logf("analyzed=%v: %d buffers from the cursor, %d from the front", analyzed, fromCursor, fromFront)
	}
}

var errRollback = fmt.Errorf("rollback")

// A success finds its delivery by the primary key, analyzed or not, however many
// deliveries of the tenant are due: through the due index it read them all.
func TestSuccessUsesThePrimaryKey(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	ep, _ := f.endpoint("t1", "http://127.0.0.1:1/hook")
	f.fanout("t1", "evt_success", 2000)
	var id string
	var version pgtype.TID
	if err := f.store.db.QueryRow(ctx, `SELECT id, ctid FROM webhook_deliveries WHERE endpoint_id = $1 ORDER BY seq DESC LIMIT 1`, ep.ID).Scan(&id, &version); err != nil {
		t.Fatal(err)
	}
	for _, analyzed := range []bool{false, true} {
		if analyzed {
			if _, err := f.store.db.Exec(ctx, `ANALYZE webhook_deliveries`); err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range []struct {
			name, sql string
			args      []any
			want      string
		}{
			{"at its version", recordSuccessSQL, []any{"t1", id, []byte(`[]`), version}, "Tid Scan "},
			{"by key", recordSuccessByKeySQL, []any{"t1", id, []byte(`[]`)}, "Index Scan webhook_deliveries_pkey"},
		} {
			var plan string
			if err := f.store.db.QueryRow(ctx, `EXPLAIN (FORMAT JSON) `+c.sql, c.args...).Scan(&plan); err != nil {
				t.Fatal(err)
			}
			var indexes []string
			for _, n := range planNodes(t, plan) {
				if n.Relation == "webhook_deliveries" {
					indexes = append(indexes, n.NodeType+" "+n.IndexName)
				}
			}
			if !slices.Equal(indexes, []string{"ModifyTable ", c.want}) {
				t.Errorf("analyzed=%v: the success %s reads webhook_deliveries by %v, want %s", analyzed, c.name, indexes, c.want)
			}
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

// A connection keeps the generic plan Postgres chose for a prepared statement until the
// table is next analyzed, and it chooses one after five executions, when the generic plan
// costs no more than the custom ones. On a new deployment's first deliveries the table is
// a page or two, where an index that starts with tenant_id (webhook_deliveries_by_event)
// costs the same as the primary key; the success and the lane's join to its claimed row
// then walked every delivery of the tenant until autovacuum's first ANALYZE, a minute or
// more of 30-60 ms statements that held row locks the other lanes waited on. Both must
// read their row by its version however small the table was when their connection
// first ran them.
func TestSuccessAndLaneClaimFindTheirRowWhateverTheTableWas(t *testing.T) {
	f := newFixture(t, pgxx.WithMaxConns(1)) // one connection: its plans and its statistics
	ctx := context.Background()
	ep, _ := f.endpoint("t1", "http://127.0.0.1:1/hook")
	deliver := func(n int) {
		t.Helper()
		var at Cursor
		for range n {
			d, ok, err := f.store.ClaimNext(ctx, f.clock.Now(), DefaultLease, "t1", ep.ID, at)
			if err != nil || !ok {
				t.Fatalf("claim: %v, %v", ok, err)
			}
			if err := f.store.recordSuccess(ctx, d, []byte(`[]`)); err != nil {
				t.Fatal(err)
			}
			at = d.At
		}
	}
	// Index entries read by the deliveries, the due index's aside (the claims' scans).
	indexReads := func() int64 {
		t.Helper()
		// The connection's counters reach the statistics when it next goes idle.
		if _, err := f.store.db.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
			t.Fatal(err)
		}
		var n int64
		if err := f.store.db.QueryRow(ctx, `SELECT coalesce(sum(idx_tup_read), 0) FROM pg_stat_user_indexes
			WHERE relname = 'webhook_deliveries' AND indexrelname <> 'webhook_deliveries_due_seq'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	f.fanout("t1", "evt_first", 10)
	deliver(10) // more than five runs of each statement while the table is one page
	f.fanout("t1", "evt_backlog", 3000)
	before := indexReads()
	deliver(20)
	if read := indexReads() - before; read > 0 {
		t.Errorf("20 claims and successes read %d entries of webhook_deliveries' other indexes; want none (their rows by version)", read)
	}
}

// A success whose delivery moved after its claim (its lease ran out and another claim
// took it) is not where the claim left it; it is recorded all the same, by key, once.
func TestSuccessOfADeliveryThatMovedIsRecorded(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	ep, _ := f.endpoint("t1", "http://127.0.0.1:1/hook")
	f.fanout("t1", "evt_moved", 1)
	first, ok, err := f.store.ClaimNext(ctx, f.clock.Now(), DefaultLease, "t1", ep.ID, Cursor{})
	if err != nil || !ok {
		t.Fatalf("claim: %v, %v", ok, err)
	}
	f.clock.Add(DefaultLease + time.Second)
	second, ok, err := f.store.ClaimNext(ctx, f.clock.Now(), DefaultLease, "t1", ep.ID, Cursor{})
	if err != nil || !ok || second.ID != first.ID {
		t.Fatalf("claim after the lease: %v, %v, %q", ok, err, second.ID)
	}
	if second.Version == first.Version {
		t.Fatal("the second claim left the row where the first did; the test needs it moved")
	}
	if err := f.store.recordSuccess(ctx, first, []byte(`[{"at":"2026-11-25T12:00:00Z","duration_ms":1,"status_code":204}]`)); err != nil {
		t.Fatal(err)
	}
	ds := f.deliveries("t1", ep.ID)
	if len(ds) != 1 || ds[0].Status != StatusSucceeded || len(ds[0].Attempts) != 1 {
		t.Fatalf("deliveries after the success = %+v, want one succeeded with one attempt", ds)
	}
	// The second claim's success finds nothing left to end, by version or by key.
	if err := f.store.recordSuccess(ctx, second, []byte(`[{"at":"2026-11-25T12:01:01Z","duration_ms":1,"status_code":204}]`)); err != nil {
		t.Fatal(err)
	}
	if ds := f.deliveries("t1", ep.ID); len(ds[0].Attempts) != 1 {
		t.Fatalf("a second success was recorded: %+v", ds[0].Attempts)
	}
}

// A lane's success and its next claim go in one round trip: the success is recorded and
// the endpoint's next due delivery comes back claimed; with none due, nothing comes back.
// When the claim fails, the success is recorded all the same (the pipeline is one
// implicit transaction, which the failed claim would otherwise take the success with).
func TestSucceedThenClaimNextRecordsTheSuccessWhateverTheClaimDoes(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	ep, _ := f.endpoint("t1", "http://127.0.0.1:1/hook")
	ids := f.fanout("t1", "evt_pair", 2)
	ok204 := webhook.Result{At: f.clock.Now(), StatusCode: 204, Duration: time.Millisecond}
	status := func() map[string]string {
		got := map[string]string{}
		for _, d := range f.deliveries("t1", ep.ID) {
			got[d.EventID] = d.Status
		}
		return got
	}

	first, ok, err := f.store.ClaimNext(ctx, f.clock.Now(), DefaultLease, "t1", ep.ID, Cursor{})
	if err != nil || !ok || first.EventID != ids[0] {
		t.Fatalf("claim: %v %v %q", ok, err, first.EventID)
	}
	second, ok, err := f.store.SucceedThenClaimNext(ctx, first, ok204, f.clock.Now(), DefaultLease, first.At)
	if err != nil || !ok || second.EventID != ids[1] {
		t.Fatalf("success then claim: %v %v %q, want %s claimed", ok, err, second.EventID, ids[1])
	}
	if got := status(); got[ids[0]] != StatusSucceeded || got[ids[1]] != StatusPending {
		t.Fatalf("statuses %v, want the first succeeded and the second pending", got)
	}
	if _, ok, err := f.store.ClaimNext(ctx, f.clock.Now(), DefaultLease, "t1", ep.ID, Cursor{}); err != nil || ok {
		t.Fatalf("the second delivery is not leased: claimed again (%v, %v)", ok, err)
	}

	// Every claim fails from now on (a trigger refuses a lease being written); the success
	// of the second delivery is still recorded, and the error returned.
	if _, err := f.store.db.Exec(ctx, `CREATE FUNCTION refuse_claims() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN IF NEW.leased_until IS NOT NULL THEN RAISE EXCEPTION 'claims refused'; END IF; RETURN NEW; END $$;
		CREATE TRIGGER refuse_claims BEFORE UPDATE ON webhook_deliveries FOR EACH ROW EXECUTE FUNCTION refuse_claims()`); err != nil {
		t.Fatal(err)
	}
	f.fanout("t1", "evt_after", 1)
	if _, _, err := f.store.SucceedThenClaimNext(ctx, second, ok204, f.clock.Now(), DefaultLease, second.At); err == nil {
		t.Fatal("the failed claim was not reported")
	}
	if got := status(); got[ids[1]] != StatusSucceeded {
		t.Fatalf("the success before a failed claim: %s, want %s", got[ids[1]], StatusSucceeded)
	}
}

// A failed attempt is recorded in one statement at the version its claim left, with the
// schedule's next attempt computed from the tries the claim read; one whose delivery
// moved since its claim (its lease ran out and another claim took it) is recorded by key.
func TestFailureIsRecordedAtItsVersionOrByKey(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	ep, _ := f.endpoint("t1", "http://127.0.0.1:1/hook")
	f.fanout("t1", "evt_fail", 1)
	refused := webhook.Result{At: f.clock.Now(), Error: "connection refused"}
	sched := webhook.DefaultSchedule
	first, ok, err := f.store.ClaimNext(ctx, f.clock.Now(), DefaultLease, "t1", ep.ID, Cursor{})
	if err != nil || !ok || first.Tries != 0 {
		t.Fatalf("claim: %v %v, tries %d", ok, err, first.Tries)
	}
	if _, err := f.store.Record(ctx, first, refused, sched, 72*time.Hour, nil); err != nil {
		t.Fatal(err)
	}
	byID := func(id string) Delivery {
		for _, d := range f.deliveries("t1", ep.ID) {
			if d.ID == id {
				return d
			}
		}
		t.Fatalf("delivery %s not found", id)
		return Delivery{}
	}
	// The schedule's first retry (30 s, jittered): a wrong count of tries would give another.
	if d := byID(first.ID); d.Status != StatusPending || len(d.Attempts) != 1 || d.NextAttemptAt == nil ||
		d.NextAttemptAt.Sub(refused.At) < 24*time.Second || d.NextAttemptAt.Sub(refused.At) > 36*time.Second {
		t.Fatalf("after one failure: %s, %d attempts, next %v; want pending, 1, the first retry's", d.Status, len(d.Attempts), d.NextAttemptAt)
	}
	// Its retry fails too: the claim read one try, so the next wait is the second step's
	// (1 min, jittered).
	f.clock.Set(*byID(first.ID).NextAttemptAt)
	retry, ok, err := f.store.ClaimNext(ctx, f.clock.Now(), DefaultLease, "t1", ep.ID, Cursor{})
	if err != nil || !ok || retry.ID != first.ID || retry.Tries != 1 {
		t.Fatalf("retry claim: %v %v %q, tries %d; want %s with 1", ok, err, retry.ID, retry.Tries, first.ID)
	}
	refusedAgain := webhook.Result{At: f.clock.Now(), Error: "connection refused"}
	if _, err := f.store.Record(ctx, retry, refusedAgain, sched, 72*time.Hour, nil); err != nil {
		t.Fatal(err)
	}
	if d := byID(first.ID); len(d.Attempts) != 2 || d.NextAttemptAt == nil ||
		d.NextAttemptAt.Sub(refusedAgain.At) < 48*time.Second || d.NextAttemptAt.Sub(refusedAgain.At) > 72*time.Second {
		t.Fatalf("after two failures: %d attempts, next in %v; want 2, the second retry's", len(d.Attempts), d.NextAttemptAt.Sub(refusedAgain.At))
	}
	if got, err := f.store.GetEndpoint(ctx, "t1", ep.ID); err != nil || !got.Enabled {
		t.Fatalf("endpoint %+v %v", got, err)
	}
	// Another delivery, claimed twice: the first claim's failure finds it by key.
	f.fanout("t1", "evt_moved", 1)
	old, ok, err := f.store.ClaimNext(ctx, f.clock.Now(), DefaultLease, "t1", ep.ID, Cursor{})
	if err != nil || !ok || old.ID == first.ID {
		t.Fatalf("claim: %v %v %q", ok, err, old.ID)
	}
	f.clock.Add(DefaultLease + time.Second)
	again, ok, err := f.store.ClaimNext(ctx, f.clock.Now(), DefaultLease, "t1", ep.ID, Cursor{})
	if err != nil || !ok || again.ID != old.ID || again.Version == old.Version {
		t.Fatalf("claim after the lease: %v %v %q; want the same delivery, moved", ok, err, again.ID)
	}
	if _, err := f.store.Record(ctx, old, refused, sched, 72*time.Hour, nil); err != nil {
		t.Fatal(err)
	}
	if d := byID(old.ID); d.Status != StatusPending || len(d.Attempts) != 1 {
		t.Fatalf("the moved delivery after its failure: %s with %d attempts; want pending with 1", d.Status, len(d.Attempts))
	}
	// The second claim's attempt succeeds; a failure recorded for the first claim after
	// that finds the delivery ended and leaves it so.
	if err := f.store.recordSuccess(ctx, again, []byte(`[{"at":"2026-11-25T12:01:01Z","duration_ms":1,"status_code":204}]`)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.Record(ctx, old, refused, sched, 72*time.Hour, nil); err != nil {
		t.Fatalf("a failure recorded after the delivery succeeded: %v", err)
	}
	if d := byID(old.ID); d.Status != StatusSucceeded || len(d.Attempts) != 2 {
		t.Fatalf("after a late failure: %s with %d attempts; want succeeded with 2", d.Status, len(d.Attempts))
	}
}

// Attempts of many deliveries of an endpoint whose streak has passed the window fail at
// once, on as many connections: the endpoint is disabled once, with one
// webhook_endpoint.disabled event, whichever attempt's record gets there first.
func TestConcurrentFailuresDisableTheEndpointOnce(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	ep, _ := f.endpoint("t1", "http://127.0.0.1:1/hook")
	const n = 12
	f.fanout("t1", "evt_many", n)
	if _, err := f.store.db.Exec(ctx, `UPDATE webhook_endpoints SET failing_since = $1 WHERE id = $2`, f.clock.Now().Add(-73*time.Hour), ep.ID); err != nil {
		t.Fatal(err)
	}
	due, err := f.store.Claim(ctx, f.clock.Now(), DefaultLease, Bounds{Total: n, PerEndpoint: n, PerTenant: n}, InFlight{})
	if err != nil || len(due) != n {
		t.Fatalf("claimed %d of %d: %v", len(due), n, err)
	}
	refused := webhook.Result{At: f.clock.Now(), Error: "connection refused"}
	var disabledBy atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, d := range due {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			got, err := f.store.Record(ctx, d, refused, webhook.DefaultSchedule, 72*time.Hour, f.worker.OnDisable)
			if err != nil {
				t.Error(err)
			}
			if got != nil {
				disabledBy.Add(1)
			}
		}()
	}
	close(start)
	wg.Wait()
	var events int
	if err := f.store.db.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE subject = 'keyhouse.events.webhook_endpoint.disabled'`).Scan(&events); err != nil {
		t.Fatal(err)
	}
	got, err := f.store.GetEndpoint(ctx, "t1", ep.ID)
	if err != nil || got.Enabled || disabledBy.Load() != 1 || events != 1 {
		t.Fatalf("endpoint enabled %v (%v); %d records disabled it, %d events; want disabled once, one event", got.Enabled, err, disabledBy.Load(), events)
	}
	for _, d := range f.deliveries("t1", ep.ID) {
		if len(d.Attempts) != 1 {
			t.Fatalf("delivery %s has %d attempts, want 1", d.ID, len(d.Attempts))
		}
	}
}

// claimedBy counts claimed deliveries per tenant.
func claimedBy(due []Due) map[string]int {
	n := map[string]int{}
	for _, d := range due {
		n[d.TenantID]++
	}
	return n
}

// The probe's tenants: two with 16 endpoints each and a backlog at every one, and a third
// with one endpoint, created last. One claim of the process's 32 slots gives each of the
// two at most PerTenant and the third all it has due: the two cannot take every slot,
// however many endpoints they keep busy.
func TestClaimSharesTheSlotsBetweenTenants(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	for _, tenant := range []string{"hog1", "hog2"} {
		for range MaxEndpoints {
			f.endpoint(tenant, "http://127.0.0.1:1/hook")
		}
		f.fanout(tenant, "evt_"+tenant, 4)
	}
	f.endpoint("quiet", "http://127.0.0.1:1/hook")
	f.fanout("quiet", "evt_quiet", 2)
	due, err := f.store.Claim(ctx, f.clock.Now(), DefaultLease, Bounds{Total: DefaultConcurrency, PerEndpoint: DefaultPerEndpoint, PerTenant: DefaultPerTenant}, InFlight{})
	if err != nil {
		t.Fatal(err)
	}
	if got := claimedBy(due); got["hog1"] != DefaultPerTenant || got["hog2"] != DefaultPerTenant || got["quiet"] != 2 {
		t.Fatalf("claimed per tenant %v; want %d of each hog and both of quiet's", got, DefaultPerTenant)
	}
	// With its slots in flight, a tenant at its bound gets nothing more; the others do.
	busy := InFlight{Tenants: map[string]int{"hog1": DefaultPerTenant, "hog2": DefaultPerTenant - 1}}
	f.fanout("quiet", "evt_quiet_more", 1)
	due, err = f.store.Claim(ctx, f.clock.Now(), DefaultLease, Bounds{Total: DefaultConcurrency, PerEndpoint: DefaultPerEndpoint, PerTenant: DefaultPerTenant}, busy)
	if err != nil {
		t.Fatal(err)
	}
	if got := claimedBy(due); got["hog1"] != 0 || got["hog2"] != 1 || got["quiet"] != 1 {
		t.Fatalf("claimed per tenant %v with hog1 at its bound and hog2 one under; want 0, 1 and quiet's 1", got)
	}
}

// Slots too few for every due delivery go by turns: each tenant's first before any
// tenant's second, a tenant's attempts in flight counting as turns it had, and within a
// turn the delivery due longest first. Within a tenant its endpoints take turns too.
func TestClaimTakesTurnsBetweenTenantsAndTheirEndpoints(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	// busy's two endpoints have the oldest backlog, and one attempt in flight.
	busy1, _ := f.endpoint("busy", "http://127.0.0.1:1/hook")
	busy2, _ := f.endpoint("busy", "http://127.0.0.1:1/hook")
	f.fanout("busy", "evt_busy", 3)
	f.clock.Add(time.Minute)
	f.endpoint("a", "http://127.0.0.1:1/hook")
	f.fanout("a", "evt_a", 2)
	f.clock.Add(time.Minute)
	f.endpoint("b", "http://127.0.0.1:1/hook")
	f.fanout("b", "evt_b", 2)
	bounds := Bounds{Total: 3, PerEndpoint: DefaultPerEndpoint, PerTenant: DefaultPerTenant}
	due, err := f.store.Claim(ctx, f.clock.Now(), DefaultLease, bounds, InFlight{Tenants: map[string]int{"busy": 1}})
	if err != nil {
		t.Fatal(err)
	}
	if got := claimedBy(due); got["a"] != 1 || got["b"] != 1 || got["busy"] != 1 {
		t.Fatalf("claimed per tenant %v; want a's and b's first turns, then busy's, due longest", got)
	}
	// busy alone, two slots: one delivery of each of its endpoints.
	due, err = f.store.Claim(ctx, f.clock.Now(), DefaultLease, Bounds{Total: 2, PerEndpoint: DefaultPerEndpoint, PerTenant: DefaultPerTenant}, InFlight{Tenants: map[string]int{"a": 7, "b": 7}})
	if err != nil {
		t.Fatal(err)
	}
	endpoints := map[string]bool{}
	for _, d := range due {
		endpoints[d.EndpointID] = d.TenantID == "busy"
	}
	if len(due) != 2 || !endpoints[busy1.ID] || !endpoints[busy2.ID] {
		t.Fatalf("claimed %+v; want one delivery of each of busy's endpoints", due)
	}
}
