package natsx

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/keyhouse/keyhouse/devinfra"
	"github.com/keyhouse/keyhouse/devinfra/devnats"
	"github.com/keyhouse/keyhouse/devinfra/testkit"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func enqueue(t *testing.T, pool *pgxpool.Pool, msgs ...Message) {
	t.Helper()
	err := pgxx.InTx(context.Background(), pool, func(tx pgx.Tx) error {
		for _, m := range msgs {
			if err := Enqueue(context.Background(), tx, m); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func countRows(t *testing.T, pool *pgxpool.Pool, where string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM outbox WHERE "+where).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func streamMsgs(t *testing.T, js jetstream.JetStream, stream string) []*jetstream.RawStreamMsg {
	t.Helper()
	ctx := context.Background()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("get msg %d: %v", seq, err)
		}
		out = append(out, m)
	}
	return out
}

// publishCounter counts, per Nats-Msg-Id, every publish that reaches the server on
// subjects, duplicates included: JetStream dedupes what it stores, not what is sent, so
// this is how a test sees a relay sending a row twice.
type publishCounter struct {
	nc   *nats.Conn
	mu   sync.Mutex
	seen map[string]int
}

func countPublishes(t *testing.T, subjects string) *publishCounter {
	t.Helper()
	nc, err := nats.Connect(devnats.SharedURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	pc := &publishCounter{nc: nc, seen: map[string]int{}}
	if _, err := nc.Subscribe(subjects, func(m *nats.Msg) {
		pc.mu.Lock()
		pc.seen[m.Header.Get(jetstream.MsgIDHeader)]++
		pc.mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return pc
}

// snapshot returns the counts after every publish the server has already routed to us.
func (pc *publishCounter) snapshot(t *testing.T) map[string]int {
	t.Helper()
	if err := pc.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	pc.mu.Lock()
	defer pc.mu.Unlock()
	out := make(map[string]int, len(pc.seen))
	for k, v := range pc.seen {
		out[k] = v
	}
	return out
}

func TestEnqueueRejectsInvalidMessages(t *testing.T) {
	t.Parallel()
	ok := Message{TenantID: "t1", Subject: "a.b", MsgID: "id"}
	cases := map[string]func(m *Message){
		"no tenant":         func(m *Message) { m.TenantID = "" },
		"no msg id":         func(m *Message) { m.MsgID = "" },
		"no subject":        func(m *Message) { m.Subject = "" },
		"wildcard subject":  func(m *Message) { m.Subject = "a.*" },
		"space in subject":  func(m *Message) { m.Subject = "a b" },
		"empty token":       func(m *Message) { m.Subject = "a..b" },
		"reserved header":   func(m *Message) { m.Header = map[string]string{"Nats-Msg-Id": "x"} },
		"tenant header set": func(m *Message) { m.Header = map[string]string{HeaderTenant: "t2"} },
	}
	if err := ok.validate(); err != nil {
		t.Fatalf("valid message rejected: %v", err)
	}
	for name, mutate := range cases {
		m := ok
		mutate(&m)
		if err := m.validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestRolledBackEnqueuePublishesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, pool := newOutboxDB(t)
	_, js := connect(t, devnats.SharedURL(t), nil)
	stream, prefix := newStream(t, js)
	log, _ := newLog(t)

	errBusiness := errors.New("business change failed")
	err := pgxx.InTx(ctx, pool, func(tx pgx.Tx) error {
		if err := Enqueue(ctx, tx, Message{TenantID: "t1", Subject: prefix + ".deleted", MsgID: "rolled-back", Payload: []byte("x")}); err != nil {
			return err
		}
		return errBusiness
	})
	if !errors.Is(err, errBusiness) {
		t.Fatalf("InTx = %v", err)
	}
	// A committed marker after it: once the marker is in the stream, the relay has been
	// through every row there is, so "nothing else arrived" is a fact, not a timeout.
	enqueue(t, pool, Message{TenantID: "t1", Subject: prefix + ".marker", MsgID: "marker"})

	relay := NewRelay(pool, js, log, WithRetention(time.Hour)) // sent rows kept, to count them
	background(t, relay.Run)
	relay.Notify()
	eventually(t, 10*time.Second, "marker sent", func() bool { return countRows(t, pool, "sent_at IS NOT NULL") == 1 })

	msgs := streamMsgs(t, js, stream)
	if len(msgs) != 1 || msgs[0].Header.Get(jetstream.MsgIDHeader) != "marker" {
		t.Fatalf("stream holds %d messages, want only the marker", len(msgs))
	}
	if n := countRows(t, pool, "true"); n != 1 {
		t.Fatalf("outbox has %d rows, want 1", n)
	}
}

func TestCommittedMessageIsPublishedOnceDespiteCrashBeforeMarkSent(t *testing.T) {
	t.Parallel()
	_, pool := newOutboxDB(t)
	_, js := connect(t, devnats.SharedURL(t), nil)
	stream, prefix := newStream(t, js)
	log, _ := newLog(t)
	pc := countPublishes(t, prefix+".>")

	msgs := []Message{
		{TenantID: "t1", Subject: prefix + ".license.deleted", MsgID: "license.deleted:K1", Payload: []byte(`{"key":"K1"}`), Header: map[string]string{"Content-Type": "application/json"}},
		{TenantID: "t2", Subject: prefix + ".license.deleted", MsgID: "license.deleted:K2", Payload: []byte(`{"key":"K2"}`)},
		{TenantID: "t1", Subject: prefix + ".license.issued", MsgID: "license.issued:K3"},
	}
	enqueue(t, pool, msgs...)
	// The same event announced again by a retried operation keeps the first row.
	enqueue(t, pool, Message{TenantID: "t1", Subject: prefix + ".license.deleted", MsgID: "license.deleted:K1", Payload: []byte("second")})
	if n := countRows(t, pool, "true"); n != 3 {
		t.Fatalf("outbox has %d rows after a repeated msg id, want 3", n)
	}

	// The relay "crashes" twice after publishing its batch and before marking it sent.
	crashes := 0
	relay := NewRelay(pool, js, log, WithMaxBackoff(50*time.Millisecond))
	relay.beforeMark = func() error {
		if crashes < 2 {
			crashes++
			return errors.New("simulated crash before mark-sent")
		}
		return nil
	}
	background(t, relay.Run)
	eventually(t, 10*time.Second, "all rows sent", func() bool { return countRows(t, pool, "sent_at IS NULL") == 0 })

	// The relay really did send each row three times...
	for _, m := range msgs {
		if n := pc.snapshot(t)[m.MsgID]; n != 3 {
			t.Errorf("%s published %d times, want 3 (two crashes, one success)", m.MsgID, n)
		}
	}
	// ...and the stream kept each exactly once, with its payload, headers and tenant.
	got := streamMsgs(t, js, stream)
	if len(got) != len(msgs) {
		t.Fatalf("stream holds %d messages, want %d", len(got), len(msgs))
	}
	for i, m := range msgs {
		g := got[i]
		if g.Header.Get(jetstream.MsgIDHeader) != m.MsgID || g.Subject != m.Subject || string(g.Data) != string(m.Payload) {
			t.Errorf("message %d = %s %s %q, want %s %s %q", i, g.Header.Get(jetstream.MsgIDHeader), g.Subject, g.Data, m.MsgID, m.Subject, m.Payload)
		}
		if g.Header.Get(HeaderTenant) != m.TenantID {
			t.Errorf("message %d tenant header = %q, want %q", i, g.Header.Get(HeaderTenant), m.TenantID)
		}
		for k, v := range m.Header {
			if g.Header.Get(k) != v {
				t.Errorf("message %d header %s = %q, want %q", i, k, g.Header.Get(k), v)
			}
		}
	}
}

func TestRelayKeepsRowsWhileNATSIsDownAndDeliversWhenItIsBack(t *testing.T) {
	t.Parallel()
	// A NATS server of this test's own, stopped and restarted on the same port and store.
	dir := filepath.Join(testkit.Dir(t), uniqueName(t))
	port, err := devinfra.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	srv, err := devnats.Start(dir, port)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Stop() }()
	url := srv.URL()

	_, pool := newOutboxDB(t)
	log, rec := newLog(t)
	nc, js := connect(t, url, log)
	stream, prefix := newStream(t, js)

	srv.Stop()
	eventually(t, 10*time.Second, "client notices the outage", func() bool { return !nc.IsConnected() })

	var msgs []Message
	for i := range 3 {
		msgs = append(msgs, Message{TenantID: "t1", Subject: prefix + ".ev", MsgID: fmt.Sprintf("ev:%d", i), Payload: []byte{byte(i)}})
	}
	enqueue(t, pool, msgs...)
	relay := NewRelay(pool, js, log, WithMaxBackoff(100*time.Millisecond), WithPublishTimeout(time.Second))
	background(t, relay.Run)

	// Several failed rounds (each counts on the head row), nothing marked, one log line.
	eventually(t, 15*time.Second, "three failed publish rounds", func() bool {
		return countRows(t, pool, "attempts >= 3 AND last_error IS NOT NULL") == 1
	})
	if n := countRows(t, pool, "sent_at IS NOT NULL"); n != 0 {
		t.Fatalf("%d rows marked sent while NATS was down", n)
	}
	if n := countRows(t, pool, "attempts > 0"); n != 1 {
		t.Fatalf("%d rows attempted, want only the head row (a failed row stops its batch)", n)
	}

	if srv, err = devnats.Start(dir, port); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "outbox drained after NATS came back", func() bool {
		return countRows(t, pool, "sent_at IS NULL") == 0
	})
	got := streamMsgs(t, js, stream)
	if len(got) != len(msgs) {
		t.Fatalf("stream holds %d messages, want %d", len(got), len(msgs))
	}
	for i, m := range msgs {
		if id := got[i].Header.Get(jetstream.MsgIDHeader); id != m.MsgID {
			t.Errorf("stream message %d is %s, want %s (id order)", i, id, m.MsgID)
		}
	}
	if f, r := rec.count("outbox relay failing, rows kept for retry"), rec.count("outbox relay recovered"); f != 1 || r != 1 {
		t.Errorf("logged %d failing and %d recovered lines, want one each", f, r)
	}
	if d, r := rec.count("nats disconnected, reconnecting"), rec.count("nats reconnected"); d != 1 || r != 1 {
		t.Errorf("logged %d disconnect and %d reconnect lines, want one each", d, r)
	}
}

func TestTwoRelaysDeliverEachMessageExactlyOnce(t *testing.T) {
	t.Parallel()
	url, pool := newOutboxDB(t)
	_, js := connect(t, devnats.SharedURL(t), nil)
	stream, prefix := newStream(t, js)
	log, _ := newLog(t)
	pc := countPublishes(t, prefix+".>")

	const total = 200
	var msgs []Message
	for i := range total {
		msgs = append(msgs, Message{TenantID: "t1", Subject: prefix + ".ev", MsgID: fmt.Sprintf("ev:%d", i)})
	}
	enqueue(t, pool, msgs...)

	// Force the overlap: relay A claims and publishes its first batch, then holds the row
	// locks, unmarked, until relay B (started only now) has published a batch of its own.
	// Without SKIP LOCKED, B would block behind A (and A give up here); without row
	// locks, B would re-send A's rows.
	aHolding := make(chan struct{})
	bPublished := make(chan struct{})
	var bOnce, aOnce sync.Once
	a := NewRelay(openPool(t, url), js, log, WithBatchSize(5))
	a.beforeMark = func() error {
		var err error
		aOnce.Do(func() {
			close(aHolding)
			select {
			case <-bPublished:
			case <-time.After(10 * time.Second):
				err = errors.New("relay B never published while A held its batch")
				t.Error(err)
			}
		})
		return err
	}
	b := NewRelay(openPool(t, url), js, log, WithBatchSize(5))
	b.beforeMark = func() error { bOnce.Do(func() { close(bPublished) }); return nil }
	background(t, a.Run)
	select {
	case <-aHolding:
	case <-time.After(10 * time.Second):
		t.Fatal("relay A never published a batch")
	}
	background(t, b.Run)

	eventually(t, 30*time.Second, "all rows sent", func() bool { return countRows(t, pool, "sent_at IS NULL") == 0 })
	seen := pc.snapshot(t)
	if len(seen) != total {
		t.Fatalf("%d distinct messages published, want %d", len(seen), total)
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("%s published %d times", id, n)
		}
	}
	if got := len(streamMsgs(t, js, stream)); got != total {
		t.Fatalf("stream holds %d messages, want %d", got, total)
	}
}

func TestRelayCleansUpOldSentRowsOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, pool := newOutboxDB(t)
	_, js := connect(t, devnats.SharedURL(t), nil)
	_, prefix := newStream(t, js)
	log, _ := newLog(t)

	_, err := pool.Exec(ctx, `INSERT INTO outbox (tenant_id, subject, msg_id, payload, created_at, sent_at) VALUES
		('t1', $1, 'old-sent',    '', now() - interval '3 hours', now() - interval '2 hours'),
		('t1', $1, 'recent-sent', '', now() - interval '3 hours', now() - interval '10 minutes')`, prefix+".ev")
	if err != nil {
		t.Fatal(err)
	}
	enqueue(t, pool, Message{TenantID: "t1", Subject: prefix + ".ev", MsgID: "unsent"})
	if _, err := pool.Exec(ctx, `UPDATE outbox SET created_at = now() - interval '3 hours' WHERE msg_id = 'unsent'`); err != nil {
		t.Fatal(err)
	}

	background(t, NewRelay(pool, js, log, WithRetention(time.Hour)).Run)
	eventually(t, 10*time.Second, "old sent row deleted and unsent row sent", func() bool {
		return countRows(t, pool, "msg_id = 'old-sent'") == 0 && countRows(t, pool, "sent_at IS NULL") == 0
	})
	if n := countRows(t, pool, "msg_id IN ('recent-sent', 'unsent')"); n != 2 {
		t.Fatalf("%d of the rows inside retention kept, want 2", n)
	}
}

// parkedInfo is what an operator's listing shows of a parked row.
type parkedInfo struct {
	reason   string
	parkedAt time.Time
}

func parkedRows(t *testing.T, pool *pgxpool.Pool) map[string]parkedInfo {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT msg_id, park_reason, parked_at FROM outbox WHERE parked_at IS NOT NULL`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]parkedInfo{}
	for rows.Next() {
		var id string
		var p parkedInfo
		if err := rows.Scan(&id, &p.reason, &p.parkedAt); err != nil {
			t.Fatal(err)
		}
		out[id] = p
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func gaugeValue(t *testing.T, c prometheus.Collector, name string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no %s in %v", name, families)
	return 0
}

// The H1 incident: one row over NATS's max payload at the head of the outbox stopped
// every later row of every tenant. It is parked at once, with its reason, and the rows
// behind it go out, with two relays splitting the work.
func TestOversizedRowIsParkedAndDoesNotBlockTheRowsBehindIt(t *testing.T) {
	// Not parallel: it reads a process-wide counter that other tests' relays
	// (parking rows of their own) would move at the same time.
	url, pool := newOutboxDB(t)
	nc, js := connect(t, devnats.SharedURL(t), nil)
	stream, prefix := newStream(t, js)
	log, rec := newLog(t)
	parkedBefore := testutil.ToFloat64(outboxParked.WithLabelValues(parkTooLarge))

	huge := make([]byte, nc.MaxPayload()) // with its headers, over the limit
	msgs := []Message{{TenantID: "free", Subject: prefix + ".ev", MsgID: "huge", Payload: huge}}
	const others = 60
	for i := range others {
		msgs = append(msgs, Message{TenantID: fmt.Sprintf("t%d", i%6), Subject: prefix + ".ev", MsgID: fmt.Sprintf("ev:%d", i)})
	}
	msgs = append(msgs, Message{TenantID: "free", Subject: prefix + ".ev", MsgID: "free:after"})
	enqueue(t, pool, msgs...)

	background(t, NewRelay(openPool(t, url), js, log, WithBatchSize(5), WithRetention(time.Hour)).Run)
	background(t, NewRelay(openPool(t, url), js, log, WithBatchSize(5), WithRetention(time.Hour)).Run)
	eventually(t, 30*time.Second, "every row sent or parked", func() bool {
		return countRows(t, pool, "sent_at IS NULL AND parked_at IS NULL") == 0
	})

	if n := countRows(t, pool, "sent_at IS NOT NULL"); n != others+1 {
		t.Fatalf("%d rows sent, want %d (every row but the oversized one)", n, others+1)
	}
	if got := len(streamMsgs(t, js, stream)); got != others+1 {
		t.Fatalf("stream holds %d messages, want %d", got, others+1)
	}
	parked := parkedRows(t, pool)
	want := fmt.Sprintf("exceeds the NATS max payload of %d bytes", nc.MaxPayload())
	if p, ok := parked["huge"]; len(parked) != 1 || !ok || !strings.Contains(p.reason, want) {
		t.Fatalf("parked rows = %+v, want only huge, with a reason containing %q", parked, want)
	}
	if got := rise(t, outboxParked.WithLabelValues(parkTooLarge), parkedBefore); got != 1 {
		t.Errorf("keyhouse_outbox_parked_total{kind=too_large} rose by %v, want 1", got)
	}
	if got := gaugeValue(t, outboxCollector{pool: pool}, "keyhouse_outbox_parked"); got != 1 {
		t.Errorf("keyhouse_outbox_parked = %v, want 1", got)
	}
	if got := gaugeValue(t, outboxCollector{pool: pool}, "keyhouse_outbox_backlog"); got != 0 {
		t.Errorf("keyhouse_outbox_backlog = %v, want 0 (a parked row is not backlog)", got)
	}
	if n := rec.count("outbox row parked: it will not be published until an operator requeues it"); n != 1 {
		t.Errorf("logged %d parked lines, want 1", n)
	}
}

// A row the stream refuses (here: larger than the stream's MaxMsgSize) is retried with a
// delay and parked after WithMaxFailures attempts. Meanwhile it holds back its own
// tenant's later rows, which keep their order, and no other tenant's. Requeued the
// documented way once the stream takes it, it goes out.
func TestRefusedRowHoldsBackOnlyItsTenantThenIsParkedAndCanBeRequeued(t *testing.T) {
	// Not parallel: it reads a process-wide counter that other tests' relays
	// (parking rows of their own) would move at the same time.
	ctx := context.Background()
	_, pool := newOutboxDB(t)
	_, js := connect(t, devnats.SharedURL(t), nil)
	prefix := uniqueName(t)
	stream := strings.ToUpper(prefix)
	cfg := jetstream.StreamConfig{Name: stream, Subjects: []string{prefix + ".>"}, Storage: jetstream.FileStorage, MaxMsgSize: 1024}
	if err := EnsureStream(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	log, _ := newLog(t)
	parkedBefore := testutil.ToFloat64(outboxParked.WithLabelValues(parkFailed))

	enqueue(t, pool,
		Message{TenantID: "a", Subject: prefix + ".ev", MsgID: "a:refused", Payload: make([]byte, 2048)},
		Message{TenantID: "a", Subject: prefix + ".ev", MsgID: "a:after"},
		Message{TenantID: "b", Subject: prefix + ".ev", MsgID: "b:1"},
	)
	background(t, NewRelay(pool, js, log, WithMaxFailures(3), WithPollInterval(50*time.Millisecond), WithRetention(time.Hour)).Run)
	eventually(t, 30*time.Second, "refused row parked and the rest sent", func() bool {
		return countRows(t, pool, "sent_at IS NULL AND parked_at IS NULL") == 0
	})

	parked := parkedRows(t, pool)
	p, ok := parked["a:refused"]
	if len(parked) != 1 || !ok || !strings.Contains(p.reason, "publish failed 3 times") {
		t.Fatalf("parked rows = %+v, want only a:refused, failed 3 times", parked)
	}
	if n := countRows(t, pool, "msg_id = 'a:refused' AND failures = 3 AND attempts = 3"); n != 1 {
		t.Errorf("a:refused does not show 3 attempts and 3 failures")
	}
	var bSent, aAfterSent time.Time
	if err := pool.QueryRow(ctx, `SELECT (SELECT sent_at FROM outbox WHERE msg_id = 'b:1'),
		(SELECT sent_at FROM outbox WHERE msg_id = 'a:after')`).Scan(&bSent, &aAfterSent); err != nil {
		t.Fatal(err)
	}
	if !bSent.Before(p.parkedAt) {
		t.Errorf("b:1 sent at %v, not before a:refused was parked at %v: another tenant was held back", bSent, p.parkedAt)
	}
	if aAfterSent.Before(p.parkedAt) {
		t.Errorf("a:after sent at %v, before a:refused was parked at %v: it overtook its tenant's earlier row", aAfterSent, p.parkedAt)
	}
	if got := rise(t, outboxParked.WithLabelValues(parkFailed), parkedBefore); got != 1 {
		t.Errorf("keyhouse_outbox_parked_total{kind=failed} rose by %v, want 1", got)
	}

	// The operator raises the stream's limit and requeues, as docs/operations.md says.
	cfg.MaxMsgSize = 4096
	if err := EnsureStream(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, requeueSQL, "a:refused"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "requeued row sent", func() bool { return countRows(t, pool, "sent_at IS NULL") == 0 })
	if got := len(streamMsgs(t, js, stream)); got != 3 {
		t.Fatalf("stream holds %d messages, want 3", got)
	}
}

// requeueSQL is the requeue statement docs/operations.md gives operators.
const requeueSQL = `UPDATE outbox SET parked_at = NULL, park_reason = NULL, failures = 0, retry_at = NULL WHERE msg_id = $1`

func TestCleanupDeletesParkedRowsAfterTheirRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, pool := newOutboxDB(t)
	_, js := connect(t, devnats.SharedURL(t), nil)
	log, _ := newLog(t)
	_, err := pool.Exec(ctx, `INSERT INTO outbox (tenant_id, subject, msg_id, payload, parked_at, park_reason) VALUES
		('t1', 'x.ev', 'old-parked',    '', now() - interval '2 hours', 'too large'),
		('t1', 'x.ev', 'recent-parked', '', now() - interval '10 minutes', 'too large')`)
	if err != nil {
		t.Fatal(err)
	}
	background(t, NewRelay(pool, js, log, WithParkedRetention(time.Hour)).Run)
	eventually(t, 10*time.Second, "old parked row deleted", func() bool { return countRows(t, pool, "msg_id = 'old-parked'") == 0 })
	if n := countRows(t, pool, "msg_id = 'recent-parked' AND parked_at IS NOT NULL"); n != 1 {
		t.Fatal("a parked row inside its retention was deleted or requeued")
	}
}

// One tenant's backlog does not delay another's row: tenants take turns within a batch.
func TestTenantsTakeTurnsSoABacklogDelaysNobodyElse(t *testing.T) {
	t.Parallel()
	_, pool := newOutboxDB(t)
	_, js := connect(t, devnats.SharedURL(t), nil)
	stream, prefix := newStream(t, js)
	log, _ := newLog(t)

	const backlog, batch = 300, 10
	var msgs []Message
	for i := range backlog {
		msgs = append(msgs, Message{TenantID: "busy", Subject: prefix + ".ev", MsgID: fmt.Sprintf("busy:%03d", i)})
	}
	enqueue(t, pool, msgs...)
	enqueue(t, pool, Message{TenantID: "quiet", Subject: prefix + ".ev", MsgID: "quiet:1"})

	background(t, NewRelay(pool, js, log, WithBatchSize(batch)).Run)
	eventually(t, 60*time.Second, "all rows sent", func() bool { return countRows(t, pool, "sent_at IS NULL") == 0 })
	got := streamMsgs(t, js, stream)
	if len(got) != backlog+1 {
		t.Fatalf("stream holds %d messages, want %d", len(got), backlog+1)
	}
	var busy []string
	for i, m := range got {
		id := m.Header.Get(jetstream.MsgIDHeader)
		if id == "quiet:1" && i >= batch {
			t.Errorf("the quiet tenant's row went out %dth, behind the busy tenant's backlog (want within the first batch of %d)", i+1, batch)
		}
		if strings.HasPrefix(id, "busy:") {
			busy = append(busy, id)
		}
	}
	for i, id := range busy {
		if want := fmt.Sprintf("busy:%03d", i); id != want {
			t.Fatalf("busy tenant's message %d is %s, want %s (its own order kept)", i, id, want)
		}
	}
}
