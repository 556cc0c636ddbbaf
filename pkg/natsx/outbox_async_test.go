package natsx

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/devinfra/devnats"
	"github.com/nats-io/nats.go/jetstream"
)

// A batch is published all at once, so a tenant's rows behind its failed row reach the
// stream in the same round. The relay marks none of them sent: the tenant's sequence
// stops at its failure, the rows after it go again once it is settled (parked here), and
// the stream keeps each of them once (the re-publish is dropped by its Nats-Msg-Id).
// Other tenants' rows in the same batch are marked sent at once.
func TestAsyncBatchStopsATenantAtItsFirstFailureAndRepublishesTheRestOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, pool := newOutboxDB(t)
	_, js := connect(t, devnats.SharedURL(t), nil)
	prefix := uniqueName(t)
	stream := strings.ToUpper(prefix)
	if err := EnsureStream(ctx, js, jetstream.StreamConfig{Name: stream, Subjects: []string{prefix + ".>"},
		Storage: jetstream.FileStorage, MaxMsgSize: 1024}); err != nil {
		t.Fatal(err)
	}
	pc := countPublishes(t, prefix+".>")
	log, _ := newLog(t)

	enqueue(t, pool,
		Message{TenantID: "a", Subject: prefix + ".ev", MsgID: "a:1"},
		Message{TenantID: "b", Subject: prefix + ".ev", MsgID: "b:1"},
		Message{TenantID: "a", Subject: prefix + ".ev", MsgID: "a:2-refused", Payload: make([]byte, 2048)},
		Message{TenantID: "b", Subject: prefix + ".ev", MsgID: "b:2"},
		Message{TenantID: "a", Subject: prefix + ".ev", MsgID: "a:3"},
		Message{TenantID: "a", Subject: prefix + ".ev", MsgID: "a:4"},
		Message{TenantID: "b", Subject: prefix + ".ev", MsgID: "b:3"},
	)
	// Sent rows kept (WithRetention) for their sent_at.
	background(t, NewRelay(pool, js, log, WithMaxFailures(2), WithPollInterval(50*time.Millisecond), WithRetention(time.Hour)).Run)
	eventually(t, 30*time.Second, "refused row parked and the rest sent", func() bool {
		return countRows(t, pool, "sent_at IS NULL AND parked_at IS NULL") == 0
	})

	parked := parkedRows(t, pool)
	p, ok := parked["a:2-refused"]
	if len(parked) != 1 || !ok || !strings.Contains(p.reason, "publish failed 2 times") {
		t.Fatalf("parked rows = %+v, want only a:2-refused, failed 2 times", parked)
	}
	sentAt := map[string]time.Time{}
	rows, err := pool.Query(ctx, `SELECT msg_id, sent_at FROM outbox WHERE sent_at IS NOT NULL`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		var at time.Time
		if err := rows.Scan(&id, &at); err != nil {
			t.Fatal(err)
		}
		sentAt[id] = at
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a:1", "b:1", "b:2", "b:3"} {
		if at, ok := sentAt[id]; !ok || !at.Before(p.parkedAt) {
			t.Errorf("%s sent at %v, want before a:2-refused was parked at %v", id, at, p.parkedAt)
		}
	}
	for _, id := range []string{"a:3", "a:4"} {
		if at, ok := sentAt[id]; !ok || at.Before(p.parkedAt) {
			t.Errorf("%s marked sent at %v, before its tenant's earlier row was settled (parked at %v)", id, at, p.parkedAt)
		}
	}

	// a:3 and a:4 went out with the first batch and again after the park...
	seen := pc.snapshot(t)
	for _, id := range []string{"a:3", "a:4"} {
		if seen[id] < 2 {
			t.Errorf("%s published %d times, want at least 2 (in the failed batch, then after the park)", id, seen[id])
		}
	}
	// ...and the stream kept every published event exactly once, each tenant's in order.
	got := streamMsgs(t, js, stream)
	count := map[string]int{}
	order := map[string][]string{}
	for _, m := range got {
		id := m.Header.Get(jetstream.MsgIDHeader)
		count[id]++
		tenant := m.Header.Get(HeaderTenant)
		order[tenant] = append(order[tenant], id)
	}
	for _, id := range []string{"a:1", "a:3", "a:4", "b:1", "b:2", "b:3"} {
		if count[id] != 1 {
			t.Errorf("stream holds %s %d times, want once", id, count[id])
		}
	}
	if len(got) != 6 {
		t.Errorf("stream holds %d messages, want 6", len(got))
	}
	if want := "[a:1 a:3 a:4]"; fmt.Sprint(order["a"]) != want {
		t.Errorf("tenant a's messages in the stream: %v, want %s", order["a"], want)
	}
	if want := "[b:1 b:2 b:3]"; fmt.Sprint(order["b"]) != want {
		t.Errorf("tenant b's messages in the stream: %v, want %s", order["b"], want)
	}
}

// By default a published row is deleted with its batch: the outbox holds only what is
// pending or parked, each event still reaches the stream once and in its tenant's order,
// and rows sent under an earlier retention are cleaned up.
func TestPublishedRowsAreDeletedUnlessRetentionKeepsThem(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, pool := newOutboxDB(t)
	_, js := connect(t, devnats.SharedURL(t), nil)
	stream, prefix := newStream(t, js)
	log, _ := newLog(t)

	if _, err := pool.Exec(ctx, `INSERT INTO outbox (tenant_id, subject, msg_id, payload, sent_at, parked_at, park_reason) VALUES
		('a', 'x.ev', 'sent-earlier', '', now() - interval '1 minute', NULL, NULL),
		('a', 'x.ev', 'parked', '', NULL, now(), 'too large')`); err != nil {
		t.Fatal(err)
	}
	var msgs []Message
	for i := range 40 {
		tenant := []string{"a", "b", "c"}[i%3]
		msgs = append(msgs, Message{TenantID: tenant, Subject: prefix + ".ev", MsgID: fmt.Sprintf("%s:%02d", tenant, i)})
	}
	enqueue(t, pool, msgs...)
	background(t, NewRelay(pool, js, log, WithBatchSize(8)).Run)
	eventually(t, 30*time.Second, "only the parked row left", func() bool {
		return countRows(t, pool, "true") == 1 && countRows(t, pool, "msg_id = 'parked' AND parked_at IS NOT NULL") == 1
	})

	got := streamMsgs(t, js, stream)
	if len(got) != len(msgs) {
		t.Fatalf("stream holds %d messages, want %d", len(got), len(msgs))
	}
	order := map[string][]string{}
	for _, m := range got {
		tenant := m.Header.Get(HeaderTenant)
		order[tenant] = append(order[tenant], m.Header.Get(jetstream.MsgIDHeader))
	}
	for _, m := range msgs {
		want := order[m.TenantID]
		if len(want) == 0 || want[0] != m.MsgID {
			t.Fatalf("tenant %s's next message in the stream is %v, want %s (once, in order)", m.TenantID, want, m.MsgID)
		}
		order[m.TenantID] = want[1:]
	}
}
