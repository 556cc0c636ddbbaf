package ingest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/devinfra/devnats"
	"github.com/keyhouse/keyhouse/pkg/events"
	"github.com/keyhouse/keyhouse/pkg/natsx"
	eventsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/events/v1"
	"google.golang.org/protobuf/proto"
)

// A burst on the stream (an import: thousands of events of one tenant, then one of
// another) goes into the log once per event, a batch per transaction, with the fan-out
// run once per new event; an event Postgres refuses fails alone, and a message that is
// no event is terminated, neither holding back the events fetched with them. The figures
// (events/s one at a time and batched) are logged for docs/events.md; timing goals are
// make bench's, not this test's.
func TestABurstIsStoredOnceEachInBatchesAndABadEventFailsAlone(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	// A NATS server of this test's own: the stream and the durable consumer are the
	// production names (events.Stream, Durable), and on a server shared with an earlier
	// run (go test -count=2) they would still hold that run's messages and its unsettled
	// bad event.
	nats, err := devnats.Start(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nats.Stop)
	nc, js, err := natsx.Connect(ctx, nats.URL(), "ingest-test", quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if err := events.EnsureStream(ctx, js, 0); err != nil {
		t.Fatal(err)
	}
	publish := func(ev *eventsv1.Event) {
		t.Helper()
		data, err := proto.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.Publish(ctx, events.Subject(ev.Type), data); err != nil {
			t.Fatal(err)
		}
	}
	count := func() int {
		var n int
		if err := st.DB().QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// burst publishes n events of one tenant, each twice (a relay's re-publish outside the
	// duplicate window), then one of another tenant, and returns that last one.
	burst := func(phase string, n int) *eventsv1.Event {
		for i := range n {
			ev := stamped(events.LicenseIssued("importer", fmt.Sprintf("K-%s-%d", phase, i), "app", "", "", nil, nil, nil), time.Now())
			publish(ev)
			publish(ev)
		}
		other := stamped(events.LicenseRevoked("other-"+phase, "K-other", "app"), time.Now())
		publish(other)
		return other
	}
	// unsettled is how many messages the durable consumer has not settled (acked or
	// terminated): waiting for an ack, or not delivered yet.
	unsettled := func() int {
		t.Helper()
		cons, err := js.Consumer(ctx, events.Stream, Durable)
		if err != nil {
			t.Fatal(err)
		}
		info, err := cons.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.NumAckPending + int(info.NumPending)
	}
	// run consumes with ingester until the log holds want events and the consumer has
	// settled all but wantUnsettled messages, and returns the rate. The ingester acks a
	// batch after its transaction commits, so the log can hold the last batch before its
	// acks are sent: stopping the ingester at that moment would leave them unsent.
	run := func(in *Ingester, want, published, wantUnsettled int) float64 {
		t.Helper()
		rctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() {
			if err := in.Run(rctx, js); err != nil {
				t.Error(err)
			}
		})
		defer func() { cancel(); wg.Wait() }()
		start := time.Now()
		deadline := start.Add(2 * time.Minute)
		for count() < want {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d events stored", count(), want)
			}
			time.Sleep(20 * time.Millisecond)
		}
		rate := float64(published) / time.Since(start).Seconds()
		for unsettled() != wantUnsettled {
			if time.Now().After(deadline) {
				t.Fatalf("%d messages unsettled, want %d", unsettled(), wantUnsettled)
			}
			time.Sleep(20 * time.Millisecond)
		}
		return rate
	}

	const n = 1000
	f := &fanout{}
	burst("one", n)
	oneAtATime := run(New(st, quiet, WithFanout(f), WithBatch(1)), n+1, 2*n+1, 0)

	other := burst("batched", n)
	// A message that is no event, and an event whose tenant Postgres cannot store (a NUL
	// byte in text).
	if _, err := js.Publish(ctx, events.Subject(events.TypeLicenseIssued), []byte("not an event")); err != nil {
		t.Fatal(err)
	}
	publish(stamped(events.LicenseIssued("bad\x00tenant", "K-bad", "app", "", "", nil, nil, nil), time.Now()))
	last := stamped(events.LicenseRevoked("after-the-bad-one", "K-1", "app"), time.Now())
	publish(last)
	batched := run(New(st, quiet, WithFanout(f)), 2*(n+1)+1, 2*n+3, 1)
	t.Logf("events/s through the consumer, %d events each published twice: one per transaction %.0f, batched (%d) %.0f",
		n, oneAtATime, Batch, batched)

	for _, ev := range []*eventsv1.Event{other, last} {
		if _, err := st.Get(ctx, ev.TenantId, ev.Id); err != nil {
			t.Fatalf("%s's event: %v", ev.TenantId, err)
		}
	}
	if got := count(); got != 2*(n+1)+1 {
		t.Fatalf("%d events in the log, want %d (each once, the bad one not)", got, 2*(n+1)+1)
	}
	if f.stored.Load() != int32(2*(n+1)+1) || f.committed.Load() != f.stored.Load() {
		t.Fatalf("fan-out ran for %d/%d events, want %d", f.stored.Load(), f.committed.Load(), 2*(n+1)+1)
	}
	// The message that is no event was terminated; the bad event waits for a redelivery
	// (an outage and a bad row look alike to the consumer): pending, not lost. run
	// waited for that before stopping the ingester; it still holds with it stopped.
	if got := unsettled(); got != 1 {
		t.Fatalf("%d messages unsettled, want the bad event alone", got)
	}
}
