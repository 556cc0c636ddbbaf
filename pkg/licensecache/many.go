package licensecache

import "time"

// GetMany is Get for several keys with one load: the keys the cache holds are answered
// from it, and load is called once with the others (each named once; not at all when
// there are none). load returns the values it found, by key; a key it leaves out is
// missing from the answer too (not found) and nothing is kept for it. What load found is
// kept as Get keeps it: not when an invalidation arrived while load ran. Unlike Get, the
// load is not shared with concurrent misses of the same key (a batch's keys are mostly
// different licenses).
func (c *Cache[V]) GetMany(keys []string, load func(missing []string) (map[string]V, error)) (map[string]V, error) {
	if c == nil || !c.live.Load() {
		return load(distinct(keys))
	}
	now := c.now()
	found := make(map[string]V, len(keys))
	var missing []string
	c.mu.RLock()
	for _, key := range keys {
		if _, done := found[key]; done {
			continue
		}
		if e, ok := c.entries.lookup(key, ""); ok && c.servable(e, now) {
			found[key] = e.v
			continue
		}
		missing = append(missing, key)
	}
	gen := c.gen
	c.mu.RUnlock()
	missing = distinct(missing)
	if len(missing) == 0 {
		return found, nil
	}
	loaded, err := load(missing)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	for key, v := range loaded {
		found[key] = v
		c.keep(key, "", v, time.Time{}, now, gen)
	}
	c.mu.Unlock()
	return found, nil
}

func distinct(keys []string) []string {
	seen := make(map[string]bool, len(keys))
	out := keys[:0:0]
	for _, k := range keys {
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}
