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
	// sweep is the ring index sweepExpired looks at next.
	sweep int
	// size counts answers (a key may hold several, one per qualifier); limit bounds it.
	size  int
	limit int
}

// slot is one license key's answers and its place on the ring.
type slot[V any] struct {
	key     string
	answers answers[V]
	used    atomic.Bool
	at      int // index in ring
}

// fewAnswers is how many answers about one key are kept in a slice before a map. Most
// keys have one (verify-license's, or a machine's validate-license): a map of one answer
// took about 600 bytes, which was most of a full cache's memory (100,000 keys).
const fewAnswers = 8

// answers are one key's answers by qualifier: in a slice while they are few, in a map
// past fewAnswers.
type answers[V any] struct {
	few  []qualifiedEntry[V]
	many map[string]entry[V]
}

type qualifiedEntry[V any] struct {
	qualifier string
	entry[V]
}

func (a *answers[V]) get(qualifier string) (entry[V], bool) {
	if a.many != nil {
		e, ok := a.many[qualifier]
		return e, ok
	}
	for i := range a.few {
		if a.few[i].qualifier == qualifier {
			return a.few[i].entry, true
		}
	}
	return entry[V]{}, false
}

// replace keeps e for qualifier if the key has an answer for it, and reports whether it
// had.
func (a *answers[V]) replace(qualifier string, e entry[V]) bool {
	if a.many != nil {
		if _, ok := a.many[qualifier]; ok {
			a.many[qualifier] = e
			return true
		}
		return false
	}
	for i := range a.few {
		if a.few[i].qualifier == qualifier {
			a.few[i].entry = e
			return true
		}
	}
	return false
}

// add keeps e for a qualifier the key has no answer for.
func (a *answers[V]) add(qualifier string, e entry[V]) {
	if a.many == nil && len(a.few) < fewAnswers {
		a.few = append(a.few, qualifiedEntry[V]{qualifier, e})
		return
	}
	if a.many == nil {
		a.many = make(map[string]entry[V], len(a.few)+1)
		for _, q := range a.few {
			a.many[q.qualifier] = q.entry
		}
		a.few = nil
	}
	a.many[qualifier] = e
}

func (a *answers[V]) len() int {
	if a.many != nil {
		return len(a.many)
	}
	return len(a.few)
}

// expired says whether every answer has expired at now.
func (a *answers[V]) expired(now time.Time) bool {
	if a.many != nil {
		for _, e := range a.many {
			if now.Before(e.expires) {
				return false
			}
		}
		return true
	}
	for i := range a.few {
		if now.Before(a.few[i].expires) {
			return false
		}
	}
	return true
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
	e, ok := s.answers.get(qualifier)
	if ok && !s.used.Load() {
		s.used.Store(true)
	}
	return e, ok
}

// store keeps e as the answer about key for qualifier, evicting first when the table is
// full.
func (t *table[V]) store(key, qualifier string, e entry[V], now time.Time) {
	if s := t.slots[key]; s != nil && s.answers.replace(qualifier, e) {
		return
	}
	for t.size >= t.limit && len(t.ring) > 0 {
		t.evict(now)
	}
	s := t.slots[key]
	if s == nil {
		s = &slot[V]{key: key, at: len(t.ring)}
		t.slots[key] = s
		t.ring = append(t.ring, s)
	}
	s.answers.add(qualifier, e)
	t.size++
	t.sweepExpired(now, sweepPerStore)
}

// sweepPerStore is how many keys each store looks at, past the last one looked at, to drop
// those whose answers have all expired. Eviction alone removes them only once the table
// is full, so a cache whose answers live a second (check-update's) kept the bound's worth
// of dead answers, 130 MiB of the gateway's heap at 100,000 licenses. Two per store keep
// the dead ones to about as many as the live ones, and cost a store two looks.
const sweepPerStore = 2

// sweepExpired looks at up to n keys in ring order and drops those whose answers have all
// expired. It leaves the used marks alone: they are the CLOCK hand's.
func (t *table[V]) sweepExpired(now time.Time, n int) {
	for ; n > 0 && len(t.ring) > 0; n-- {
		if t.sweep >= len(t.ring) {
			t.sweep = 0
		}
		s := t.ring[t.sweep]
		if s.answers.expired(now) {
			// The ring's last key takes this index: it is looked at next.
			t.drop(s.key)
			continue
		}
		t.sweep++
	}
}

// evict removes one key: the first the hand finds expired or unused since its last pass.
// It ends within two turns of the ring (the first clears every mark).
func (t *table[V]) evict(now time.Time) {
	for {
		if t.hand >= len(t.ring) {
			t.hand = 0
		}
		s := t.ring[t.hand]
		if !s.answers.expired(now) && s.used.Load() {
			s.used.Store(false)
			t.hand++
			continue
		}
		t.drop(s.key)
		return
	}
}

// drop removes key and every answer about it. The ring's last slot takes its place, so
// the hand looks at that one next.
func (t *table[V]) drop(key string) {
	s := t.slots[key]
	if s == nil {
		return
	}
	delete(t.slots, key)
	t.size -= s.answers.len()
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
	t.sweep = 0
	t.size = 0
}
