package licensecache

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// joined waits until n callers wait for the flight of key and qualifier.
func joined(t *testing.T, c *Cache[int64], key, qualifier string, n int) {
	t.Helper()
	waitFor(t, "callers to join the flight", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		f := c.flights[key][qualifier]
		return f != nil && f.joined == n
	})
}

// within fails the test unless get returns within a few seconds (a caller that should
// not wait for a blocked load).
func within(t *testing.T, what string, get func() (int64, error)) int64 {
	t.Helper()
	type answer struct {
		v   int64
		err error
	}
	done := make(chan answer, 1)
	go func() { v, err := get(); done <- answer{v, err} }()
	select {
	case a := <-done:
		if a.err != nil {
			t.Fatalf("%s: %v", what, a.err)
		}
		return a.v
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: still waiting", what)
		return 0
	}
}

// blocked is a load that holds until release is closed, counting its runs.
type blocked struct {
	started chan struct{}
	release chan struct{}
	runs    atomic.Int64
	v       int64
}

func newBlocked(v int64) *blocked {
	return &blocked{started: make(chan struct{}, 100), release: make(chan struct{}), v: v}
}

func (b *blocked) load() (int64, error) {
	b.runs.Add(1)
	b.started <- struct{}{}
	<-b.release
	return b.v, nil
}

func TestConcurrentMissesOfOneAnswerShareOneLoad(t *testing.T) {
	c, _ := newTestCache(time.Hour)
	b := newBlocked(1)
	const n = 32
	got := make([]int64, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			v, err := c.Get("K", b.load)
			if err != nil {
				t.Error(err)
			}
			got[i] = v
		})
	}
	<-b.started
	joined(t, c, "K", "", n-1)

	// Another answer about the key, and another key, have loads of their own.
	if v := within(t, "another qualifier", func() (int64, error) {
		return c.GetUntil("K", "host-2", func() (int64, time.Time, error) { return 2, time.Time{}, nil })
	}); v != 2 {
		t.Fatalf("another qualifier got %d, want its own 2", v)
	}
	if v := within(t, "another key", func() (int64, error) {
		return c.Get("L", func() (int64, error) { return 3, nil })
	}); v != 3 {
		t.Fatalf("another key got %d, want its own 3", v)
	}

	close(b.release)
	wg.Wait()
	if runs := b.runs.Load(); runs != 1 {
		t.Fatalf("%d loads for %d concurrent misses, want 1", runs, n)
	}
	for i, v := range got {
		if v != 1 {
			t.Fatalf("caller %d got %d, want 1", i, v)
		}
	}
	c.mu.Lock()
	left := len(c.flights)
	c.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d keys still have flights after every load ended", left)
	}
}

// A caller that arrives after an invalidation never gets an answer read before it; those
// that joined before it still get the flight's answer.
func TestAnInvalidationDetachesTheLoadsUnderWay(t *testing.T) {
	for name, invalidate := range map[string]func(*Cache[int64]){
		"Invalidate": func(c *Cache[int64]) { c.Invalidate("K") },
		"Clear":      func(c *Cache[int64]) { c.Clear() },
		"reconnect":  func(c *Cache[int64]) { c.setLive(true) },
	} {
		t.Run(name, func(t *testing.T) {
			c, _ := newTestCache(time.Hour)
			old := newBlocked(1)
			const n = 8
			got := make([]int64, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					v, err := c.GetUntil("K", "host-1", func() (int64, time.Time, error) {
						v, err := old.load()
						return v, time.Time{}, err
					})
					if err != nil {
						t.Error(err)
					}
					got[i] = v
				})
			}
			<-old.started
			joined(t, c, "K", "host-1", n-1)
			invalidate(c)

			var fresh atomic.Int64
			if v := within(t, "a caller after the invalidation", func() (int64, error) {
				return c.GetUntil("K", "host-1", func() (int64, time.Time, error) {
					fresh.Add(1)
					return 2, time.Time{}, nil
				})
			}); v != 2 || fresh.Load() != 1 {
				t.Fatalf("after the invalidation: got %d with %d loads of its own, want 2 from 1", v, fresh.Load())
			}

			close(old.release)
			wg.Wait()
			if runs := old.runs.Load(); runs != 1 {
				t.Fatalf("%d loads before the invalidation, want 1", runs)
			}
			for i, v := range got {
				if v != 1 {
					t.Fatalf("caller %d, which joined before the invalidation, got %d, want 1", i, v)
				}
			}
		})
	}
}

// The leader's error (perhaps its own cancellation) fails the leader alone; the callers
// that waited for it load again, sharing one new load.
func TestALoadsErrorIsNotShared(t *testing.T) {
	c, _ := newTestCache(time.Hour)
	boom := errors.New("boom")
	started, release := make(chan struct{}), make(chan struct{})
	leader := make(chan error, 1)
	go func() {
		_, err := c.Get("K", func() (int64, error) {
			close(started)
			<-release
			return 0, boom
		})
		leader <- err
	}()
	<-started

	const n = 8
	var reloads atomic.Int64
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			v, err := c.Get("K", func() (int64, error) { reloads.Add(1); return 7, nil })
			if err != nil || v != 7 {
				t.Errorf("a caller that waited for the failed load got %d, %v, want 7 from a load of its own", v, err)
			}
		})
	}
	joined(t, c, "K", "", n)
	close(release)
	if err := <-leader; err != boom {
		t.Fatalf("the leader got %v, want its own error", err)
	}
	wg.Wait()
	if r := reloads.Load(); r != 1 {
		t.Fatalf("%d loads after the failed one, want 1 shared by its %d callers", r, n)
	}
}

// A panicking load goes on panicking in its own caller; those waiting for it do not
// wait forever, they load again.
func TestAPanickingLoadReleasesThoseWaitingForIt(t *testing.T) {
	c, _ := newTestCache(time.Hour)
	started, release := make(chan struct{}), make(chan struct{})
	recovered := make(chan any, 1)
	go func() {
		defer func() { recovered <- recover() }()
		c.Get("K", func() (int64, error) {
			close(started)
			<-release
			panic("load failed")
		})
	}()
	<-started

	const n = 8
	var reloads atomic.Int64
	answers := make(chan int64, n)
	for range n {
		go func() {
			v, err := c.Get("K", func() (int64, error) { reloads.Add(1); return 7, nil })
			if err != nil {
				t.Error(err)
			}
			answers <- v
		}()
	}
	joined(t, c, "K", "", n)
	close(release)
	if r := <-recovered; r != "load failed" {
		t.Fatalf("the leader recovered %v, want its load's panic", r)
	}
	for range n {
		select {
		case v := <-answers:
			if v != 7 {
				t.Fatalf("a caller that waited for the panicking load got %d, want 7", v)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("callers still waiting for a load that panicked")
		}
	}
	if r := reloads.Load(); r != 1 {
		t.Fatalf("%d loads after the panic, want 1", r)
	}
}
