package bench

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
)

// Client address blocks (first octet) of the reports, apart from the scenarios' blocks.
const (
	overloadBlock  = 60
	isolationBlock = 70
)

// The gateways of both reports run with admission control at its defaults
// (ADMISSION_MAX_LIMIT's default, 1000, set explicitly because the bench stack turns it
// off for the closed-loop rows) or off, and both with LICENSE_CACHE_LIVE_TTL=0: answers
// live 1 s, so over 100,000 uniform keys the cache answers about as little at 4× as at 1×
// and the phases compare the same work.
var (
	admissionOn  = map[string]string{"ADMISSION_MAX_LIMIT": "1000", "LICENSE_CACHE_LIVE_TTL": "0"}
	admissionOff = map[string]string{"ADMISSION_MAX_LIMIT": "0", "LICENSE_CACHE_LIVE_TTL": "0"}
)

func init() {
	RegisterReport(Report{
		Name: "overload: verify-license, uniform over 100,000 licenses, open loop at 2× and 4× the capacity",
		Run:  runOverload,
	})
	RegisterReport(Report{
		Name: "tenant isolation: tenant A at 10× its rate, tenant B's verify-license",
		Run:  runIsolation,
	})
}

// runOverload measures the capacity closed-loop (capacityClients, a gateway without
// admission control), then drives a gateway with admission control open-loop at 2× and
// 4× of it, and a gateway without at 2× for half as long (the collapse admission control
// prevents).
func runOverload(ctx context.Context, env *Env, d time.Duration) (string, error) {
	keys, err := readLicenseKeys(ctx, env)
	if err != nil {
		return "", err
	}
	on, err := env.Stack.StartGateway(ctx, 0, admissionOn)
	if err != nil {
		return "", err
	}
	off, err := env.Stack.StartGateway(ctx, 0, admissionOff)
	if err != nil {
		return "", err
	}
	vOn, vOff := newVerifier(on, overloadBlock), newVerifier(off, overloadBlock+1)
	uniform := Spreads[0].pick
	closed := func(v *verifier, base int) func(ctx context.Context, w, i int, start time.Time) outcome {
		return func(ctx context.Context, w, i int, start time.Time) outcome {
			return v.verify(ctx, keys[uniform(base+w, i)], base+w, i, start)
		}
	}
	open := func(v *verifier, worker int) func(ctx context.Context, i int, start time.Time) outcome {
		return func(ctx context.Context, i int, start time.Time) outcome {
			return v.verify(ctx, keys[uniform(worker, i)], worker, i, start)
		}
	}
	load := LoadAverage()
	closedLoop(ctx, d/4, 32, closed(vOff, 100))
	closedLoop(ctx, d/4, 32, closed(vOn, 140))
	// Capacity is what the stack answers with enough requests in flight that none of its
	// processes waits for work: 32 clients left the batched misses latency-bound, at two
	// thirds of it ("Capacity and latency apart" in docs/PERFORMANCE.md). Both closed loops
	// of capacityClients take address blocks of their own (a block has 256 clients).
	capOff, capOn := newVerifier(off, overloadBlock+2), newVerifier(on, overloadBlock+3)
	capacity := measure(env.Stack, fmt.Sprintf("capacity: closed loop, %d clients, without admission control", capacityClients), 0, func() []outcome {
		return closedLoop(ctx, d, capacityClients, closed(capOff, 0))
	})
	c := capacity.goodput()
	if c <= 0 {
		return "", fmt.Errorf("capacity: no request succeeded (%s)", capacity.firstError)
	}
	phases := []*phase{capacity, measure(env.Stack, fmt.Sprintf("closed loop, %d clients, admission control", capacityClients), 0, func() []outcome {
		return closedLoop(ctx, d, capacityClients, closed(capOn, 0))
	})}
	for i, m := range []float64{2, 4} {
		phases = append(phases, measure(env.Stack, fmt.Sprintf("open loop at %g× capacity, admission control", m), m*c, func() []outcome {
			return openLoop(ctx, d, m*c, open(vOn, 260+i))
		}))
	}
	phases = append(phases, measure(env.Stack, "open loop at 2× capacity, without admission control (half as long)", 2*c, func() []outcome {
		return openLoop(ctx, d/2, 2*c, open(vOff, 270))
	}))
	var b bytes.Buffer
	fmt.Fprintf(&b, "Load average %s before, %s after; capacity %.0f/s.\n\n%s\n", load, LoadAverage(), c, phaseTable(phases, c))
	// The same closed loop through admission control answers about the capacity (92–101%
	// in the reports of docs/performance-history.md); one that answers clearly more says
	// the capacity phase got less of the machine (a run on 2026-12-02: 186%).
	if second := phases[1].goodput(); second > 1.15*c {
		fmt.Fprintf(&b, "- **the capacity is suspect**: the closed loop with admission control right after it answered %.0f/s, %s of it, so the machine gave the capacity phase less than the others and every figure against the capacity below is too kind; run the report again\n",
			second, pct(second/c))
	}
	for _, p := range phases[2:4] {
		good := p.goodput() / c
		p99, refusalP99 := quantile(p.accepted, 0.99), quantile(p.refusals, 0.99)
		fmt.Fprintf(&b, "- %s: goodput %s of capacity (goal ≥ 90%%: %s), accepted p99 %s (goal < 50 ms: %s), refusal p99 %s (goal < 10 ms: %s), %d errors other than 503 refusals\n",
			p.name, pct(good), verdict(good >= 0.9), ms(p99), verdict(p99 < 50*time.Millisecond), ms(refusalP99), verdict(refusalP99 < 10*time.Millisecond), p.errors)
	}
	perAnswer := capacity.cpuPerAnswer()
	fmt.Fprintf(&b, "- goal 4's arithmetic: an answer cost the stack %s of CPU at capacity (every process but the load generator's). "+
		"Offered k× its capacity, the CPU that answers its capacity answers at most (answer − k × refusal) ÷ (answer − refusal) of it while refusing the rest, whichever requests it refuses; "+
		"a refusal's cost is the phase's CPU beyond its answers at the capacity's cost, per refusal, and k what the generator delivered (it lags at 4×):\n", us(perAnswer))
	for _, p := range phases[2:4] {
		k := p.delivered() / c
		refusal := p.cpuPerRefusal(perAnswer)
		// The generator shares the machine unless -pin keeps it on a CPU of its own; sending
		// k× the requests it takes more of it, and the stack has that much less.
		cpu := p.cores("") / capacity.cores("")
		fmt.Fprintf(&b, "  - %s, delivered %.2f×: a refusal about %s, so at most %s answered on the CPU the stack had at capacity (%.0f%% of a core); "+
			"it had %.0f%% here, the load generator using %.0f%% against %.0f%%, which allows %s (measured %s); 90%% needs a refusal under %s\n",
			p.name, k, us(refusal), pct(goodputBound(perAnswer, refusal, k, 1)), 100*capacity.cores(""),
			100*p.cores(""), 100*p.cores("bench"), 100*capacity.cores("bench"), pct(goodputBound(perAnswer, refusal, k, cpu)), pct(p.goodput()/c),
			us(refusalCeiling(perAnswer, k, 0.9)))
	}
	// The floors are offered what the gateway was at 2× and refuse all of it: more refusals
	// a second than the gateway made there, so if anything a cheaper figure each.
	floors, err := measureRefusalFloors(ctx, env, refusalFloorKinds, keys, 2*c, d, overloadBlock+4)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(&b, "\nThe refusal floors: every request refused, the generator and the rate as at 2× above, each floor a process of its own on the stack's CPUs (docs/PERFORMANCE.md, \"Past capacity, the refusals' own cost\"):\n\n%s",
		refusalFloorTable(floors, refusalCeiling(perAnswer, 2, 0.9), refusalCeiling(perAnswer, 4, 0.9)))
	return b.String(), nil
}

// us prints d in whole microseconds.
func us(d time.Duration) string { return fmt.Sprintf("%d µs", d.Microseconds()) }

// tenantLicenses seeds n licenses of tenant (licensing's table, as readLicenseKeys does)
// and returns their keys.
func tenantLicenses(ctx context.Context, env *Env, tenant string, n int) ([]string, error) {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = derivedKey(fmt.Sprintf("keyhouse-bench-%s-%d", tenant, i))
	}
	db, err := pgxx.Open(ctx, env.Stack.Env("DATABASE_URL"), "licensing")
	if err != nil {
		return nil, err
	}
	defer db.Close()
	if _, err := db.CopyFrom(ctx, pgx.Identifier{"licenses"},
		[]string{"key_hash", "key", "tenant_id", "tier", "product_id", "issued_to", "limits"},
		pgx.CopyFromSlice(n, func(i int) ([]any, error) {
			sum := sha256.Sum256([]byte(keys[i]))
			return []any{sum[:], keys[i], tenant, "pro", tenant + "-app", fmt.Sprintf("user-%d@%s.example", i, tenant), map[string]any{}}, nil
		})); err != nil {
		return nil, fmt.Errorf("seed %s's licenses: %w", tenant, err)
	}
	_, err = db.Exec(ctx, `VACUUM (ANALYZE) licenses`)
	return keys, err
}

// runIsolation gives two tenants licenses (A 10,000, B 5,000), teaches a gateway with
// admission control whose keys are whose (one verify of each), measures the capacity on
// A's keys, and sets each tenant's normal rate at a fifth of it. Then: both at their
// normal rate (B's baseline); A at 10× from many addresses with B unchanged; the same
// flood through a gateway without admission control, half as long; A at 10× with a
// made-up API key on every request, through the gateway with admission control; and A
// at 10× through a gateway with admission control and the license cache as shipped
// (the others keep answers 1 s), which answers A's flood from memory.
func runIsolation(ctx context.Context, env *Env, d time.Duration) (string, error) {
	stamp := fmt.Sprint(time.Now().Unix())
	aKeys, err := tenantLicenses(ctx, env, "bench-tenant-a-"+stamp, 10_000)
	if err != nil {
		return "", err
	}
	bKeys, err := tenantLicenses(ctx, env, "bench-tenant-b-"+stamp, 5_000)
	if err != nil {
		return "", err
	}
	on, err := env.Stack.StartGateway(ctx, 0, admissionOn)
	if err != nil {
		return "", err
	}
	off, err := env.Stack.StartGateway(ctx, 0, admissionOff)
	if err != nil {
		return "", err
	}
	// A gateway with the license cache as shipped (answers live LICENSE_CACHE_LIVE_TTL
	// while proven): after the teaching below it holds every answer about A's keys, so
	// A's flood is one of checks the cache answers, which admission control lets through.
	shipped, err := env.Stack.StartGateway(ctx, 0, map[string]string{"ADMISSION_MAX_LIMIT": admissionOn["ADMISSION_MAX_LIMIT"]})
	if err != nil {
		return "", err
	}
	vOn, vOff := newVerifier(on, isolationBlock), newVerifier(off, isolationBlock+1)
	vShipped := newVerifier(shipped, isolationBlock+6)
	// Teach the gateways with admission control every key's tenant, as a day of traffic
	// would.
	all := append(append([]string(nil), aKeys...), bKeys...)
	for _, v := range []*verifier{vOn, vShipped} {
		next := make(chan string, len(all))
		for _, k := range all {
			next <- k
		}
		close(next)
		var teachers sync.WaitGroup
		for w := range 32 {
			teachers.Add(1)
			go func() {
				defer teachers.Done()
				for i := 0; ; i++ {
					k, ok := <-next
					if !ok || ctx.Err() != nil {
						return
					}
					v.verify(ctx, k, 300+w, i, time.Now())
				}
			}()
		}
		teachers.Wait()
	}
	if ctx.Err() != nil {
		return "", ctx.Err()
	}
	load := LoadAverage()
	// Capacity as runOverload measures it, on an address block of its own.
	capV := newVerifier(off, isolationBlock+5)
	capacity := measure(env.Stack, fmt.Sprintf("capacity: closed loop on A's keys, %d clients, without admission control", capacityClients), 0, func() []outcome {
		return closedLoop(ctx, d/2, capacityClients, func(ctx context.Context, w, i int, start time.Time) outcome {
			return capV.verify(ctx, aKeys[mix(uint64(w)<<40|uint64(i))%uint64(len(aKeys))], w, i, start)
		})
	})
	c := capacity.goodput()
	if c <= 0 {
		return "", fmt.Errorf("capacity: no request succeeded (%s)", capacity.firstError)
	}
	normal := c / 5
	type pair struct{ a, b *phase }
	// A's and B's apps are different clients: each tenant's requests come over
	// connections of their own, so A's flood cannot hold B's requests in the generator.
	bOn, bOff := newVerifier(on, isolationBlock+2), newVerifier(off, isolationBlock+3)
	run := func(name string, v, bv *verifier, aRate float64, dur time.Duration, worker int) pair {
		var aOut []outcome
		done := make(chan struct{})
		b := measure(env.Stack, name, normal, func() []outcome {
			go func() {
				defer close(done)
				aOut = openLoop(ctx, dur, aRate, func(ctx context.Context, i int, start time.Time) outcome {
					return v.verify(ctx, aKeys[mix(uint64(worker)<<40|uint64(i))%uint64(len(aKeys))], worker, i, start)
				})
			}()
			return openLoop(ctx, dur, normal, func(ctx context.Context, i int, start time.Time) outcome {
				return bv.verify(ctx, bKeys[mix(uint64(worker+1)<<40|uint64(i))%uint64(len(bKeys))], worker+1, i, start)
			})
		})
		<-done
		a := &phase{name: name, offered: aRate, duration: b.duration, outcomes: aOut}
		a.summarize()
		return pair{a, b}
	}
	// A flood whose every request carries an API key of its own, made up: admission
	// control must count it as one tenant, not as many quiet ones.
	madeUp := newVerifier(on, isolationBlock+4)
	madeUp.madeUpCredentials = true
	phases := []pair{
		run("baseline: A and B at their normal rate, admission control", vOn, bOn, normal, d, 380),
		run("A at 10×, B unchanged, admission control", vOn, bOn, 10*normal, d, 390),
		run("A at 10×, B unchanged, without admission control (half as long)", vOff, bOff, 10*normal, d/2, 400),
		run("A at 10×, each request with a made-up API key, B unchanged, admission control", madeUp, bOn, 10*normal, d, 410),
		run("A at 10×, B unchanged, admission control, the license cache as shipped", vShipped, newVerifier(shipped, isolationBlock+7), 10*normal, d, 420),
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "Load average %s before, %s after; capacity %.0f/s on A's keys, each tenant's normal rate %.0f/s.\n\n", load, LoadAverage(), c, normal)
	b.WriteString("| phase | A offered/s | A goodput/s | A refused | B offered/s | B p50 | B p99 | B refused | B other errors | B error rate |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	errRate := func(p *phase) float64 {
		if len(p.outcomes) == 0 {
			return 0
		}
		return float64(len(p.refusals)+p.errors) / float64(len(p.outcomes))
	}
	for _, p := range phases {
		fmt.Fprintf(&b, "| %s | %.0f | %.0f | %d | %.0f | %s | %s | %d | %d | %s |\n", p.b.name, p.a.offered, p.a.goodput(), len(p.a.refusals),
			p.b.offered, ms(quantile(p.b.accepted, 0.5)), ms(quantile(p.b.accepted, 0.99)), len(p.b.refusals), p.b.errors, pctFine(errRate(p.b)))
	}
	base, flood := phases[0].b, phases[1].b
	baseP99, floodP99 := quantile(base.accepted, 0.99), quantile(flood.accepted, 0.99)
	fmt.Fprintf(&b, "\n- B's verify p99 with A at 10×: %s, %.2f× its baseline %s (goal < 2×: %s); B's error rate %s (goal < 0.1%%: %s)\n",
		ms(floodP99), float64(floodP99)/float64(max(baseP99, 1)), ms(baseP99), verdict(floodP99 < 2*baseP99), pctFine(errRate(flood)), verdict(errRate(flood) < 0.001))
	madeUpP99 := quantile(phases[3].b.accepted, 0.99)
	fmt.Fprintf(&b, "- the same with A's every request under a made-up API key: B's p99 %s, %.2f× its baseline; B's error rate %s\n",
		ms(madeUpP99), float64(madeUpP99)/float64(max(baseP99, 1)), pctFine(errRate(phases[3].b)))
	cached := phases[4]
	cachedP99 := quantile(cached.b.accepted, 0.99)
	fmt.Fprintf(&b, "- the same with the license cache as shipped (A's flood answered from memory, which admission control lets through): A answered %.0f/s; B's p99 %s, %.2f× its baseline; B's error rate %s\n",
		cached.a.goodput(), ms(cachedP99), float64(cachedP99)/float64(max(baseP99, 1)), pctFine(errRate(cached.b)))
	// Goal 5's arithmetic: with the cache as shipped every answer of the phase comes from
	// memory, and what A's flood takes of the CPU, B's checks queue behind. No server
	// answers A's requests for less than it costs to read each and write a refusal: the
	// net/http floor, measured here at A's rate.
	floors, err := measureRefusalFloors(ctx, env, refusalFloorKinds[:1], aKeys, 10*normal, d/2, isolationBlock+8)
	if err != nil {
		return "", err
	}
	if answers := cached.a.acceptedCount + cached.b.acceptedCount; answers > 0 {
		perCached, floor := cached.b.stackCPU()/time.Duration(answers), floors[0].perRefusal()
		stackCores := capacity.cores("")
		aCores := perCached.Seconds() * cached.a.goodput()
		fmt.Fprintf(&b, "- goal 5's arithmetic, the license cache as shipped: an answer from memory cost the stack %s of CPU (the phase's CPU over A's and B's answers), "+
			"so A's flood took %.0f%% of a core, %s of the %.0f%% the stack answered its capacity with; a server that does nothing but read a request and refuse it through net/http spent %s a request at A's rate (%s), "+
			"so A's flood needs at least %s of that CPU however it is answered, and B's checks queue with it for the rest\n",
			us(perCached), 100*aCores, pct(aCores/stackCores), 100*stackCores, us(floor), floors[0].about, pct(floor.Seconds()*cached.a.goodput()/stackCores))
	}
	for _, p := range phases {
		if p.b.firstError != "" {
			fmt.Fprintf(&b, "- %s: B's first error: %s\n", p.b.name, p.b.firstError)
		}
		if p.a.firstError != "" {
			fmt.Fprintf(&b, "- %s: A's first error: %s\n", p.a.name, p.a.firstError)
		}
	}
	return b.String(), nil
}

func pctFine(f float64) string { return fmt.Sprintf("%.3f%%", 100*f) }

// LoadAverage is the machine's 1-minute load average, so a report says how busy the
// machine was besides the bench.
func LoadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	if f := strings.Fields(string(b)); len(f) > 0 {
		return f[0]
	}
	return "unknown"
}
