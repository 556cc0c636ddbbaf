// Package ratelimit is the gateway's rate limiter: fixed windows per client IP, plus a
// per-license-key window on activate-license and deactivate-license, shared by every gateway
// replica through Redis. The design is envoyproxy/ratelimit's.
//
// # Counting
//
// Windows are aligned to the Unix epoch: with a 15-minute window, a request at 10:07 counts
// in the window 10:00-10:15 and X-RateLimit-Reset names 10:15. Each tier, client and window
// has its own Redis key, "ratelimit:<tier>:<client>:<window start, Unix seconds>". A single
// round trip increments it and sets it to expire a minute after its window ends, so old
// counters clean themselves up. Concurrent requests share round trips: while one pipeline
// is out, the increments that arrive queue, and the next pipeline carries all of them (one
// INCRBY of the number of hits and one EXPIRE per key), each request getting the count it
// would have got alone. A lone request that waits for its count goes at once; a hit decided
// ahead (below) that finds no pipeline out waits up to 2 ms for others, and goes at once
// with the next request that waits. A client part longer than 64 bytes is replaced by its
// SHA-256, so a caller-chosen license key cannot make Redis keys large. A request is allowed
// while its window's count is at most the tier's limit. Once a key is over its limit, the
// gateway remembers that in memory until the window ends and refuses the key's further
// requests without asking Redis, so a client hammering a closed window costs no Redis traffic.
//
// # Deciding ahead of Redis
//
// Most requests do not wait for that round trip. The gateway keeps, per key and window,
// the highest count Redis has answered and its own hits whose answers have not come back,
// and reckons a request's count from them. While that count leaves at least a tenth of
// the limit, and at least 10, and fewer than 4 of the key's hits are unanswered at this
// gateway, the request is answered at once with the reckoned count (X-RateLimit-Remaining
// included), and its hit goes to Redis in the next pipeline behind it (within 2 ms when
// none is out). Past either bound
// it waits for its own count, as above; a limit of 10 or less is never decided ahead. The
// hits of one gateway reach Redis in the order it decided them, so on one gateway the
// limit is exact and every reckoned count is the count Redis gives that hit.
//
// Across gateways, a gateway learns of the others' hits only from Redis's answers to its
// own: one round trip late while it is counting the key, or as old as its last request of
// it. So its headers can show more remaining than there is, and a key can be let through
// past its limit, by at most 4 requests per gateway and only when the other gateways have
// counted more of it than the margin (a tenth of the limit, at least 10) since this one
// last heard. The next answer corrects it. A client whose requests follow one another
// gets its limit exactly, however they spread over gateways, once each hit has reached
// Redis before the next request (a round trip after the decision). What this buys: the
// apps that check a license now and then, from addresses far from their limits, wait for
// no Redis round trip. Kept are at most 200,000 keys, the window's first; a key beyond
// them waits for Redis.
//
// # Which tiers count a request
//
// The IP tier counts first. When it refuses, the request is answered 429 at once: its body
// is not read and the per-license-key tier does not count it, so a client over its IP limit
// cannot drain anyone's activation budget. When the IP tier allows and the per-key tier
// refuses, the request has still used one request of the IP budget, since it did reach the
// gateway. The X-RateLimit headers describe the per-key limiter when that one refused, and
// the IP tier otherwise. The license key is the "key" string of the JSON body (exact field
// name, first 1 MiB only), read the way licensing reads it (pkg/license.CanonicalKey: case,
// dashes, spaces and look-alike letters do not make another key). A body without such a
// key, or a larger body, is only counted against the IP tier and reaches the next handler
// unchanged.
//
// # Client IP
//
// The client is the TCP peer. Only when the peer is inside a TRUSTED_PROXIES range is
// X-Forwarded-For consulted: its addresses (all such headers, in order) are walked from the
// right, skipping trusted proxies, and the first untrusted address is the client. If every
// address is a trusted proxy, the left-most one is the client. An entry that is not a bare IP
// address stops the walk, and the TCP peer is used, so that a misbehaving proxy makes its clients
// share the proxy's budget instead of letting a client choose its own identity.
//
// # When Redis is unreachable
//
// The gateway keeps answering. Each Redis pipeline is given 100 ms. A failure or timeout
// switches the gateway to in-process counters with the same limits and windows, and is logged
// once at WARN. From then on every replica enforces each limit on its own, so with N
// replicas a client can get up to N times its budget, and counts already in Redis are not
// carried over. For one second after a failure, Redis is not asked at all, so a dead Redis adds
// no latency; after that, one request probes it while the others keep counting in process.
// When a probe succeeds, the recovery is logged once at INFO and counting is shared through
// Redis again; counts made in process during the outage are not copied to Redis.
package ratelimit
