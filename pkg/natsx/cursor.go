package natsx

import (
	"sync"
	"time"
)

// relayRescanEvery is how often the relay claims from the front instead of from its
// cursors: every this many claims, and whenever the cursors find nothing. The claim from
// the front reads the entries deleted rows left in outbox_pending_tenant; it finds the
// rows behind a cursor (one that committed after the relay relayed a later id of its
// tenant, one another relay left) and the tenants the relay has forgotten.
const relayRescanEvery = 64

// relayRescanAfter bounds the time between two claims from the front, whatever the rate
// of claims. Under a steady flow every claim finds rows after the cursors, so the claim
// that finds nothing never comes; and concurrent transactions commit out of id order all
// the time, so a row behind a cursor is common, not rare. Counted in claims alone, such a
// row waited 64 claims (seconds at a few dozen claims a second); this keeps its wait near
// a quarter of a second at the cost of at most four claims from the front a second.
const relayRescanAfter = 250 * time.Millisecond

// relayForgetAfter is how many claims a tenant stays known to the relay after it last had
// a row in one. A known tenant costs every claim a probe of its own; an unknown one costs
// nothing until it has pending rows, except while entries of its deleted rows wait for
// vacuum in a gap the claim probes. Forgotten tenants are found again by the claim.
const relayForgetAfter = 16 * relayRescanEvery

// relayCursors is a relay's memory of where each tenant's pending rows start: the id of
// the last row of the tenant it relayed (published or parked) in order, or the id before
// the tenant's row that stopped its sequence. A claim reads a known tenant's rows after
// its cursor (claimSQL), so the claim's cost does not grow with the rows relayed before
// it. A cursor is a place to start reading, not a promise: rows behind it are found by
// the claim from the front.
type relayCursors struct {
	mu        sync.Mutex
	claims    int
	byTenant  map[string]*tenantCursor
	lastFront time.Time
	now       func() time.Time // nil: time.Now (tests set a clock)
}

type tenantCursor struct {
	after    int64 // read the tenant's rows with a greater id
	lastSeen int   // the claim that last had a row of the tenant
}

// next counts a claim and returns claimSQL's cursors for it; front (no cursors) every
// relayRescanEvery claims, relayRescanAfter after the last claim from the front, or when
// the relay knows no tenant.
func (c *relayCursors) next() (tenants []string, after []int64, front bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.claims++
	if len(c.byTenant) == 0 || c.claims%relayRescanEvery == 0 || c.clock().Sub(c.lastFront) >= relayRescanAfter {
		return []string{}, []int64{}, true
	}
	tenants, after = make([]string, 0, len(c.byTenant)), make([]int64, 0, len(c.byTenant))
	for t, tc := range c.byTenant {
		tenants = append(tenants, t)
		after = append(after, tc.after)
	}
	return tenants, after, false
}

// fromFront records a claim from the front: tenants without a row for relayForgetAfter
// claims are forgotten.
func (c *relayCursors) fromFront() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lastFront = c.clock()
	for t, tc := range c.byTenant {
		if c.claims-tc.lastSeen > relayForgetAfter {
			delete(c.byTenant, t)
		}
	}
}

// advance moves the cursors after a committed batch: claimed in claim order (a tenant's
// rows in id order), of which published were published and parked parked. A tenant's
// cursor moves past its rows up to the first that is neither (its sequence stopped
// there), and then stands just before that row, so it goes first in the next claim.
func (c *relayCursors) advance(claimed []outboxRow, published []int64, parked []parkedRow) {
	done := make(map[int64]bool, len(published)+len(parked))
	for _, id := range published {
		done[id] = true
	}
	for _, p := range parked {
		done[p.row.id] = true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byTenant == nil {
		c.byTenant = map[string]*tenantCursor{}
	}
	stopped := map[string]bool{}
	for _, o := range claimed {
		if stopped[o.tenantID] {
			continue
		}
		tc := c.byTenant[o.tenantID]
		if tc == nil {
			tc = &tenantCursor{}
			c.byTenant[o.tenantID] = tc
		}
		tc.lastSeen = c.claims
		if !done[o.id] {
			stopped[o.tenantID] = true
			tc.after = o.id - 1
			continue
		}
		tc.after = max(tc.after, o.id)
	}
}

func (c *relayCursors) clock() time.Time {
	if c.now != nil {
		return c.now()
	}
	return time.Now()
}
