// Package bench is the load generator behind `make bench`: scenarios registered by each
// service's file in this package run against a real stack on loopback, C concurrent
// workers for a fixed duration each, and report requests/s and latency percentiles.
package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keyhouse/keyhouse/stack"
)

// Op is one request of a scenario. worker is 0..C-1 and i counts that worker's calls, so
// an Op can spread its requests over client IPs or license keys without locking.
type Op func(ctx context.Context, worker, i int) error

// Scenario prepares its data once and returns the Op the workers call.
type Scenario struct {
	// ID is the scenario's short name in the goals summary (verify, floor, validate, ...).
	ID string
	// Name is what the report shows, e.g. "verify-license (gateway)".
	Name string
	// Workers, when set, is the scenario's own number of concurrent clients (the hot
	// license takes 100 parallel increments whatever -c says).
	Workers int
	// Rate, when set, drives the scenario open-loop: one op starts every 1/Rate seconds
	// whatever the latency of those in flight (a steady arrival rate, like webhooks), and
	// the report's clients column shows the rate. Otherwise Workers clients loop.
	Rate float64
	// OneWindow measures the scenario in one window of the whole duration, in the first
	// round, instead of a slice per round: a steady arrival rate past what the stack
	// keeps up with shows as a backlog that grows for as long as the rate lasts, which
	// short slices with a drained stack between them would reset every few seconds.
	OneWindow bool
	// Note says what the figure measures or what limits it; it goes in the report.
	Note  string
	Setup func(ctx context.Context, env *Env) (Op, error)
	// Check, when set, runs once after the scenario's last slice and says what it found
	// (the floating renewals read the seats back with SQL); the report prints its line.
	Check func(ctx context.Context, env *Env) (string, error)
}

var (
	mu        sync.Mutex
	scenarios []Scenario
)

// Register adds a scenario; call it from an init function.
func Register(s Scenario) {
	mu.Lock()
	defer mu.Unlock()
	scenarios = append(scenarios, s)
}

// Scenarios returns the registered scenarios in registration order.
func Scenarios() []Scenario {
	mu.Lock()
	defer mu.Unlock()
	return slices.Clone(scenarios)
}

// Env is the running stack a scenario talks to.
type Env struct {
	Stack *stack.Stack
	// URL is the gateway's base URL; AdminKey its admin credential.
	URL, AdminKey string
	HTTP          *http.Client

	settle  map[string]func(context.Context) error // scenario ID → AfterEachSlice's f
	prepare map[string]func(context.Context) error // scenario ID → BeforeEachSlice's f

	onceMu sync.Mutex
	once   map[string]*onceEntry // what onStack made, by name
}

// onceEntry is what onStack made for one name on one stack.
type onceEntry struct {
	sync.Mutex
	done  bool
	value any
}

// onStack returns what produce made the first time name was asked for on env's stack (the
// read licenses seeded, the channel's releases registered), calling it now if it has not
// succeeded before. The data lives in that stack's database, so what one stack made says
// nothing about another's (an A/B run sets its scenarios up on two stacks).
func onStack[T any](env *Env, name string, produce func() (T, error)) (T, error) {
	env.onceMu.Lock()
	if env.once == nil {
		env.once = map[string]*onceEntry{}
	}
	e := env.once[name]
	if e == nil {
		e = &onceEntry{}
		env.once[name] = e
	}
	env.onceMu.Unlock()
	e.Lock()
	defer e.Unlock()
	if e.done {
		return e.value.(T), nil
	}
	v, err := produce()
	if err != nil {
		return v, err
	}
	e.done, e.value = true, v
	return v, nil
}

// BeforeEachSlice makes f run before each slice of scenario id (and before its warm-up),
// unmeasured (a Setup calls it): it turns on what the scenario needs only while it runs,
// such as the webhooks row's endpoint, which would otherwise take a delivery of every
// license the other rows issue and leave them its backlog (AfterEachSlice turns it off).
func (e *Env) BeforeEachSlice(id string, f func(context.Context) error) {
	if e.prepare == nil {
		e.prepare = map[string]func(context.Context) error{}
	}
	e.prepare[id] = f
}

// Prepare runs what scenario id registered with BeforeEachSlice, if anything.
func (e *Env) Prepare(ctx context.Context, id string) error {
	if f := e.prepare[id]; f != nil {
		return f(ctx)
	}
	return nil
}

// AfterEachSlice makes f run after each slice of scenario id, unmeasured (a Setup calls
// it): f returns once the work the slice's ops left behind is done (the webhooks'
// deliveries still on their way), so the next row does not share the machine with this
// one's backlog. The report gives the longest wait.
func (e *Env) AfterEachSlice(id string, f func(context.Context) error) {
	if e.settle == nil {
		e.settle = map[string]func(context.Context) error{}
	}
	e.settle[id] = f
}

// Settle runs what scenario id registered with AfterEachSlice; ok is false when nothing.
func (e *Env) Settle(ctx context.Context, id string) (ok bool, err error) {
	f := e.settle[id]
	if f == nil {
		return false, nil
	}
	return true, f(ctx)
}

// NewHTTPClient keeps enough idle connections for every worker, so the benchmark measures
// requests, not TCP handshakes.
func NewHTTPClient(workers int) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = workers * 2
	t.MaxIdleConnsPerHost = workers * 2
	return &http.Client{Transport: t, Timeout: 30 * time.Second}
}

// ClientIP is the X-Forwarded-For a worker sends: the stack trusts loopback as a proxy
// and limits per client IP, so each worker moves to a fresh address every perIP requests
// (real traffic comes from many clients; one IP would hit the tier limit at once).
func ClientIP(worker, i, perIP int) string {
	n := worker*1_000_000 + i/perIP
	return fmt.Sprintf("10.%d.%d.%d", (n>>16)&0xff, (n>>8)&0xff, n&0xff)
}

// Do sends a JSON request through the gateway as client ip (with the admin key when
// admin is true) and returns the status and body. body may be nil.
func (e *Env) Do(ctx context.Context, method, path, ip string, admin bool, body any) (int, []byte, error) {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, e.URL+path, r)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Forwarded-For", ip)
	if admin {
		req.Header.Set("Authorization", "Bearer "+e.AdminKey)
	}
	resp, err := e.HTTP.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, data, err
}

// ErrRefused marks an answer the API defines as "retry" (track-usage's 503 for a lost
// race): the report counts it apart from errors and from the latency figures.
var ErrRefused = errors.New("503, retry")

// Expect returns an error unless status is want.
func Expect(status int, body []byte, err error, want int) error {
	if err != nil {
		return err
	}
	if status != want {
		return fmt.Errorf("status %d: %s", status, body)
	}
	return nil
}

var setupCalls atomic.Int64

// SetupIP is the client IP for setup requests: a fresh one every 50 calls keeps setup
// under the Management tier (100 / 15 min per IP).
func SetupIP() string { return ClientIP(250, int(setupCalls.Add(1)), 50) }

// IssueLicense issues a license as the admin and returns its key.
func (e *Env) IssueLicense(ctx context.Context, body map[string]any) (string, error) {
	st, data, err := e.Do(ctx, http.MethodPost, "/v1/issue-license", SetupIP(), true, body)
	if err := Expect(st, data, err, http.StatusOK); err != nil {
		return "", fmt.Errorf("issue-license: %w", err)
	}
	var out struct {
		Key string `json:"key"`
	}
	return out.Key, json.Unmarshal(data, &out)
}

// Result is one scenario's figures.
type Result struct {
	ID, Name, Note string
	Workers        int
	Requests       int
	Errors         int
	// Refused counts the ops that answered ErrRefused.
	Refused       int
	FirstError    string
	Duration      time.Duration
	P50, P99, Max time.Duration
	// CPU is what each process used during the measured period.
	CPU CPUTimes
	// Stolen is the CPU the hypervisor took from the machine during it (StolenCPU): a
	// row whose processes were ready to run and did not, not one that had less to do.
	Stolen time.Duration
	// Answers is what the gateways answered from their caches during it.
	Answers Answers
	// RoundRPS is the ops/s of each slice Merge took, in round order: a row and its floor
	// measured in the same round saw the same machine, so their ratio round by round
	// shows how far the run's conditions moved it.
	RoundRPS []float64
	// Work is what the slice's clients did, for a replay on another stack (nil open loop
	// and after Merge).
	Work Work
	// lat holds every latency, for Merge.
	lat []time.Duration
}

// RefusedShare is the share of answered ops that were refused.
func (r Result) RefusedShare() float64 {
	if r.Requests+r.Refused == 0 {
		return 0
	}
	return float64(r.Refused) / float64(r.Requests+r.Refused)
}

// CPUPerOp is the CPU of every process (the load generator included) per completed op.
func (r Result) CPUPerOp() time.Duration {
	if r.Requests == 0 {
		return 0
	}
	return r.CPU.Total() / time.Duration(r.Requests)
}

// RPS is completed requests per second.
func (r Result) RPS() float64 { return float64(r.Requests) / r.Duration.Seconds() }

// Work is how many ops each closed-loop client of a slice or a warm-up ran, by client,
// each on the keys its worker number and op numbers pick: what a replay runs again. A
// replay of it does the same work, so its time compares with the first run's even on a
// row whose cost depends on what came before it (a uniform spread's cache share grows
// with the keys its row has asked about).
type Work []int

// runner returns how sc is driven: workers closed-loop clients (sc.Workers when set),
// each running the ops replay gives it or, with replay nil, until ctx ends; or open loop
// at sc.Rate ops/s until ctx ends (replay ignored). It also returns the number of clients
// the report shows. The run returns, with the latencies and counts, the Work its clients
// did (nil open loop). ctx ends the run; an open-loop run's ops run under opCtx (see
// driveRate).
func runner(sc Scenario, op Op, workers int) (func(ctx, opCtx context.Context, base int, replay Work) ([]time.Duration, int, int, string, Work), int) {
	if sc.Rate > 0 {
		return func(ctx, opCtx context.Context, base int, _ Work) ([]time.Duration, int, int, string, Work) {
			lat, errs, refused, first := driveRate(ctx, opCtx, op, sc.Rate, base)
			return lat, errs, refused, first, nil
		}, int(sc.Rate)
	}
	if sc.Workers > 0 {
		workers = sc.Workers
	}
	return func(ctx, _ context.Context, base int, replay Work) ([]time.Duration, int, int, string, Work) {
		return drive(ctx, op, workers, base, replay)
	}, workers
}

// WarmUp drives op for d without measuring, or, given a replay, runs its Work again
// (bounded by replayBound(d)); it returns the Work done.
func WarmUp(ctx context.Context, sc Scenario, op Op, workers int, d time.Duration, replay Work) Work {
	run, _ := runner(sc, op, workers)
	if replay != nil {
		d = replayBound(d)
	}
	warm, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	_, _, _, _, done := run(warm, warm, 0, replay)
	return done
}

// replayBound is how long a replay of a run of d may take before it is cut: a replay
// ends when its clients have done their ops, and a stack several times slower than the
// other must not hold the run up forever.
func replayBound(d time.Duration) time.Duration { return 10*d + time.Minute }

// InRoundOrder is the order in which round measures the rows: as given in even rounds,
// reversed in odd ones. A row leaves work behind it (a write row's events still being
// relayed and logged, autovacuum of what it deleted, the caches it filled), which the
// row measured next pays for; in a fixed order the same row would always pay for the
// same neighbour, and a row measured right after its floor, or its floor right after it,
// would be flattered or penalised in every round alike.
func InRoundOrder[T any](rows []T, round int) []T {
	if round%2 == 0 {
		return rows
	}
	reversed := slices.Clone(rows)
	slices.Reverse(reversed)
	return reversed
}

// sliceBase spaces the op numbers of successive slices of one scenario, so each slice
// uses client IPs (and keys) of its own.
const sliceBase = 2_000_000

// RunSlice measures op for d, without warm-up, or, given a replay, while it runs that
// Work again (its Duration is then the time the work took); slice numbers the
// measurements of one scenario (0, 1, ...) so each uses fresh client IPs. Merge the slices
// of a scenario into its Result.
func RunSlice(ctx context.Context, sc Scenario, op Op, workers int, d time.Duration, slice int, sample func() Sample, replay Work) Result {
	run, workers := runner(sc, op, workers)
	if replay != nil {
		d = replayBound(d)
	}
	runCtx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var before Sample
	if sample != nil {
		before = sample()
	}
	start := time.Now()
	lat, errs, refused, first, work := run(runCtx, ctx, 1_000_000+slice*sliceBase, replay)
	res := Result{ID: sc.ID, Name: sc.Name, Note: sc.Note, Workers: workers, Requests: len(lat), Errors: errs,
		Refused: refused, FirstError: first, Duration: time.Since(start), Work: work, lat: lat}
	if sample != nil {
		after := sample()
		res.CPU, res.Stolen, res.Answers = after.CPU.Sub(before.CPU), after.Stolen-before.Stolen, after.Answers.Sub(before.Answers)
	}
	return res
}

// Merge sums the slices of one scenario and computes its latency percentiles.
func Merge(slices []Result) Result {
	res := slices[0]
	res.CPU, res.Stolen, res.Answers = CPUTimes{}, 0, Answers{}
	res.Requests, res.Errors, res.Refused, res.Duration, res.lat, res.RoundRPS, res.Work = 0, 0, 0, 0, nil, nil, nil
	for _, r := range slices {
		res.RoundRPS = append(res.RoundRPS, r.RPS())
		res.Requests += r.Requests
		res.Errors += r.Errors
		res.Refused += r.Refused
		res.Duration += r.Duration
		res.lat = append(res.lat, r.lat...)
		for k, v := range r.CPU {
			res.CPU[k] += v
		}
		res.Answers.add(r.Answers)
		res.Stolen += r.Stolen
		if res.FirstError == "" {
			res.FirstError = r.FirstError
		}
	}
	lat := res.lat
	if len(lat) > 0 {
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		res.P50, res.P99, res.Max = lat[len(lat)*50/100], lat[len(lat)*99/100], lat[len(lat)-1]
	}
	return res
}

// drive runs workers closed-loop clients until ctx ends, or until they have run again the
// ops of replay; op numbers start at base so warm-up and measurement use different client
// IPs and keys. It returns the latencies of the ops answered, the errors, the refusals,
// the first error, and the Work each client did (an op cut by ctx's end is not part of it).
//
// A replay runs each client's ops of the work (client w's ops base to base+replay[w]-1,
// so the same keys), in the order the clients reached them, by workers clients that take
// the next op as they finish one: all of them busy until the last few ops, as in a run of
// a duration. (Each client running only its own ops would leave the run's end to the
// slowest few, at less than its concurrency.)
func drive(ctx context.Context, op Op, workers, base int, replay Work) ([]time.Duration, int, int, string, Work) {
	var (
		mu      sync.Mutex
		all     []time.Duration
		errs    int
		refused int
		first   string
		wg      sync.WaitGroup
		next    atomic.Int64
	)
	var queue [][2]int // a replay's ops: client, op number
	for i := 0; replay != nil && i < slices.Max(replay); i++ {
		for w, n := range replay {
			if i < n {
				queue = append(queue, [2]int{w, base + i})
			}
		}
	}
	done := make([]atomic.Int64, workers) // by client: a replay's ops of one client run on any worker
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			bad, retry := 0, 0
			msg := ""
			for i := base; ctx.Err() == nil; i++ {
				client, n := w, i // a replay takes both from its queue instead
				if replay != nil {
					k := int(next.Add(1)) - 1
					if k >= len(queue) {
						break
					}
					client, n = queue[k][0], queue[k][1]
				}
				t0 := time.Now()
				err := op(ctx, client, n)
				if ctx.Err() != nil {
					break // a call cut by the deadline is not a result
				}
				done[client].Add(1)
				if errors.Is(err, ErrRefused) {
					retry++
					continue
				}
				if err != nil {
					bad++
					if msg == "" {
						msg = err.Error()
					}
					continue
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			all = append(all, mine...)
			errs += bad
			refused += retry
			if first == "" {
				first = msg
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	work := make(Work, workers)
	for w := range done {
		work[w] = int(done[w].Load())
	}
	return all, errs, refused, first, work
}

// driveRate starts op i at start + i/rate, a fixed schedule, until ctx ends, then waits
// for the ops in flight, which run under opCtx: each op started in the window is a
// result however long it takes (the slice's Duration then includes the wait), so a row
// that falls behind shows it in its latency and rate instead of dropping its slowest ops.
// An op is timed from its scheduled start, and ops whose time passed while the generator
// was not running (a busy machine) start at once: arrivals do not wait for the
// generator, so neither the rate offered nor the latency measured leaves them out. (A
// time.Ticker drops the ticks a late receiver missed, which offered 7% less than the
// rate on this machine while the row reported it as not answered.)
func driveRate(ctx, opCtx context.Context, op Op, rate float64, base int) ([]time.Duration, int, int, string) {
	var (
		mu      sync.Mutex
		all     []time.Duration
		errs    int
		refused int
		first   string
		wg      sync.WaitGroup
	)
	interval := time.Duration(float64(time.Second) / rate)
	start := time.Now()
	wait := time.NewTimer(0)
	defer wait.Stop()
	for n := 0; ; n++ {
		due := start.Add(time.Duration(n) * interval)
		if d := time.Until(due); d > 0 {
			wait.Reset(d)
			select {
			case <-ctx.Done():
				wg.Wait()
				return all, errs, refused, first
			case <-wait.C:
			}
		} else if ctx.Err() != nil {
			wg.Wait()
			return all, errs, refused, first
		}
		i := base + n
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := op(opCtx, 0, i)
			d := time.Since(due)
			if opCtx.Err() != nil {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, ErrRefused):
				refused++
			case err != nil:
				errs++
				if first == "" {
					first = err.Error()
				}
			default:
				all = append(all, d)
			}
		}()
	}
}

// Table formats results as a Markdown table: throughput and latency, then the CPU each
// process used per scenario (as a share of one core), then the CPU of every process per op.
func Table(results []Result) string {
	var b bytes.Buffer
	b.WriteString("| scenario | clients | ops/s | p50 | p99 | max | errors | 503 share |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range results {
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s | %d | %s |\n", r.Name, r.Workers, strconv.FormatFloat(r.RPS(), 'f', 0, 64),
			ms(r.P50), ms(r.P99), ms(r.Max), r.Errors, pct(r.RefusedShare()))
	}
	b.WriteString("\nCPU during each scenario, % of one core (bench = load generator, NATS, floor handler; stolen = taken by the hypervisor from the machine, not in total):\n\n| scenario |")
	for _, c := range CPUColumns {
		b.WriteString(" " + c + " |")
	}
	b.WriteString(" other | total | stolen | CPU per op |\n|---|")
	for range CPUColumns {
		b.WriteString("---:|")
	}
	b.WriteString("---:|---:|---:|---:|\n")
	for _, r := range results {
		secs := r.Duration.Seconds()
		share := func(t time.Duration) string { return strconv.FormatFloat(100*t.Seconds()/secs, 'f', 0, 64) }
		fmt.Fprintf(&b, "| %s |", r.Name)
		var listed time.Duration
		for _, c := range CPUColumns {
			fmt.Fprintf(&b, " %s |", share(r.CPU[c]))
			listed += r.CPU[c]
		}
		fmt.Fprintf(&b, " %s | %s | %s | %s |\n", share(r.CPU.Total()-listed), share(r.CPU.Total()), share(r.Stolen),
			us(r.CPUPerOp()))
	}
	return b.String()
}

// roundByRound is "round by round lo–hi" between before and after: the least and the most
// of a's ops/s over b's in each round both were measured in, written by format; nothing
// when they were not measured in the same two or more rounds.
func roundByRound(before string, a, b Result, format func(float64) string, after string) string {
	lo, hi, ok := roundRange(a, b)
	if !ok {
		return ""
	}
	return before + "round by round " + format(lo) + "–" + format(hi) + after
}

// roundRange is the least and the most of a's ops/s over b's in each round both were
// measured in; ok is false when they were not measured in the same two or more rounds.
func roundRange(a, b Result) (lo, hi float64, ok bool) {
	if len(a.RoundRPS) < 2 || len(a.RoundRPS) != len(b.RoundRPS) {
		return 0, 0, false
	}
	lo, hi = math.Inf(1), math.Inf(-1)
	for i, rps := range a.RoundRPS {
		if b.RoundRPS[i] <= 0 {
			return 0, 0, false
		}
		lo, hi = min(lo, rps/b.RoundRPS[i]), max(hi, rps/b.RoundRPS[i])
	}
	return lo, hi, true
}

// CompareAB compares the rows of an A/B run, stack B's against stack A's (matched by
// scenario): ops/s, its ratio over the run and round by round, CPU per op, p99, and for a
// row the gateway's cache can answer the share it did on each stack. The two rows of a
// scenario were measured one right after the other in every round, so a round's ratio
// compares two builds on the same machine. The floors run the same code on both stacks:
// their ratios are what the two stacks' conditions alone gave. On a row whose cache share
// grows with the requests it has made (a uniform spread), a stack that got ahead answers
// more from memory and stays ahead, so read its ratio beside the two shares.
func CompareAB(a, b []Result) string {
	byID := map[string]Result{}
	for _, r := range a {
		byID[r.ID] = r
	}
	var out bytes.Buffer
	out.WriteString("B against A (each scenario measured on both stacks in every round, one right after the other; a floor is the same code on both, so its ratio is what the stacks' conditions alone gave):\n\n")
	out.WriteString("| scenario | A ops/s | B ops/s | B/A | B/A round by round | A CPU per op | B CPU per op | B/A CPU | A p99 | B p99 | cache A / B |\n|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|\n")
	for _, rb := range b {
		ra, ok := byID[rb.ID]
		if !ok || ra.RPS() <= 0 || ra.CPUPerOp() <= 0 {
			continue
		}
		rounds := "–"
		if lo, hi, ok := roundRange(rb, ra); ok {
			rounds = times(lo) + "–" + times(hi)
		}
		cache := "–"
		if len(ra.Answers)+len(rb.Answers) > 0 {
			cache = pct(ra.Answers.share()) + " / " + pct(rb.Answers.share())
		}
		fmt.Fprintf(&out, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", rb.Name,
			strconv.FormatFloat(ra.RPS(), 'f', 0, 64), strconv.FormatFloat(rb.RPS(), 'f', 0, 64), times(rb.RPS()/ra.RPS()), rounds,
			us(ra.CPUPerOp()), us(rb.CPUPerOp()), times(float64(rb.CPUPerOp())/float64(ra.CPUPerOp())), ms(ra.P99), ms(rb.P99), cache)
	}
	return out.String()
}

func times(f float64) string { return strconv.FormatFloat(f, 'f', 2, 64) + "×" }

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', 2, 64) + " ms"
}

func pct(f float64) string { return strconv.FormatFloat(100*f, 'f', 1, 64) + "%" }

// Goals checks the results against issue 27's goals, spread by spread (uniform first):
// verify-license at three quarters of the floor on the same licenses and spread with p99
// under 10 ms; validate-license and check-update within 1.5 times verify-license's cost;
// then the write rows against verify-license as before (uncontended track-usage within 2
// times). Cost is measured two ways: time (the inverse of ops/s at the same concurrency)
// and CPU of every process per op.
func Goals(results []Result) string {
	by := map[string]Result{}
	for _, r := range results {
		by[r.ID] = r
	}
	var b bytes.Buffer
	for _, sp := range Spreads {
		verify, okV := by["verify"+sp.ID]
		if floor, ok := by["floor"+sp.ID]; ok && okV && floor.RPS() > 0 {
			fmt.Fprintf(&b, "- verify-license, %s: %s of the floor's ops/s (goal 75%%%s), p99 %s (goal < 10 ms); CPU per op %.2f× the floor's\n",
				sp.Label, pct(verify.RPS()/floor.RPS()), roundByRound("; ", verify, floor, pct, ""), ms(verify.P99), float64(verify.CPUPerOp())/float64(max(floor.CPUPerOp(), 1)))
		}
		for _, id := range []string{"validate", "check-update"} {
			if r, ok := by[id+sp.ID]; ok && okV && r.RPS() > 0 && verify.CPUPerOp() > 0 {
				fmt.Fprintf(&b, "- %s, %s: %.2f× verify-license's time per op, %.2f× its CPU per op (goal within 1.5×)\n",
					id, sp.Label, verify.RPS()/r.RPS(), float64(r.CPUPerOp())/float64(verify.CPUPerOp()))
			}
		}
	}
	verify, okV := by["verify"]
	for _, g := range []struct {
		id    string
		limit float64
	}{{"pairs", 3}, {"usage", 2}} {
		r, ok := by[g.id]
		if !ok || !okV || r.RPS() == 0 || verify.CPUPerOp() == 0 {
			continue
		}
		fmt.Fprintf(&b, "- %s: %.2f× verify-license's (uniform) time per op, %.2f× its CPU per op\n",
			g.id, verify.RPS()/r.RPS(), float64(r.CPUPerOp())/float64(verify.CPUPerOp()))
	}
	if pairs, floor := by["pairs"], by["pairs-floor"]; pairs.RPS() > 0 && floor.RPS() > 0 && floor.CPUPerOp() > 0 {
		fmt.Fprintf(&b, "- activate + deactivate pairs: %.2f× the write floor's time per pair%s, %.2f× its CPU per pair (goal within 1.5×)\n",
			floor.RPS()/pairs.RPS(), roundByRound(" (", floor, pairs, times, ")"), float64(pairs.CPUPerOp())/float64(floor.CPUPerOp()))
	}
	if r, ok := by["usage-hot"]; ok {
		fmt.Fprintf(&b, "- track-usage on one hot license, %d parallel clients: %.0f applied increments/s, %s of the answers 503\n",
			r.Workers, r.RPS(), pct(r.RefusedShare()))
	}
	b.WriteString(leaseGoals(by))
	return b.String()
}
