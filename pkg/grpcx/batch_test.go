package grpcx

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Calls from many goroutines at once, some sending batches themselves (the call that
// finds a slot free) and some waiting for others': each gets its own item's result,
// no batch is larger than MaxSize, no more than MaxInFlight are out at once, and when
// all is answered every slot is free again.
func TestBatcherAnswersEveryCallWithinItsBoundsAndFreesEverySlot(t *testing.T) {
	const maxSize, maxInFlight, calls = 3, 2, 2000
	var out, most atomic.Int64
	b := &Batcher[int, int]{MaxSize: maxSize, MaxInFlight: maxInFlight}
	b.Send = func(_ context.Context, items []int) ([]int, error) {
		if len(items) > maxSize {
			t.Errorf("a batch of %d calls, want at most %d", len(items), maxSize)
		}
		n := out.Add(1)
		defer out.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
		results := make([]int, len(items))
		for i, item := range items {
			results[i] = -item
		}
		return results, nil
	}
	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() {
			if got, err := b.Do(context.Background(), i); err != nil || got != -i {
				t.Errorf("call %d: %d, %v; want %d", i, got, err, -i)
			}
		})
	}
	wg.Wait()
	if n := most.Load(); n > maxInFlight {
		t.Errorf("%d batches out at once, want at most %d", n, maxInFlight)
	}
	// A hand-off after the last answer may still be on its way to giving its slot up.
	deadline := time.Now().Add(10 * time.Second)
	for {
		b.mu.Lock()
		inFlight, queued := b.inFlight, len(b.queue)
		b.mu.Unlock()
		if inFlight == 0 && queued == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after every answer: %d slots taken, %d calls queued; want none", inFlight, queued)
		}
		time.Sleep(time.Millisecond)
	}
}
