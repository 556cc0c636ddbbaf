//go:build keyhouse_bench_no_outbox

package events

// benchWithoutOutbox, set only by the build tag keyhouse_bench_no_outbox, makes Emit
// write nothing: binaries built so are make bench's "before the spine" figure for the
// cost of a write path (docs/PERFORMANCE.md). They break invariant 10 (no change has its
// event), so they are built for that measurement and never shipped or tested.
const benchWithoutOutbox = true
