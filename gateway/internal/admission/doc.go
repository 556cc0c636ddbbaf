// Package admission is the gateway's admission control: a concurrency limit that adapts
// to latency, shared fairly between tenants, so that past its capacity the gateway
// refuses the excess at once (503 with Retry-After) instead of queueing it until every
// answer is late.
//
// # The limit
//
// At most Limit requests of the API (/v1/…) are in flight at once; a request over it is
// refused without being read further, never queued. The exception is a calm limiter (no
// request refused and no window over the latency target for four windows): a request
// over the limit is then admitted while its tenant holds less than an equal share of
// twice the limit (the rest of the hard bound, below, stays for the tenants that come
// after), since a busy machine's stall of tens of milliseconds piles up two or three
// times the usual number of requests at a moderate load, and refusing them turns late
// answers into failures. The first refusal makes the limiter strict. Every Window (500 ms, and at least
// ten finished requests) the limit moves with the average latency of the requests that
// finished in the window, as in Netflix's concurrency-limits (Gradient2):
//
//	target   = max(Tolerance × baseline, LatencyFloor)
//	gradient = clamp(target ÷ average, 0.5, 1)
//	limit    = max(0.8 × limit + 0.2 × (limit × gradient + √limit),
//	               min(limit, best rate × target))              (gradient < 1)
//	limit    = max(limit + √limit, rate × target)               (gradient = 1)
//
// within [MinLimit, MaxLimit], where rate is how many requests the window finished per
// second and best rate the most of any window in the last BaselineWindow. While the
// average stays within the target the limit grows by √limit per window (unless the load
// never came near it), or at once to what the window's rate keeps in flight at the target
// (Little's law: at that rate so many finish within it); past the target it shrinks by up
// to 10% per window, but not below what the best rate keeps in flight at the target. A
// machine that is merely full (slowed by work the limit does not hold back, above all the
// refusals' own) then keeps the limit its throughput earned: shrinking it would turn
// answers into refusals, the machine's load and the latency would stay, and the goodput
// would fall (a closed loop of 128 clients that ask again at once when refused, which the
// stack answers in full without admission control, got 3 in 10 answered). The baseline is the lowest window average
// of the last BaselineWindow (a minute): the latency of the gateway and the services when
// nothing queues. A standing queue would otherwise become the new normal, so every
// BaselineWindow/2 the limit drops to MinLimit for one window (a probe: 500 ms in 30 s),
// the queue drains, and the baseline is measured afresh.
//
// # Fair shares
//
// Each request counts for a tenant, which the gateway learns from the services' answers:
// a request with a credential for whom an answer proved that credential to be
// (auth.CallerHeader: its tenant, or the admin; a credential not proven yet, made up or
// refused, counts for UnknownCredentials, one tenant for all of them), a request about a
// license key for the key's tenant (licensecache.TenantHeader, named by every answer
// about license keys: verify-license's, validate-license's, check-update's, the seat
// and lease routes'; a key not answered yet counts for UnknownKeys, one tenant for all
// of them). A tenant's credentials and its license keys count for one tenant.
//
// Below the limit every request is admitted. At the limit, a light tenant is still
// admitted, up to twice the limit and lightRoom in flight (the hard bound); the others are
// refused. Light is either of two measures (Limiter.Acquire):
// holding fewer requests in flight than an equal share of the limit, or asking much less
// often than the busiest tenant. A tenant that floods is heavy by both, so it gets every
// slot nobody else wants and nothing more; the quiet tenants' requests go through whether
// the flood stalls for a moment (the in-flight measure) or their own requests slow down
// under it (the demand measure).
//
// # Answers from memory
//
// A verify-license whose answer the gateway's cache holds, a validate-license whose seat's
// answer it holds, or a check-update whose question it has answered, for at least another
// second (Options.AnswersFromMemory: the instance or the question is read from the body
// as peekLicense read it), is let through without a slot and counts in no
// window: it holds nothing behind the gateway, and refusing it costs about what answering
// it does, so its refusal would give up the answer and save nothing. If the answer is gone
// by the time its handler asks, the miss takes a slot then, or is refused
// (Options.SlotOnMiss, edge.WithSlotOnMiss).
//
// # The cost of a refusal
//
// Under overload most answers are refusals, so they must cost little: the middleware is
// the gateway's first handler, reads the body short of its end (peekLicense), allocates
// nothing for its answer and writes it from prebuilt bytes.
package admission
