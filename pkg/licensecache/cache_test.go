package licensecache

import (
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// source is what the cache reads through: a value per key and a count of reads.
type source struct {
	val   atomic.Int64
	reads atomic.Int64
}

func (s *source) load() (int64, error) {
	s.reads.Add(1)
	return s.val.Load(), nil
}

type clock struct{ now atomic.Int64 }

func (c *clock) Now() time.Time          { return time.Unix(0, c.now.Load()) }
func (c *clock) Advance(d time.Duration) { c.now.Add(int64(d)) }

func newTestCache(ttl time.Duration) (*Cache[int64], *clock) {
	c := New[int64](ttl)
	clk := &clock{}
	clk.now.Store(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	c.now = clk.Now
	return c, clk
}

func TestGetReadsThroughOnceUntilTheTTLEnds(t *testing.T) {
	c, clk := newTestCache(time.Second)
	var src source
	src.val.Store(1)
	for range 5 {
		if v, _ := c.Get("K", src.load); v != 1 {
			t.Fatalf("got %d", v)
		}
	}
	if n := src.reads.Load(); n != 1 {
		t.Fatalf("%d reads for five gets, want 1", n)
	}
	src.val.Store(2)
	clk.Advance(time.Second)
	if v, _ := c.Get("K", src.load); v != 2 {
		t.Fatalf("after the TTL: got %d, want the fresh 2", v)
	}
}

// Holds says whether Get would answer without loading: only a servable answer, for the
// qualifier asked, while the cache is in use, and one that will still live the time asked.
func TestHoldsOnlyWhatGetWouldAnswerWithoutLoading(t *testing.T) {
	c, clk := newTestCache(time.Second)
	var src source
	if c.Holds("K", "", 0) {
		t.Fatal("holds a key never loaded")
	}
	c.GetUntil("K", "q", func() (int64, time.Time, error) { v, err := src.load(); return v, time.Time{}, err })
	if !c.Holds("K", "q", 0) || c.Holds("K", "", 0) {
		t.Fatalf("after loading K for q: holds q %v, holds \"\" %v; want true, false", c.Holds("K", "q", 0), c.Holds("K", "", 0))
	}
	if !c.HoldsAbout("K") || c.HoldsAbout("L") {
		t.Fatalf("after loading K: holds about K %v, about L %v; want true, false", c.HoldsAbout("K"), c.HoldsAbout("L"))
	}
	clk.Advance(500 * time.Millisecond)
	if !c.Holds("K", "q", 400*time.Millisecond) || c.Holds("K", "q", 500*time.Millisecond) {
		t.Fatalf("half way through a 1 s life: holds for 400 ms %v, for 500 ms %v; want true, false",
			c.Holds("K", "q", 400*time.Millisecond), c.Holds("K", "q", 500*time.Millisecond))
	}
	c.setLive(false)
	if c.Holds("K", "q", 0) || c.HoldsAbout("K") {
		t.Fatal("holds K while the cache is not in use")
	}
	c.setLive(true)
	c.Get("K", src.load)
	clk.Advance(time.Second)
	if c.Holds("K", "", 0) {
		t.Fatal("holds K past its TTL")
	}
	c.Get("K", src.load)
	c.Invalidate("K")
	if c.Holds("K", "", 0) || c.HoldsAbout("K") {
		t.Fatal("holds K after its invalidation")
	}
	if n := src.reads.Load(); n != 3 {
		t.Fatalf("%d loads; Holds must load nothing (want 3, one per Get)", n)
	}
	if New[int64](0).Holds("K", "", 0) {
		t.Fatal("a nil cache holds K")
	}
}

func TestErrorsAreNotCached(t *testing.T) {
	c, _ := newTestCache(time.Minute)
	boom := errors.New("boom")
	if _, err := c.Get("K", func() (int64, error) { return 0, boom }); err != boom {
		t.Fatal(err)
	}
	if v, err := c.Get("K", func() (int64, error) { return 7, nil }); err != nil || v != 7 {
		t.Fatalf("got %d %v after an error, want a fresh read", v, err)
	}
}

func TestInvalidateDropsTheKeyAndALoadThatOverlappedItIsNotStored(t *testing.T) {
	c, _ := newTestCache(time.Minute)
	var src source
	src.val.Store(1)
	c.Get("K", src.load)
	src.val.Store(2)
	c.Invalidate("K")
	if v, _ := c.Get("K", src.load); v != 2 {
		t.Fatalf("after Invalidate: %d, want 2", v)
	}
	// A read that started before a write and finished after its invalidation answers
	// what it read, but must not keep it.
	src.val.Store(3)
	c.Invalidate("K")
	stale, _ := c.Get("K", func() (int64, error) {
		c.Invalidate("K") // the write lands while this read is under way
		return 2, nil
	})
	if stale != 2 {
		t.Fatalf("the racing read answered %d", stale)
	}
	if v, _ := c.Get("K", src.load); v != 3 {
		t.Fatalf("after the racing read: %d, want the fresh 3 (the stale 2 was stored)", v)
	}
}

// A load made outside GetUntil (StartLoad, Keep) is kept under the same rules: not when
// an invalidation or a clear arrived since it started, nor once its until has passed;
// Peek then answers what was kept.
func TestKeepStoresALoadMadeElsewhereUnderGetUntilsRules(t *testing.T) {
	c, clk := newTestCache(time.Minute)
	l := c.StartLoad()
	c.Keep(l, "K", "q", 1, time.Time{})
	if v, ok := c.Peek("K", "q", 0); !ok || v != 1 {
		t.Fatalf("kept: %d %v; want 1", v, ok)
	}
	l = c.StartLoad()
	c.Invalidate("other") // any invalidation: it may be of what the load read
	c.Keep(l, "L", "q", 2, time.Time{})
	if c.Holds("L", "q", 0) {
		t.Fatal("kept a load that overlapped an invalidation")
	}
	clk.Advance(time.Second) // past the settling of "other"
	l = c.StartLoad()
	c.Clear()
	c.Keep(l, "L", "q", 2, time.Time{})
	if c.Holds("L", "q", 0) {
		t.Fatal("kept a load that overlapped a clear")
	}
	clk.Advance(time.Second)
	l = c.StartLoad()
	c.Keep(l, "L", "q", 3, clk.Now().Add(-time.Nanosecond))
	c.Keep(l, "M", "q", 4, NotKept)
	if c.Holds("L", "q", 0) || c.Holds("M", "q", 0) {
		t.Fatal("kept an answer whose until had passed")
	}
	c.Keep(l, "L", "q", 5, clk.Now().Add(time.Second))
	if v, ok := c.Peek("L", "q", 0); !ok || v != 5 {
		t.Fatalf("kept until a second from now: %d %v; want 5", v, ok)
	}
	clk.Advance(time.Second)
	if c.Holds("L", "q", 0) {
		t.Fatal("served past its until")
	}
	var none *Cache[int64]
	none.Keep(none.StartLoad(), "K", "q", 1, time.Time{})
	if _, ok := none.Peek("K", "q", 0); ok {
		t.Fatal("a nil cache holds K")
	}
}

// A cache kept by something other than license keys follows a write's answer only when it
// says every answer changed: a key it names neither drops anything there nor keeps out a
// load under way.
func TestClearsOnlyIgnoresKeysAndFollowsClears(t *testing.T) {
	c, _ := newTestCache(time.Minute)
	announced := c.ClearsOnly()
	l := c.StartLoad()
	announced.Invalidate("K")
	c.Keep(l, "class", "q", 1, time.Time{})
	if v, ok := c.Peek("class", "q", 0); !ok || v != 1 {
		t.Fatalf("after a key was announced: %d %v; want the load kept", v, ok)
	}
	announced.Clear()
	if c.Holds("class", "q", 0) {
		t.Fatal("held an answer after a clear was announced")
	}
	var none *Cache[int64]
	none.ClearsOnly().Clear()
}

func TestANilCacheAlwaysLoads(t *testing.T) {
	c := New[int64](0)
	var src source
	c.Get("K", src.load)
	c.Get("K", src.load)
	c.Invalidate("K")
	if n := src.reads.Load(); n != 2 {
		t.Fatalf("%d reads, want 2", n)
	}
}

// The message of another process drops the key here; while NATS is away the cache is not
// used at all, and it starts empty once NATS is back.
func TestSubscribeFollowsChangesAndIsBypassedWhileDisconnected(t *testing.T) {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats not ready")
	}
	url := srv.ClientURL()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	writer, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close()

	c, _ := newTestCache(time.Hour)
	stop, err := c.Subscribe(nc)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	var src source
	src.val.Store(1)
	c.Get("K", src.load)
	src.val.Store(2)
	if err := Publish(writer, "K"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the change to arrive", func() bool { v, _ := c.Get("K", src.load); return v == 2 })

	srv.Shutdown()
	waitFor(t, "the cache to go out of use", func() bool { return !c.live.Load() })
	src.val.Store(3)
	if v, _ := c.Get("K", src.load); v != 3 {
		t.Fatalf("disconnected: %d, want a fresh read", v)
	}
	before := src.reads.Load()
	c.Get("K", src.load)
	if src.reads.Load() == before {
		t.Fatal("disconnected: a value was served from the cache")
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Several answers about one license (validate-license's, one per instance) are cached
// apart and dropped together when the license changes.
func TestInvalidatingAKeyDropsEveryAnswerAboutIt(t *testing.T) {
	c, _ := newTestCache(time.Hour)
	reads := map[string]int{}
	get := func(key, instance string) {
		t.Helper()
		if _, err := c.GetUntil(key, instance, func() (int64, time.Time, error) { reads[key+"/"+instance]++; return 1, time.Time{}, nil }); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		get("A", "host-1")
		get("A", "host-2")
		get("B", "host-1")
	}
	if reads["A/host-1"] != 1 || reads["A/host-2"] != 1 || reads["B/host-1"] != 1 {
		t.Fatalf("reads %v, want one per answer", reads)
	}
	c.Invalidate("A")
	get("A", "host-1")
	get("A", "host-2")
	get("B", "host-1")
	if reads["A/host-1"] != 2 || reads["A/host-2"] != 2 || reads["B/host-1"] != 1 {
		t.Fatalf("after invalidating A: reads %v, want A's answers read again and B's kept", reads)
	}
}

// Right after an invalidation, what a load reads is answered but not kept: the process it
// asked may not have received the same event yet, and its stale answer would otherwise
// stay here for a whole TTL.
func TestAnswersReadJustAfterAnInvalidationAreNotKept(t *testing.T) {
	c, clk := newTestCache(time.Hour)
	var src source
	get := func() {
		t.Helper()
		if _, err := c.Get("K", src.load); err != nil {
			t.Fatal(err)
		}
	}
	get()
	get()
	if n := src.reads.Load(); n != 1 {
		t.Fatalf("reads %d, want 1", n)
	}
	c.Invalidate("K")
	get()
	get()
	if n := src.reads.Load(); n != 3 {
		t.Fatalf("reads %d within the settling time, want every one (3)", n)
	}
	clk.Advance(settle)
	get()
	get()
	if n := src.reads.Load(); n != 4 {
		t.Fatalf("reads %d after the settling time, want the answer kept again (4)", n)
	}
}

// Clear is an invalidation of every key, settling included; an entry ends at the time its
// load names if that comes before the TTL.
func TestClearSettlesEveryKeyAndAnAnswerEndsWhenItSays(t *testing.T) {
	c, clk := newTestCache(time.Hour)
	var src source
	get := func(key string) {
		t.Helper()
		if _, err := c.Get(key, src.load); err != nil {
			t.Fatal(err)
		}
	}
	get("A")
	c.Clear()
	get("A")
	get("B")
	get("A")
	get("B")
	if n := src.reads.Load(); n != 5 {
		t.Fatalf("reads %d, want every read within the settling time after Clear (5)", n)
	}
	clk.Advance(settle)
	until := clk.Now().Add(time.Minute)
	load := func() (int64, time.Time, error) { v, err := src.load(); return v, until, err }
	for range 2 {
		if _, err := c.GetUntil("C", "", load); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(time.Minute)
	if _, err := c.GetUntil("C", "", load); err != nil {
		t.Fatal(err)
	}
	if n := src.reads.Load(); n != 7 {
		t.Fatalf("reads %d, want C read once, then again once its time came (7)", n)
	}
}

// A burst of invalidations (an import: 10,000 license changes a second) keeps the record
// of settling keys to the last windows' worth, pruned at most once per window.
func TestSettlingKeysStayBoundedThroughABurstOfInvalidations(t *testing.T) {
	c, clk := newTestCache(time.Second)
	for i := range 50_000 {
		c.Invalidate(strconv.Itoa(i))
		clk.Advance(time.Millisecond / 10)
	}
	if n := len(c.settling); n > maxSettling+2*1000 {
		t.Fatalf("%d keys settling after the burst, want at most %d", n, maxSettling+2*1000)
	}
	var src source
	c.Get("49999", src.load)
	c.Get("49999", src.load)
	if n := src.reads.Load(); n != 2 {
		t.Fatalf("the last key invalidated was read %d times in its settle window, want 2 (not kept)", n)
	}
}

// BenchmarkInvalidateBurst is one invalidation during a burst of 20,000 a second (an
// import, a bulk revocation): 2,000 keys settle at any moment, over the pruning threshold.
func BenchmarkInvalidateBurst(b *testing.B) {
	c, clk := newTestCache(time.Second)
	keys := make([]string, 50_000)
	for i := range keys {
		keys[i] = strconv.Itoa(i)
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		c.Invalidate(keys[i%len(keys)])
		clk.Advance(time.Millisecond / 20)
	}
}
