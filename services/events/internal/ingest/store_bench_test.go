package ingest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/pkg/events"
	eventsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/events/v1"
)

// BenchmarkStore stores events the way the log's consumer does, a batch per transaction
// (StoreAll, no fan-out), from one writer or from two at once: two events processes, whose
// transactions take turns at the log's append lock (store.InsertAll) from the moment their
// events take their positions to their commit. It reports events per second. Run it on two
// builds back to back to compare them (docs/events.md cites the figures). It also reports
// the WAL each event took, which the machine's other work does not move:
//
//	go test ./services/events/internal/ingest -run '^$' -bench 'BenchmarkStore$' -benchtime 1x -count 3
func BenchmarkStore(b *testing.B) {
	for _, batch := range []int{1, 16, 256} {
		for _, writers := range []int{1, 2} {
			b.Run(fmt.Sprintf("batch=%d/writers=%d", batch, writers), func(b *testing.B) {
				total := max(2048, 64*batch)
				ctx := context.Background()
				for range b.N {
					b.StopTimer()
					st := newStore(b)
					in := New(st, quiet)
					work := make(chan []*eventsv1.Event, total/batch)
					for i := 0; i < total; i += batch {
						evs := make([]*eventsv1.Event, batch)
						for k := range evs {
							evs[k] = stamped(events.LicenseIssued("t1", fmt.Sprintf("K-%d", i+k), "app", "pro", "someone@example.com", nil, nil, nil), time.Now())
						}
						work <- evs
					}
					close(work)
					var walBefore string
					if err := st.DB().QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&walBefore); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
					start := time.Now()
					var wg sync.WaitGroup
					for range writers {
						wg.Go(func() {
							for evs := range work {
								if _, err := in.StoreAll(ctx, evs); err != nil {
									b.Error(err)
									return
								}
							}
						})
					}
					wg.Wait()
					elapsed := time.Since(start)
					b.StopTimer()
					var wal float64
					if err := st.DB().QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::pg_lsn)`, walBefore).Scan(&wal); err != nil {
						b.Fatal(err)
					}
					b.ReportMetric(float64(total)/elapsed.Seconds(), "events/s")
					b.ReportMetric(wal/float64(total), "WAL-B/event")
				}
			})
		}
	}
}
