package server

import "sync/atomic"

// sigCacheSlots bounds the cache: one slot per release id modulo this, so a busy
// installation keeps the hot releases and memory stays constant.
const sigCacheSlots = 4096

// sigCache remembers, per release, the manifest signature of the second it was last
// issued in, with the key that made it. A release's fields never change after
// registration, so (release id, second) names the signed bytes, and the key id whether
// the signature is still the one to give (a rotation changes the key while the process
// runs).
type sigCache struct {
	slots [sigCacheSlots]atomic.Pointer[sigEntry]
}

type sigEntry struct {
	id  int32
	sec int64
	kid string
	sig string
}

func (c *sigCache) slot(id int32) *atomic.Pointer[sigEntry] {
	return &c.slots[uint32(id)%sigCacheSlots]
}

func (c *sigCache) get(id int32, sec int64, kid string) (string, bool) {
	e := c.slot(id).Load()
	if e == nil || e.id != id || e.sec != sec || e.kid != kid {
		return "", false
	}
	return e.sig, true
}

func (c *sigCache) put(id int32, sec int64, kid, sig string) {
	c.slot(id).Store(&sigEntry{id: id, sec: sec, kid: kid, sig: sig})
}
