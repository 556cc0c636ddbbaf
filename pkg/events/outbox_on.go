//go:build !keyhouse_bench_no_outbox

package events

// benchWithoutOutbox is false in every binary that ships; see outbox_off.go.
const benchWithoutOutbox = false
