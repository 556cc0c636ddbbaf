package licensingclient

import "time"

// QueuedLookups is how many lookups wait for a batch (the tests watch it).
func (c *Client) QueuedLookups() int { return c.misses.Queued() }

// SetClock replaces the clock CurrentKeyring's interval is read on.
func (c *Client) SetClock(now func() time.Time) { c.now = now }
