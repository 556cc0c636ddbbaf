package licensecache

import (
	"encoding/json"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// Liveness: an entry may be served longer than the cache's TTL (the bound on staleness
// when a change event is lost) only while the cache can prove that it has seen every
// change event. The proof comes from the publishers of the change subjects:
//
//   - every publication carries its publisher's id and a sequence number per subject
//     (PublishOn), so a subscriber that misses one sees the gap;
//   - every publisher sends a heartbeat every HeartbeatInterval on HeartbeatSubject with
//     the last sequence of each subject (StartHeartbeat), so a subscriber that missed the
//     last publications sees it too, and one cut off from NATS without noticing (a silent
//     partition: the connection stays up, nothing arrives) sees the heartbeats stop;
//   - a cache is proven live until LiveBound after the last heartbeat of the publisher it
//     heard from least recently. A gap, or a publisher not heard from before, empties the
//     cache (what was missed is unknown).
//
// A proof that lapsed and came back empties nothing by itself: a publisher's messages
// arrive in order, so its next heartbeat names every publication sent before it, and the
// sequence shows whether one is missing. A publisher that is never heard again (stopped
// without its goodbye, or cut off) keeps the proof lapsed until it is forgotten, LiveTTL +
// LiveBound after it was last heard, when every entry stored while it counted has expired.
//
// So a process that cannot prove it stops answering from entries older than the TTL within
// LiveBound (well under the 1 s bound), whatever its connection's state says.

// HeartbeatSubject is the core NATS subject of the publishers' heartbeats.
const HeartbeatSubject = "keyhouse.cache.heartbeat"

const (
	// HeartbeatInterval is how often a publisher sends its heartbeat.
	HeartbeatInterval = 100 * time.Millisecond
	// LiveBound is how long after a publisher's last heartbeat a cache still counts as
	// proven live: five heartbeats, so a busy process's scheduling does not break the
	// proof, and well under the 1 s staleness bound.
	LiveBound = 500 * time.Millisecond
)

// The headers of a publication and of a heartbeat.
const (
	publisherHeader = "Keyhouse-Publisher"
	seqHeader       = "Keyhouse-Seq"
	byeHeader       = "Keyhouse-Bye"
)

// announcer is the publishing side of one NATS connection: its id and the sequence of
// each subject it published on.
type announcer struct {
	nc *nats.Conn
	id string
	// mu orders publications and heartbeats: a heartbeat never names a sequence whose
	// publication it overtook.
	mu   sync.Mutex
	seqs map[string]uint64
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

var announcers sync.Map // *nats.Conn → *announcer

// announcerOf returns nc's announcer, starting its heartbeat on first use.
func announcerOf(nc *nats.Conn) *announcer {
	if a, ok := announcers.Load(nc); ok {
		return a.(*announcer)
	}
	a := &announcer{nc: nc, id: nats.NewInbox(), seqs: map[string]uint64{}, stop: make(chan struct{}), done: make(chan struct{})}
	if other, loaded := announcers.LoadOrStore(nc, a); loaded {
		return other.(*announcer)
	}
	go a.beat()
	return a
}

// StartHeartbeat makes nc a publisher of change events from now on, heartbeat included,
// so that caches can prove their liveness before its first change. Every process that
// publishes on a change subject calls it when it connects; stop sends a last heartbeat
// that tells the caches to forget this publisher (a stopped publisher is not a silent
// one), then stops.
func StartHeartbeat(nc *nats.Conn) (stop func()) {
	a := announcerOf(nc)
	return func() {
		a.once.Do(func() {
			close(a.stop)
			<-a.done
			announcers.Delete(nc)
		})
	}
}

func (a *announcer) beat() {
	defer close(a.done)
	tick := time.NewTicker(HeartbeatInterval)
	defer tick.Stop()
	for {
		select {
		case <-a.stop:
			m := nats.NewMsg(HeartbeatSubject)
			m.Header.Set(publisherHeader, a.id)
			m.Header.Set(byeHeader, "1")
			_ = a.nc.PublishMsg(m)
			_ = a.nc.FlushTimeout(time.Second)
			return
		case <-tick.C:
		}
		if a.nc.IsClosed() {
			return
		}
		a.mu.Lock()
		data, _ := json.Marshal(a.seqs)
		m := nats.NewMsg(HeartbeatSubject)
		m.Header.Set(publisherHeader, a.id)
		m.Data = data
		_ = a.nc.PublishMsg(m)
		a.mu.Unlock()
	}
}

// publish sends one publication per key on subject, each with its sequence.
func (a *announcer) publish(subject string, keys []string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, key := range keys {
		a.seqs[subject]++
		m := nats.NewMsg(subject)
		m.Header.Set(publisherHeader, a.id)
		m.Header.Set(seqHeader, strconv.FormatUint(a.seqs[subject], 10))
		m.Data = []byte(key)
		if err := a.nc.PublishMsg(m); err != nil {
			return err
		}
	}
	return nil
}

// proof is what one subscription of a cache knows about the publishers of its subjects.
// Only its subscription's goroutine touches it.
type proof struct {
	subjects   map[string]bool
	publishers map[string]*publisherSeen
	// until is when the proof lapses (zero: not proven); written under the cache's mu.
	until time.Time
	// forget is how long a publisher may stay silent before it no longer counts: after
	// that, no entry stored while it counted can still be served.
	forget time.Duration
}

type publisherSeen struct {
	heard time.Time // last heartbeat or, before the first one, first publication
	beat  bool      // a heartbeat was heard
	seqs  map[string]uint64
}

// heard takes in one message of the subscription (a publication or a heartbeat) at now and
// returns whether the cache must be emptied (a publication was missed, or might have been)
// and until when the proof now holds (for setProof).
func (p *proof) heard(m *nats.Msg, now time.Time) (clear bool, proofUntil time.Time) {
	id := m.Header.Get(publisherHeader)
	if id != "" {
		ps := p.publishers[id]
		if ps == nil {
			// A publisher this cache has not heard from: what it published before is
			// unknown.
			ps = &publisherSeen{seqs: map[string]uint64{}}
			p.publishers[id] = ps
			clear = true
		}
		ps.heard = now
		switch {
		case m.Subject != HeartbeatSubject:
			seq, _ := strconv.ParseUint(m.Header.Get(seqHeader), 10, 64)
			if last := ps.seqs[m.Subject]; last != 0 && seq != last+1 {
				clear = true
			}
			ps.seqs[m.Subject] = seq
		case m.Header.Get(byeHeader) != "":
			delete(p.publishers, id)
		default:
			ps.beat = true
			var seqs map[string]uint64
			_ = json.Unmarshal(m.Data, &seqs)
			for subject := range p.subjects {
				if seqs[subject] > ps.seqs[subject] {
					clear = true
					ps.seqs[subject] = seqs[subject]
				}
			}
		}
	}
	first := true
	for id, ps := range p.publishers {
		if now.Sub(ps.heard) > p.forget {
			delete(p.publishers, id)
			continue
		}
		until := ps.heard.Add(LiveBound)
		if !ps.beat {
			until = time.Time{}
		}
		if first || until.Before(proofUntil) {
			proofUntil, first = until, false
		}
	}
	return clear, proofUntil
}

// follow subscribes to subjects (each with its handler) and to the heartbeats on one
// channel, so that they are taken in the order NATS delivered them, and keeps the cache's
// proof from them. The returned function stops it.
func (c *Cache[V]) follow(nc *nats.Conn, handlers map[string]func(*nats.Msg)) (stop func(), err error) {
	// A full channel drops messages (a slow consumer): the sequence shows the gap.
	ch := make(chan *nats.Msg, 8192)
	p := &proof{subjects: map[string]bool{}, publishers: map[string]*publisherSeen{}, forget: c.liveTTL + LiveBound}
	for subject := range handlers {
		p.subjects[subject] = true
	}
	var subs []*nats.Subscription
	unsubscribe := func() {
		for _, sub := range subs {
			_ = sub.Unsubscribe()
		}
	}
	for _, subject := range append([]string{HeartbeatSubject}, keysOf(handlers)...) {
		sub, err := nc.ChanSubscribe(subject, ch)
		if err != nil {
			unsubscribe()
			return nil, err
		}
		subs = append(subs, sub)
	}
	c.addProof(p)
	done, quit := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-quit:
				return
			case m := <-ch:
				c.receive(p, handlers, m)
			}
		}
	}()
	return func() {
		unsubscribe()
		close(quit)
		<-done
		c.mu.Lock()
		for i, q := range c.proofs {
			if q == p {
				c.proofs = append(c.proofs[:i], c.proofs[i+1:]...)
				break
			}
		}
		c.mu.Unlock()
		c.setProof(nil, time.Time{})
	}, nil
}

func (c *Cache[V]) addProof(p *proof) {
	c.mu.Lock()
	c.proofs = append(c.proofs, p)
	c.mu.Unlock()
}

// receive handles one message of a subscription: its handler, then the proof.
func (c *Cache[V]) receive(p *proof, handlers map[string]func(*nats.Msg), m *nats.Msg) {
	if h := handlers[m.Subject]; h != nil {
		h(m)
	}
	clear, until := p.heard(m, c.now())
	// A cache that never kept an entry past its TTL needs no emptying: what it missed
	// expires within the TTL anyway (so a cache that just started, or one without a live
	// TTL, is not emptied as it first hears its publishers).
	if clear && c.keptLong.Load() {
		c.resync()
	}
	c.setProof(p, until)
}

// resync empties the cache after a missed publication: Clear without the settling, since
// there is no event the other processes may still be receiving; the loads under way do
// not store what they read (it may predate the missed change).
func (c *Cache[V]) resync() {
	c.mu.Lock()
	c.gen++
	c.entries.reset()
	clear(c.flights)
	c.mu.Unlock()
}

// setProof records that p is proven until until, and the cache as proven until the
// earliest lapse of all its subscriptions' proofs.
func (c *Cache[V]) setProof(p *proof, until time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p != nil {
		p.until = until
	}
	var earliest time.Time
	for i, q := range c.proofs {
		if i == 0 || q.until.Before(earliest) {
			earliest = q.until
		}
	}
	if earliest.IsZero() {
		c.liveUntil.Store(0)
		return
	}
	c.liveUntil.Store(earliest.UnixNano())
}

// proven says whether entries may be served past the TTL at now.
func (c *Cache[V]) proven(now time.Time) bool {
	return c.liveTTL > c.ttl && now.UnixNano() < c.liveUntil.Load()
}

func keysOf(m map[string]func(*nats.Msg)) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
