package licensecache

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/pkg/license"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// liveCache is a cache with a 1 s TTL and an hour while proven live, fed by hand with the
// messages its subscription would take (publications of license.ChangedSubject and
// heartbeats), on a clock the test moves.
type liveCache struct {
	*Cache[int64]
	clk      *clock
	p        *proof
	handlers map[string]func(*nats.Msg)
}

func newLiveCache() *liveCache {
	c, clk := newTestCache(time.Second)
	c.liveTTL = time.Hour
	l := &liveCache{Cache: c, clk: clk, p: &proof{subjects: map[string]bool{license.ChangedSubject: true},
		publishers: map[string]*publisherSeen{}, forget: c.liveTTL + LiveBound}}
	l.handlers = map[string]func(*nats.Msg){license.ChangedSubject: func(m *nats.Msg) { c.Invalidate(string(m.Data)) }}
	c.addProof(l.p)
	return l
}

func (l *liveCache) beat(publisher string, lastSeq uint64) {
	m := nats.NewMsg(HeartbeatSubject)
	m.Header.Set(publisherHeader, publisher)
	m.Data, _ = json.Marshal(map[string]uint64{license.ChangedSubject: lastSeq})
	l.receive(l.p, l.handlers, m)
}

func (l *liveCache) publication(publisher string, seq uint64, key string) {
	m := nats.NewMsg(license.ChangedSubject)
	m.Header.Set(publisherHeader, publisher)
	m.Header.Set(seqHeader, strconv.FormatUint(seq, 10))
	m.Data = []byte(key)
	l.receive(l.p, l.handlers, m)
}

func (l *liveCache) bye(publisher string) {
	m := nats.NewMsg(HeartbeatSubject)
	m.Header.Set(publisherHeader, publisher)
	m.Header.Set(byeHeader, "1")
	l.receive(l.p, l.handlers, m)
}

// cached says whether K is answered from the cache (no read).
func (l *liveCache) cached(src *source) bool {
	before := src.reads.Load()
	l.Get("K", src.load)
	return src.reads.Load() == before
}

// passAndBeat moves the clock on by d, with publisher's heartbeat every 100 ms.
func (l *liveCache) passAndBeat(d time.Duration, publisher string, lastSeq uint64) {
	for step := time.Duration(0); step < d; step += HeartbeatInterval {
		l.clk.Advance(HeartbeatInterval)
		l.beat(publisher, lastSeq)
	}
}

func TestAnEntryOutlivesTheTTLOnlyWhileTheHeartbeatsProveTheCacheLive(t *testing.T) {
	l := newLiveCache()
	var src source
	l.beat("P", 0)
	l.clk.Advance(200 * time.Millisecond) // past the settling of the first heartbeat's emptying
	l.Get("K", src.load)
	l.passAndBeat(10*time.Second, "P", 0)
	if !l.cached(&src) {
		t.Fatal("proven live, 10 s after it was read: the entry must still answer")
	}
	// The heartbeats stop (a silent partition): within LiveBound the entry, older than the
	// TTL, is no longer served.
	l.clk.Advance(LiveBound)
	if l.cached(&src) {
		t.Fatal("no heartbeat for LiveBound: an entry older than the TTL was served")
	}
	// A fresh entry is served for the TTL whatever the proof says.
	if !l.cached(&src) {
		t.Fatal("an entry read just now must answer within the TTL")
	}
	l.clk.Advance(time.Second)
	if l.cached(&src) {
		t.Fatal("unproven: an entry older than the TTL was served")
	}
}

// A late heartbeat (a busy process, a slow network) lapses the proof for a while; when it
// comes and names nothing that was missed, the entries serve again. Naming a publication
// that was missed empties the cache (TestAMissedPublicationEmptiesTheCache).
func TestAProofThatCameBackWithNothingMissedKeepsTheEntries(t *testing.T) {
	l := newLiveCache()
	var src source
	l.beat("P", 0)
	l.publication("P", 1, "OTHER")
	l.clk.Advance(200 * time.Millisecond)
	l.Get("K", src.load)
	l.clk.Advance(2 * time.Second)
	if l.cached(&src) {
		t.Fatal("served past the TTL while the proof had lapsed")
	}
	l.Get("K", src.load) // kept again, for the TTL only
	l.clk.Advance(2 * time.Second)
	l.beat("P", 1)
	l.passAndBeat(5*time.Second, "P", 1)
	before := src.reads.Load()
	l.Get("K", src.load)
	l.Get("K", src.load)
	if n := src.reads.Load() - before; n != 1 {
		t.Fatalf("%d reads after the proof came back, want 1 (then kept while proven)", n)
	}
	l.passAndBeat(5*time.Second, "P", 1)
	if !l.cached(&src) {
		t.Fatal("proven again: an entry stored since was not kept")
	}
}

func TestAMissedPublicationEmptiesTheCache(t *testing.T) {
	for name, miss := range map[string]func(l *liveCache){
		"a gap in the sequence":                   func(l *liveCache) { l.publication("P", 3, "OTHER") },
		"a heartbeat naming a later publication":  func(l *liveCache) { l.beat("P", 2) },
		"a publisher not heard from before":       func(l *liveCache) { l.beat("Q", 0) },
		"a publication of a publisher not beaten": func(l *liveCache) { l.publication("Q", 1, "OTHER") },
	} {
		t.Run(name, func(t *testing.T) {
			l := newLiveCache()
			var src source
			l.beat("P", 0)
			l.publication("P", 1, "OTHER")
			l.clk.Advance(200 * time.Millisecond)
			l.Get("K", src.load)
			if !l.cached(&src) {
				t.Fatal("not cached to begin with")
			}
			miss(l)
			if l.cached(&src) {
				t.Fatal("the entry survived a missed publication")
			}
		})
	}
	// In sequence, nothing is emptied but the key named.
	l := newLiveCache()
	var src source
	l.beat("P", 0)
	l.clk.Advance(200 * time.Millisecond)
	l.Get("K", src.load)
	l.publication("P", 1, "OTHER")
	l.publication("P", 2, "OTHER")
	l.beat("P", 2)
	if !l.cached(&src) {
		t.Fatal("publications in sequence emptied the cache")
	}
}

func TestEveryPublisherMustBeHeardAndAStoppedOneIsForgotten(t *testing.T) {
	l := newLiveCache()
	var src source
	l.beat("P", 0)
	l.beat("Q", 0)
	l.clk.Advance(200 * time.Millisecond)
	l.Get("K", src.load)
	// Q falls silent (a publisher cut off from NATS: its publications are lost): P's
	// heartbeats alone prove nothing.
	l.passAndBeat(2*time.Second, "P", 0)
	if l.cached(&src) {
		t.Fatal("served past the TTL while a publisher was silent")
	}
	// Q says goodbye (a stopped process): it no longer counts; the proof is back.
	l.bye("Q")
	// Read while unproven, the entry lives the TTL only; read again once it ended.
	l.passAndBeat(1100*time.Millisecond, "P", 0)
	l.Get("K", src.load)
	l.passAndBeat(3*time.Second, "P", 0)
	if !l.cached(&src) {
		t.Fatal("a publisher that said goodbye still counts")
	}
}

func TestWithoutALiveTTLTheProofChangesNothing(t *testing.T) {
	c, clk := newTestCache(time.Second)
	p := &proof{subjects: map[string]bool{license.ChangedSubject: true}, publishers: map[string]*publisherSeen{}, forget: LiveBound}
	c.addProof(p)
	var src source
	c.Get("K", src.load)
	m := nats.NewMsg(HeartbeatSubject)
	m.Header.Set(publisherHeader, "P")
	c.receive(p, nil, m) // a new publisher: would empty a live-TTL cache
	before := src.reads.Load()
	c.Get("K", src.load)
	clk.Advance(time.Second)
	c.Get("K", src.load)
	if n := src.reads.Load() - before; n != 1 {
		t.Fatalf("%d reads, want 1 (the entry served within the TTL, then read again)", n)
	}
}

// Over a real NATS server: publications and heartbeats of StartHeartbeat and PublishOn
// keep a cache proven; once the publisher stops its heartbeats for good, not any more.
func TestHeartbeatsOverNATSProveTheCacheLive(t *testing.T) {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	defer srv.Shutdown()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats not ready")
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	writer, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close()

	c := NewLive[int64](time.Second, time.Hour)
	stop, err := c.Subscribe(nc)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if c.proven(time.Now()) {
		t.Fatal("proven before any heartbeat")
	}
	stopBeat := StartHeartbeat(writer)
	waitFor(t, "the proof", func() bool { return c.proven(time.Now()) })
	var src source
	src.val.Store(1)
	waitFor(t, "K to be kept", func() bool {
		c.Get("K", src.load)
		before := src.reads.Load()
		c.Get("K", src.load)
		return src.reads.Load() == before
	})
	src.val.Store(2)
	if err := Publish(writer, "K"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the change to arrive", func() bool { v, _ := c.Get("K", src.load); return v == 2 })
	if !c.proven(time.Now()) {
		t.Fatal("a publication in sequence broke the proof")
	}
	stopBeat()
	// The goodbye leaves no publisher: nothing proves the cache live.
	waitFor(t, "the proof to end", func() bool { return !c.proven(time.Now()) })
}

// Answers stored together while proven (a restart, a fleet's first checks) do not all
// expire together: their lives spread over the last fifth of LICENSE_CACHE_LIVE_TTL, so
// the keys come back to the source over that stretch instead of in one wave.
func TestAnswersStoredTogetherExpireSpreadOverTheLastFifthOfTheirLife(t *testing.T) {
	l := newLiveCache()
	var src source
	l.beat("P", 0)
	l.clk.Advance(200 * time.Millisecond)
	const n = 1000
	for i := range n {
		l.Get(strconv.Itoa(i), src.load)
	}
	stored := l.clk.Now()
	served := func() int {
		count := 0
		for i := range n {
			if e, ok := l.entries.lookup(strconv.Itoa(i), ""); ok && l.servable(e, l.clk.Now()) {
				count++
			}
		}
		return count
	}
	for _, at := range []struct {
		after    time.Duration
		min, max int
	}{
		{l.liveTTL * 4 / 5, n, n},
		{l.liveTTL * 9 / 10, n / 4, n * 3 / 4},
		{l.liveTTL, 0, 0},
	} {
		l.passAndBeat(at.after-l.clk.Now().Sub(stored), "P", 0)
		if got := served(); got < at.min || got > at.max {
			t.Fatalf("%v after they were stored, %d of %d answers are served, want %d to %d", at.after, got, n, at.min, at.max)
		}
		t.Logf("%v after they were stored: %d of %d served", at.after, served(), n)
	}
}
