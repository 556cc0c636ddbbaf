package licensecache

import (
	"sync/atomic"
	"time"
)

// maxEntries bounds the answers one cache keeps. Past it, storing a new answer evicts the
// license key that the CLOCK hand finds unused since it last passed (with every answer
// about it), or one whose answers have all expired: memory stays flat however many
// licenses are checked, and the keys that keep being asked for stay.
const maxEntries = 100_000

// table holds a cache's answers, bounded by CLOCK (second chance): every license key
// has a slot on a ring; an answer served marks its slot as used; when the table is full,
// the hand walks the ring, clearing marks, and evicts the first slot it finds unmarked.
// A slot starts unmarked, so a key asked about once (most of a uniform spread) leaves
// before one asked about again. Guarded by the cache's mu: lookups under its read lock
// (the mark is atomic), changes under its write lock.
type table[V any] struct {
	slots map[string]*slot[V]
	ring  []*slot[V]
	hand  int
	// size counts answers (a key may hold several, one per qualifier); limit bounds it.
	size  int
	limit int
}

// slot is one license key's answers and its place on the ring.
type slot[V any] struct {
	key     string
	answers map[string]entry[V]
	used    atomic.Bool
	at      int // index in ring
}

func newTable[V any](limit int) table[V] {
	return table[V]{slots: map[string]*slot[V]{}, limit: limit}
}

// lookup returns the answer about key for qualifier, marking its key as used.
func (t *table[V]) lookup(key, qualifier string) (entry[V], bool) {
	s := t.slots[key]
	if s == nil {
		return entry[V]{}, false
	}
	e, ok := s.answers[qualifier]
	if ok && !s.used.Load() {
		s.used.Store(true)
	}
	return e, ok
}

// store keeps e as the answer about key for qualifier, evicting first when the table is
// full.
func (t *table[V]) store(key, qualifier string, e entry[V], now time.Time) {
	if s := t.slots[key]; s != nil {
		if _, replaced := s.answers[qualifier]; replaced {
			s.answers[qualifier] = e
			return
		}
	}
	for t.size >= t.limit && len(t.ring) > 0 {
		t.evict(now)
	}
	s := t.slots[key]
	if s == nil {
		s = &slot[V]{key: key, answers: map[string]entry[V]{}, at: len(t.ring)}
		t.slots[key] = s
		t.ring = append(t.ring, s)
	}
	s.answers[qualifier] = e
	t.size++
}

// evict removes one key: the first the hand finds expired or unused since its last pass.
// It ends within two turns of the ring (the first clears every mark).
func (t *table[V]) evict(now time.Time) {
	for {
		if t.hand >= len(t.ring) {
			t.hand = 0
		}
		s := t.ring[t.hand]
		if !expired(s, now) && s.used.Load() {
			s.used.Store(false)
			t.hand++
			continue
		}
		t.drop(s.key)
		return
	}
}

func expired[V any](s *slot[V], now time.Time) bool {
	for _, e := range s.answers {
		if now.Before(e.expires) {
			return false
		}
	}
	return true
}

// drop removes key and every answer about it. The ring's last slot takes its place, so
// the hand looks at that one next.
func (t *table[V]) drop(key string) {
	s := t.slots[key]
	if s == nil {
		return
	}
	delete(t.slots, key)
	t.size -= len(s.answers)
	last := t.ring[len(t.ring)-1]
	t.ring[s.at] = last
	last.at = s.at
	t.ring[len(t.ring)-1] = nil
	t.ring = t.ring[:len(t.ring)-1]
}

// reset drops everything.
func (t *table[V]) reset() {
	clear(t.slots)
	clear(t.ring)
	t.ring = t.ring[:0]
	t.hand = 0
	t.size = 0
}
