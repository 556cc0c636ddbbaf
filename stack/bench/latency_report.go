package bench

import (
	"bytes"
	"context"
	"fmt"
	"time"
)

// latencyBlock is the first client address block (first octet) of the latency report;
// each of its phases takes the next one, so that no phase starts on addresses whose
// rate-limit budget an earlier phase spent (a block has 256 clients, each moving to a
// fresh address every 900 requests from its first).
const latencyBlock = 80

// capacityClients is how many closed-loop clients the latency report measures capacity
// with: enough that neither the floor nor the stack waits for work (on 2 cores, 64 left
// the stack's batches short and 128 did not).
const capacityClients = 128

// The arrival rates of the latency report, as shares of the floor's capacity.
var latencyRates = []float64{0.25, 0.5, 0.75}

func init() {
	RegisterReport(Report{
		Name: "latency: verify-license, uniform over 100,000 licenses, capacity and the same arrival rates, against the floor",
		Run:  runVerifyLatency,
	})
}

// runVerifyLatency separates what the verify-license rows mix. A row's 32 clients each
// wait for an answer before asking again, so its requests/s is 32 ÷ its mean latency: a
// path that batches its misses (a wait for the batch before, less CPU per request) and
// the floor (each request alone, at once) are compared as much on latency as on how
// much each can answer. Apps are not 32 clients in a loop: each checks its license when
// it starts or on a timer, whatever the others are doing (an open loop). So this report
// measures each one's capacity (closed loop at capacityClients, enough to keep either
// busy), then offers both the same arrival rates below the floor's capacity, where the
// latency at that load is what an app sees.
//
// The stack is a gateway of its own without admission control and with
// LICENSE_CACHE_LIVE_TTL=0 (answers live 1 s), so over 100,000 uniform keys its cache
// answers about as little in the last phase as in the first and every phase measures
// the miss path; the services behind it are the bench stack's, as shipped.
func runVerifyLatency(ctx context.Context, env *Env, d time.Duration) (string, error) {
	keys, err := readLicenseKeys(ctx, env)
	if err != nil {
		return "", err
	}
	gateway, err := env.Stack.StartGateway(ctx, 0, admissionOff)
	if err != nil {
		return "", err
	}
	floorURL, err := startVerifyFloor(ctx, env)
	if err != nil {
		return "", err
	}
	block := latencyBlock
	nextVerifier := func(url string) *verifier {
		block++
		return newVerifier(url, block-1)
	}
	uniform := Spreads[0].pick
	closed := func(v *verifier) func(ctx context.Context, w, i int, start time.Time) outcome {
		return func(ctx context.Context, w, i int, start time.Time) outcome {
			return v.verify(ctx, keys[uniform(v.block<<8|w, i)], w, i, start)
		}
	}
	// Each phase asks its own sequence of keys (uniform, seeded by its block), so that none
	// starts on what an earlier phase left in licensing's cache.
	open := func(v *verifier) func(ctx context.Context, i int, start time.Time) outcome {
		return func(ctx context.Context, i int, start time.Time) outcome {
			return v.verify(ctx, keys[uniform(v.block, i)], i%capacityClients, i/capacityClients, start)
		}
	}
	load := LoadAverage()
	// Warm both (connections, pools, the Go runtimes) before the first measured phase.
	closedLoop(ctx, d/4, capacityClients, closed(nextVerifier(gateway)))
	closedLoop(ctx, d/4, capacityClients, closed(nextVerifier(floorURL)))
	capStack := measure(env.Stack, fmt.Sprintf("the stack: capacity, closed loop, %d clients", capacityClients), 0, func() []outcome {
		return closedLoop(ctx, d, capacityClients, closed(nextVerifier(gateway)))
	})
	capFloor := measure(env.Stack, fmt.Sprintf("the floor: capacity, closed loop, %d clients", capacityClients), 0, func() []outcome {
		return closedLoop(ctx, d, capacityClients, closed(nextVerifier(floorURL)))
	})
	floorCapacity := capFloor.goodput()
	if floorCapacity <= 0 || capStack.goodput() <= 0 {
		return "", fmt.Errorf("capacity: no request succeeded (the stack: %s; the floor: %s)", capStack.firstError, capFloor.firstError)
	}
	phases := []*phase{capStack, capFloor}
	type pair struct {
		rate         float64
		stack, floor *phase
	}
	var pairs []pair
	for _, share := range latencyRates {
		rate := share * floorCapacity
		p := pair{rate: rate}
		stackV, floorV := nextVerifier(gateway), nextVerifier(floorURL)
		p.stack = measure(env.Stack, fmt.Sprintf("the stack: open loop at %s of the floor's capacity", pct(share)), rate, func() []outcome {
			return openLoop(ctx, d, rate, open(stackV))
		})
		p.floor = measure(env.Stack, fmt.Sprintf("the floor: open loop at %s of its capacity", pct(share)), rate, func() []outcome {
			return openLoop(ctx, d, rate, open(floorV))
		})
		pairs = append(pairs, p)
		phases = append(phases, p.stack, p.floor)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "Load average %s before, %s after; the floor's capacity %.0f/s (\"of capacity\" below is of the floor's).\n\n%s\n",
		load, LoadAverage(), floorCapacity, phaseTable(phases, floorCapacity))
	perRequest := func(p *phase) string { return us(p.cpuPerOp()) }
	ratio := capStack.goodput() / floorCapacity
	fmt.Fprintf(&b, "- capacity, %d clients: the stack %.0f/s, the floor %.0f/s: %s of the floor's (goal 2, ≥ 75%%: %s); CPU per request %s and %s\n",
		capacityClients, capStack.goodput(), floorCapacity, pct(ratio), verdict(ratio >= 0.75), perRequest(capStack), perRequest(capFloor))
	for _, p := range pairs {
		stackP99, floorP99 := quantile(p.stack.accepted, 0.99), quantile(p.floor.accepted, 0.99)
		fmt.Fprintf(&b, "- at %.0f/s: p99 the stack %s, the floor %s (goal 2, < 10 ms: %s); p50 %s and %s; CPU per request %s and %s; errors %d and %d\n",
			p.rate, ms(stackP99), ms(floorP99), verdict(stackP99 < 10*time.Millisecond),
			ms(quantile(p.stack.accepted, 0.5)), ms(quantile(p.floor.accepted, 0.5)), perRequest(p.stack), perRequest(p.floor),
			p.stack.errors+len(p.stack.refusals), p.floor.errors+len(p.floor.refusals))
	}
	return b.String(), nil
}
