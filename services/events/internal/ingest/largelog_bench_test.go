package ingest

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/keyhouse/keyhouse/pkg/events"
	eventsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/events/v1"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// largeLog is how many events the log holds before BenchmarkStoreIntoALargeLog measures:
// its four indexes then outgrow Postgres's shared buffers (128 MB by default).
const largeLog = 1_000_000

// BenchmarkStoreIntoALargeLog stores batches of 20 events (seat changes of 50 tenants,
// what the consumer stores under load) into a log of largeLog events whose ids are of the
// same kind: time-ordered (events.NewID) or the 128 random bits event ids were before.
// An op is one batch. The figures are in docs/PERFORMANCE.md:
//
//	go test -run '^$' -bench StoreIntoALargeLog -benchtime 3000x ./services/events/internal/ingest
func BenchmarkStoreIntoALargeLog(b *testing.B) {
	for _, kind := range []struct {
		name  string
		newID func() string
	}{
		{"time-ordered ids", events.NewID},
		{"random ids", randomEventID},
	} {
		b.Run(kind.name, func(b *testing.B) {
			ctx := context.Background()
			st := newStore(b)
			start := time.Now().Add(-largeLog * time.Millisecond)
			body := []byte(fmt.Sprintf(`{"data":%q}`, make([]byte, 400)))
			if _, err := st.DB().CopyFrom(ctx, pgx.Identifier{"events"}, []string{"id", "tenant_id", "type", "license_key", "created_at", "body"},
				pgx.CopyFromSlice(largeLog, func(i int) ([]any, error) {
					at := start.Add(time.Duration(i) * time.Millisecond)
					return []any{kind.newID(), fmt.Sprintf("t_%d", i%50), events.TypeSeatActivated, fmt.Sprintf("KEY-%d", i%100_000), at, body}, nil
				})); err != nil {
				b.Fatal(err)
			}
			if _, err := st.DB().Exec(ctx, `VACUUM (ANALYZE) events`); err != nil {
				b.Fatal(err)
			}
			ing := New(st, quiet)
			n := 0
			b.ResetTimer()
			for b.Loop() {
				batch := make([]*eventsv1.Event, 20)
				for k := range batch {
					n++
					ev := events.SeatActivated(fmt.Sprintf("t_%d", n%50), fmt.Sprintf("KEY-%d", n%100_000), "app", fmt.Sprintf("host-%d", n))
					now := time.Now()
					ev.Id, ev.CreatedAt, ev.Actor = kind.newID(), timestamppb.New(now), events.Actor(events.ActorAdmin, "")
					batch[k] = ev
				}
				if _, err := ing.StoreAll(ctx, batch); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

var randomIDEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// randomEventID is an event id as they were made before they led with the time.
func randomEventID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "evt_" + randomIDEncoding.EncodeToString(b[:])
}
