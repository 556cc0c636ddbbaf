package licensingclient

// QueuedLookups is how many lookups wait for a batch (the tests watch it).
func (c *Client) QueuedLookups() int { return c.misses.Queued() }
