package server

import "sync/atomic"

// sigCacheSlots bounds the cache: one slot per release id modulo this, so a busy
// installation keeps the hot releases and memory stays constant.
const sigCacheSlots = 4096

// sigCache remembers, per release, the manifest signature of the second it was last
// issued in. A release's fields never change after registration and the keyring never
// changes while the process runs, so (release id, second) names the signed bytes.
type sigCache struct {
	slots [sigCacheSlots]atomic.Pointer[sigEntry]
}

type sigEntry struct {
	id  int32
	sec int64
	sig string
}

func (c *sigCache) slot(id int32) *atomic.Pointer[sigEntry] {
	return &c.slots[uint32(id)%sigCacheSlots]
}

func (c *sigCache) get(id int32, sec int64) (string, bool) {
	e := c.slot(id).Load()
	if e == nil || e.id != id || e.sec != sec {
		return "", false
	}
	return e.sig, true
}

func (c *sigCache) put(id int32, sec int64, sig string) {
	c.slot(id).Store(&sigEntry{id: id, sec: sec, sig: sig})
}
