package licensecache

import (
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"
)

func constant(v int64) func() (int64, error) { return func() (int64, error) { return v, nil } }

// The default bound holds with more licenses checked than it: two and a half times
// maxEntries distinct keys (past the bound, every new key evicts one, so a million would
// end the same) leave at most maxEntries answers, and the keys asked about all along are
// still answered from the cache (their load is never called again).
func TestManyMoreKeysThanTheBoundStayWithinItAndHotKeysSurvive(t *testing.T) {
	c, _ := newTestCache(time.Hour)
	hot := make([]string, 100)
	for i := range hot {
		hot[i] = "hot-" + strconv.Itoa(i)
		if _, err := c.Get(hot[i], constant(int64(i))); err != nil {
			t.Fatal(err)
		}
	}
	for i := range maxEntries * 5 / 2 {
		if _, err := c.Get("cold-"+strconv.Itoa(i), constant(1)); err != nil {
			t.Fatal(err)
		}
		if i%1000 == 0 {
			for j, k := range hot {
				v, _ := c.Get(k, func() (int64, error) {
					t.Fatalf("hot key %s was evicted after %d cold keys", k, i)
					return 0, nil
				})
				if v != int64(j) {
					t.Fatalf("hot key %s: got %d", k, v)
				}
			}
		}
		if c.entries.size > maxEntries {
			t.Fatalf("%d answers kept after %d keys, bound %d", c.entries.size, i+1, maxEntries)
		}
	}
	if len(c.entries.slots) != len(c.entries.ring) || c.entries.size != maxEntries {
		t.Fatalf("table out of shape: %d slots, %d on the ring, size %d", len(c.entries.slots), len(c.entries.ring), c.entries.size)
	}
}

// Expired answers leave before the ones in use, even when they were used.
func TestEvictionTakesExpiredAnswersFirst(t *testing.T) {
	c, clk := newTestCache(time.Second)
	c.entries = newTable[int64](3)
	getTwice := func(k string) {
		_, _ = c.Get(k, constant(1))
		_, _ = c.Get(k, constant(1)) // a hit: in use
	}
	getTwice("a")
	getTwice("b")
	clk.Advance(2 * time.Second)
	getTwice("c") // a and b have expired
	getTwice("d")
	getTwice("e")
	for _, k := range []string{"c", "d", "e"} {
		if _, ok := c.entries.slots[k]; !ok {
			t.Fatalf("live key %s evicted while expired ones were kept: %v", k, keysOfTable(c))
		}
	}
}

// Several answers about one key (qualifiers) count one each toward the bound, and an
// invalidation gives their room back.
func TestQualifiedAnswersCountTowardTheBound(t *testing.T) {
	c, _ := newTestCache(time.Hour)
	c.entries = newTable[int64](10)
	for i := range 25 {
		k := "K" + strconv.Itoa(i%5)
		_, _ = c.GetUntil(k, strconv.Itoa(i), func() (int64, time.Time, error) { return 1, time.Time{}, nil })
		if c.entries.size > 10 {
			t.Fatalf("size %d over the bound 10", c.entries.size)
		}
	}
	for k := range c.entries.slots {
		c.Invalidate(k)
	}
	if c.entries.size != 0 || len(c.entries.ring) != 0 {
		t.Fatalf("after invalidating every key: size %d, ring %d", c.entries.size, len(c.entries.ring))
	}
}

// Concurrent readers and writers past the bound keep the table consistent (run with
// -race).
func TestBoundUnderConcurrentUse(t *testing.T) {
	c, _ := newTestCache(time.Hour)
	c.entries = newTable[int64](64)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				k := fmt.Sprintf("k%d", (w*7919+i*31)%500)
				if i%50 == 0 {
					c.Invalidate(k)
					continue
				}
				_, _ = c.Get(k, constant(1))
			}
		})
	}
	wg.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries.size > 64 || c.entries.size != len(c.entries.ring) || len(c.entries.slots) != len(c.entries.ring) {
		t.Fatalf("size %d, ring %d, slots %d (bound 64)", c.entries.size, len(c.entries.ring), len(c.entries.slots))
	}
	for i, s := range c.entries.ring {
		if s.at != i || c.entries.slots[s.key] != s {
			t.Fatalf("ring slot %d names %q at %d", i, s.key, s.at)
		}
	}
}

func keysOfTable(c *Cache[int64]) []string {
	var out []string
	for k := range c.entries.slots {
		out = append(out, k)
	}
	return out
}

// A key with more answers than fit in its slice (fewAnswers) keeps every one of them,
// each told apart by its qualifier, replaced in place, expiring on its own, and dropped
// together by an invalidation.
func TestAKeyWithManyQualifiedAnswersKeepsEachApart(t *testing.T) {
	c, clk := newTestCache(time.Hour)
	const n = 3 * fewAnswers
	load := func(v int64, until time.Time) func() (int64, time.Time, error) {
		return func() (int64, time.Time, error) { return v, until, nil }
	}
	for i := range n {
		// The even ones end in a minute, the odd ones with the TTL.
		var until time.Time
		if i%2 == 0 {
			until = clk.Now().Add(time.Minute)
		}
		if v, _ := c.GetUntil("K", "machine-"+strconv.Itoa(i), load(int64(i), until)); v != int64(i) {
			t.Fatalf("answer %d: got %d", i, v)
		}
	}
	if c.entries.size != n || c.entries.slots["K"].answers.len() != n {
		t.Fatalf("size %d, key's answers %d; want %d", c.entries.size, c.entries.slots["K"].answers.len(), n)
	}
	for i := range n {
		v, _ := c.GetUntil("K", "machine-"+strconv.Itoa(i), func() (int64, time.Time, error) {
			t.Fatalf("answer %d of %d was not kept", i, n)
			return 0, time.Time{}, nil
		})
		if v != int64(i) {
			t.Fatalf("answer %d: got %d (answers mixed up)", i, v)
		}
	}
	clk.Advance(2 * time.Minute)
	reloaded := 0
	for i := range n {
		_, _ = c.GetUntil("K", "machine-"+strconv.Itoa(i), func() (int64, time.Time, error) {
			reloaded++
			return int64(i), time.Time{}, nil
		})
	}
	if reloaded != n/2 {
		t.Fatalf("%d answers loaded again after a minute; want the %d that ended then", reloaded, n/2)
	}
	if c.entries.size != n {
		t.Fatalf("size %d after replacing answers in place; want %d", c.entries.size, n)
	}
	c.Invalidate("K")
	if c.entries.size != 0 || len(c.entries.ring) != 0 {
		t.Fatalf("after the invalidation: size %d, ring %d", c.entries.size, len(c.entries.ring))
	}
}

// Answers that have all expired leave as new ones are stored, not only once the table is
// full: a cache of answers that live a second holds about a second's worth of them, not
// the bound's worth of dead ones, and keeps every live one.
func TestExpiredAnswersLeaveWithoutWaitingForTheBound(t *testing.T) {
	c, clk := newTestCache(time.Second)
	const perStep, steps = 100, 100 // 100 new keys every 100 ms: 1,000 live at a time
	for step := range steps {
		for i := range perStep {
			k := fmt.Sprintf("K%d-%d", step, i)
			if _, err := c.Get(k, constant(1)); err != nil {
				t.Fatal(err)
			}
		}
		clk.Advance(100 * time.Millisecond)
		if live := min(step+1, 10) * perStep; c.entries.size > 3*live {
			t.Fatalf("after %d stores: %d answers kept, %d of them live; want at most %d", (step+1)*perStep, c.entries.size, live, 3*live)
		}
	}
	// Every answer still live is still answered from the cache.
	for step := steps - 9; step < steps; step++ {
		for i := range perStep {
			k := fmt.Sprintf("K%d-%d", step, i)
			_, _ = c.Get(k, func() (int64, error) {
				t.Fatalf("live answer %s was dropped", k)
				return 0, nil
			})
		}
	}
	if len(c.entries.slots) != len(c.entries.ring) || c.entries.size != len(c.entries.ring) {
		t.Fatalf("table out of shape: %d slots, %d on the ring, size %d", len(c.entries.slots), len(c.entries.ring), c.entries.size)
	}
}

// An answer loaded again after it expired takes the old one's place: it is served from
// the cache afterwards and counted once, with one answer about the key as with many.
func TestAnAnswerLoadedAgainReplacesTheExpiredOne(t *testing.T) {
	for _, n := range []int{1, fewAnswers, 3 * fewAnswers} {
		c, clk := newTestCache(time.Second)
		get := func(i int, load func() (int64, time.Time, error)) int64 {
			v, err := c.GetUntil("K", "machine-"+strconv.Itoa(i), load)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		for i := range n {
			get(i, func() (int64, time.Time, error) { return 1, time.Time{}, nil })
		}
		clk.Advance(2 * time.Second)
		for i := range n {
			get(i, func() (int64, time.Time, error) { return 2, time.Time{}, nil })
		}
		for i := range n {
			if v := get(i, func() (int64, time.Time, error) {
				t.Fatalf("%d answers: answer %d reloaded was not kept", n, i)
				return 0, time.Time{}, nil
			}); v != 2 {
				t.Fatalf("%d answers: answer %d is %d after its reload, want 2", n, i, v)
			}
		}
		if c.entries.size != n || c.entries.slots["K"].answers.len() != n {
			t.Fatalf("%d answers: size %d, key's answers %d after the reloads", n, c.entries.size, c.entries.slots["K"].answers.len())
		}
	}
}
