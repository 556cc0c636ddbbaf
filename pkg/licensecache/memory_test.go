package licensecache

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// liveHeap is the heap in use after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// A full cache's own bookkeeping (beyond the keys and values its callers give it) stays
// small enough that a process with several full caches fits its container
// (docs/operations.md, "Memory"). It was about 780 bytes an answer when each key's
// answers were a map of their own, which made the gateway's three caches alone 230 MiB.
func TestAFullCacheCostsLittleBeyondItsKeysAndValues(t *testing.T) {
	keys := make([]string, maxEntries)
	for i := range keys {
		keys[i] = fmt.Sprintf("KH-%08d-AAAA-BBBB-CCCC-DDDD", i)
	}
	before := liveHeap()
	c := NewLive[int](time.Second, time.Minute)
	for _, k := range keys {
		if _, err := c.Get(k, func() (int, error) { return 1, nil }); err != nil {
			t.Fatal(err)
		}
	}
	after := liveHeap()
	perAnswer := float64(after-before) / maxEntries
	t.Logf("%d answers: %.0f bytes each beyond key and value", maxEntries, perAnswer)
	if perAnswer > 300 {
		t.Fatalf("%.0f bytes of bookkeeping an answer; want at most 300", perAnswer)
	}
	runtime.KeepAlive(c)
	runtime.KeepAlive(keys)
}
