// Command keyhouse-bench is `make bench`: it builds and starts a throwaway stack on
// loopback (its own Postgres, Redis and NATS under a temporary folder), runs every
// scenario of stack/bench with C concurrent clients for D each, and prints a Markdown
// table for docs/PERFORMANCE.md.
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/keyhouse/keyhouse/stack"
	"github.com/keyhouse/keyhouse/stack/bench"
)

func main() {
	// The overload and isolation reports start this binary again as a refusal floor.
	if bench.RefusalFloorChild() {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "keyhouse-bench: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	workers := flag.Int("c", 32, "concurrent clients")
	duration := flag.Duration("d", 10*time.Second, "measured duration per scenario (after a warm-up, -warm)")
	only := flag.String("run", "", "only scenarios whose name matches this regexp")
	keep := flag.Bool("keep", false, "keep the stack's folder (logs) afterwards")
	// A cache's share of the answers depends on how long a row has run against its key
	// count: verify-license over 100,000 uniform keys is mostly misses in its first
	// seconds and mostly hits minutes later (LICENSE_CACHE_LIVE_TTL). -warm sets how long
	// each scenario runs, unmeasured, before its first slice.
	warmFor := flag.Duration("warm", 0, "unmeasured warm-up per scenario before its first slice (0: a fifth of -d)")
	// On a small machine an open-loop generator past capacity takes its CPU from the stack
	// it measures (and lags, which enters every latency it reports): -pin gives it a CPU
	// of its own and the stack the others.
	pin := flag.Bool("pin", false, "run the load generator on the machine's last CPU and the stack on the others (Linux, 2+ CPUs)")
	rounds := flag.Int("rounds", 5, "measure each scenario in this many slices, interleaved with the other scenarios")
	prebuilt := flag.String("bin", "", "use the binaries in this folder instead of building the working tree (A/B runs)")
	// Two builds measured one after the other see different machines (on a shared VM the
	// same build's figures move by a third from one minute to the next); measured slice by
	// slice on two stacks side by side, each round's ratio compares like with like.
	against := flag.String("ab", "", "A/B in one run: also start a stack of the binaries in this folder (B) beside the first (A: -bin, or the working tree), measure every selected scenario on both, one right after the other in every round, the second doing the work the first did, and compare them")
	// An open-loop scenario's goal rate (webhooks 500/s, floating renewals 1,000/s) can be
	// above what a small machine produces; its latency figures then measure the backlog,
	// not the path. -rate drives those scenarios at a rate the machine sustains instead.
	rate := flag.Float64("rate", 0, "arrival rate (ops/s) for the selected open-loop scenarios instead of each one's own goal rate")
	settings := map[string]string{
		"ADMIN_API_KEY":   "bench-admin-key-0123456789abcdef0123456789",
		"TRUSTED_PROXIES": "127.0.0.1/32",
		// The scenarios' closed-loop clients measure each request's cost at a fixed
		// concurrency; admission control would refuse part of it. The overload and
		// isolation reports start gateways of their own with it on.
		"ADMISSION_MAX_LIMIT": "0",
	}
	flag.Func("env", "NAME=VALUE: a setting of every process other than make run's (repeatable; e.g. -env LICENSE_CACHE_LIVE_TTL=0 for the caches without liveness)", func(v string) error {
		name, value, ok := strings.Cut(v, "=")
		if !ok || name == "" {
			return fmt.Errorf("want NAME=VALUE, got %q", v)
		}
		settings[name] = value
		return nil
	})
	flag.Parse()
	if *rounds < 1 {
		return fmt.Errorf("-rounds must be at least 1")
	}
	filter, err := regexp.Compile(*only)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "keyhouse-bench-")
	if err != nil {
		return err
	}
	if !*keep {
		defer os.RemoveAll(dir)
	}
	binDir := *prebuilt
	if binDir == "" {
		binDir = filepath.Join(dir, "bin")
		fmt.Fprintln(os.Stderr, "building ...")
		if err := stack.Build(ctx, binDir); err != nil {
			return err
		}
	}
	// The logs take the path they take under `make run`: every process's output through
	// the launcher, line by line, with make run's settings (LOG_LEVEL and LOG_FORMAT as
	// the user leaves them), into a file here instead of the terminal.
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		return err
	}
	stacks := []*benchStack{{label: "A", binDir: binDir, dir: dir, log: "stack.log"}}
	if *against != "" {
		stacks = append(stacks, &benchStack{label: "B", binDir: *against, dir: filepath.Join(dir, "b"), log: "stack-b.log"})
	} else {
		stacks[0].label = ""
	}
	for _, st := range stacks {
		fmt.Fprintf(os.Stderr, "starting the stack%s ...\n", st.named())
		if err := st.start(ctx, filepath.Join(dir, "logs"), settings, max(*workers, 100)); err != nil {
			return err
		}
		defer st.stop()
	}
	placement := ""
	if *pin {
		for _, st := range stacks {
			if err := bench.Pin(ctx, st.s); err != nil {
				return err
			}
		}
		placement = fmt.Sprintf(", load generator pinned to CPU %d and the stack to the others", runtime.NumCPU()-1)
	}
	if len(stacks) == 2 {
		placement += fmt.Sprintf("; A/B: stack A runs %s, stack B %s, every row measured on both in every round, one right after the other, the second doing the work the first did", binDir, *against)
	}

	// Every scenario is set up first; then the measurements go in rounds, each scenario
	// measured for duration/rounds per round, so that every row of the table (the floor
	// included) sees the same share of whatever else the machine is doing, in an order
	// reversed every other round (bench.InRoundOrder).
	type prepared struct {
		on      *benchStack
		sc      bench.Scenario
		op      bench.Op
		slices  []bench.Result
		settles bool          // the scenario waits for its backlog after each slice
		settled time.Duration // the longest of those waits
		settle  error
	}
	var runs []*prepared
	for _, sc := range bench.Scenarios() {
		if !filter.MatchString(sc.Name) {
			continue
		}
		if *rate > 0 && sc.Rate > 0 {
			sc.Rate = *rate
		}
		// In an A/B run a scenario's two rows are neighbours in every round.
		for _, st := range stacks {
			fmt.Fprintf(os.Stderr, "setting up %s%s ...\n", sc.Name, st.named())
			op, err := sc.Setup(ctx, st.env)
			if err != nil {
				return fmt.Errorf("%s%s: setup: %w%s", sc.Name, st.named(), err, crashed(st.s))
			}
			runs = append(runs, &prepared{on: st, sc: sc, op: op})
		}
	}
	slice := *duration / time.Duration(*rounds)
	for round := range *rounds {
		fmt.Fprintf(os.Stderr, "round %d of %d ...\n", round+1, *rounds)
		// In an A/B run, the second of a scenario's two rows in a round (and in its
		// warm-up) runs again the work the first did: each client as many ops, on the
		// same keys. On a uniform spread the cache's share grows with the keys a row has
		// asked about, so two rows of a fixed duration would not compare: the faster stack
		// would ask about more keys and answer more of its next slice from memory.
		first := map[string]bench.Work{}
		replayOf := func(key string) bench.Work { return first[key] }
		ran := func(key string, w bench.Work) {
			if _, ok := first[key]; !ok && len(stacks) == 2 {
				first[key] = w
			}
		}
		for _, p := range bench.InRoundOrder(runs, round) {
			if p.sc.OneWindow && round > 0 {
				continue
			}
			env, s := p.on.env, p.on.s
			if err := env.Prepare(ctx, p.sc.ID); err != nil {
				return fmt.Errorf("%s: before a slice: %w%s", p.sc.Name, err, crashed(s))
			}
			if round == 0 {
				warm := "warm-up " + p.sc.ID
				ran(warm, bench.WarmUp(ctx, p.sc, p.op, *workers, cmp.Or(*warmFor, *duration/5), replayOf(warm)))
				if _, err := env.Settle(ctx, p.sc.ID); err != nil && p.settle == nil {
					p.settle = err
				}
				if err := env.Prepare(ctx, p.sc.ID); err != nil {
					return fmt.Errorf("%s: before a slice: %w%s", p.sc.Name, err, crashed(s))
				}
			}
			window := slice
			if p.sc.OneWindow {
				window = *duration
			}
			r := bench.RunSlice(ctx, p.sc, p.op, *workers, window, round, func() bench.Sample { return bench.SampleStack(s) }, replayOf(p.sc.ID))
			ran(p.sc.ID, r.Work)
			p.slices = append(p.slices, r)
			start := time.Now()
			ok, err := env.Settle(ctx, p.sc.ID)
			if err != nil && p.settle == nil {
				p.settle = err
			}
			if ok {
				p.settles = true
				p.settled = max(p.settled, time.Since(start))
			}
		}
	}
	// A row's check runs after its last slice (every slice is done by now).
	var checks []string
	for _, p := range runs {
		name := p.sc.Name + p.on.named()
		if p.settles {
			line := fmt.Sprintf("- %s: after a slice, what its ops left behind took at most %s to finish (unmeasured)", name, p.settled.Round(10*time.Millisecond))
			if p.settle != nil {
				line += "; FAILED: " + p.settle.Error()
			}
			checks = append(checks, line)
		}
		if p.sc.Check == nil {
			continue
		}
		found, err := p.sc.Check(ctx, p.on.env)
		if err != nil {
			found = "FAILED: " + err.Error()
		}
		checks = append(checks, fmt.Sprintf("- %s, checked after the row: %s", name, found))
	}
	var results []bench.Result
	byStack := map[*benchStack][]bench.Result{}
	for _, p := range runs {
		r := bench.Merge(p.slices)
		byStack[p.on] = append(byStack[p.on], r)
		r.Name += p.on.named() // the table's and the cache lines' rows, which mix the stacks
		if r.Errors > 0 {
			fmt.Fprintf(os.Stderr, "%s: %d errors, first: %s%s\n", r.Name, r.Errors, r.FirstError, crashed(p.on.s))
		}
		results = append(results, r)
	}
	fmt.Printf("\n%s, %d CPUs%s, %s per scenario in %d rounds after a %s warm-up, load average %s\n\n%s", runtime.GOOS+"/"+runtime.GOARCH, runtime.NumCPU(), placement, *duration, *rounds, cmp.Or(*warmFor, *duration/5), bench.LoadAverage(), bench.Table(results))
	fmt.Printf("\n%s", bench.CacheAnswers(results))
	for _, st := range stacks {
		if goals := bench.Goals(byStack[st]); goals != "" && st.label != "" {
			fmt.Printf("\nStack %s:\n\n%s", st.label, goals)
		} else {
			fmt.Print(goals)
		}
	}
	fmt.Println()
	if len(stacks) == 2 {
		fmt.Printf("%s\n", bench.CompareAB(byStack[stacks[0]], byStack[stacks[1]]))
	}
	for _, c := range checks {
		fmt.Println(c)
	}
	for _, r := range byStack[stacks[0]] {
		if r.Note != "" {
			fmt.Printf("- %s: %s\n", r.Name, r.Note)
		}
	}
	// One-shot tasks (a whole job timed once) run after the scenarios, so they load
	// no measurement; in an A/B run on each stack in turn, as the reports.
	for _, t := range bench.Tasks() {
		if !filter.MatchString(t.Name) {
			continue
		}
		for _, st := range stacks {
			fmt.Fprintf(os.Stderr, "running %s%s ...\n", t.Name, st.named())
			fmt.Println(strings.Replace(bench.RunTask(ctx, t, st.env), t.Name, t.Name+st.named(), 1))
		}
	}
	for _, r := range bench.Reports() {
		if !filter.MatchString(r.Name) {
			continue
		}
		for _, st := range stacks {
			// Each report starts on a quiet stack: the spine's backlog of the rows and
			// tasks before it, and autovacuum after them, would be measured with it.
			waited, quiet := bench.WaitUntilQuiet(ctx, st.s, quietTimeout)
			started := fmt.Sprintf("started after %s for the stack to quiet down", waited.Round(time.Second))
			if !quiet {
				started = fmt.Sprintf("started after %s, the stack still busy (more than %.0f%% of a core)", quietTimeout, 100*bench.Quiet)
			}
			fmt.Fprintf(os.Stderr, "running %s%s (%s) ...\n", r.Name, st.named(), started)
			out, err := r.Run(ctx, st.env, *duration)
			if err != nil {
				out = fmt.Sprintf("failed: %v%s", err, crashed(st.s))
			}
			fmt.Printf("\n### %s%s\n\n(%s)\n\n%s", r.Name, st.named(), started, out)
		}
	}
	if *keep {
		fmt.Fprintf(os.Stderr, "stack folder kept: %s\n", dir)
	}
	return nil
}

// benchStack is one stack the scenarios run on: the only one, or A or B of an A/B run.
type benchStack struct {
	label       string // "A" or "B" in an A/B run, else empty
	binDir, dir string
	log         string // the file of its processes' output, in the run's logs folder
	s           *stack.Stack
	env         *bench.Env
	logFile     *os.File
}

// named is what follows a row's name: " [A]" or " [B]" in an A/B run, else nothing.
func (st *benchStack) named() string {
	if st.label == "" {
		return ""
	}
	return " [" + st.label + "]"
}

// start starts the stack with settings, its output going to logs/st.log.
func (st *benchStack) start(ctx context.Context, logs string, settings map[string]string, clients int) error {
	if err := os.MkdirAll(st.dir, 0o755); err != nil {
		return err
	}
	// The postgres system user must reach the cluster folder inside it (MkdirTemp's
	// folder is the owner's alone).
	_ = os.Chmod(st.dir, 0o755)
	f, err := os.Create(filepath.Join(logs, st.log))
	if err != nil {
		return err
	}
	st.logFile = f
	s, err := stack.Start(ctx, stack.Options{Dir: st.dir, BinDir: st.binDir, Output: f, Env: stack.DevEnv(settings)})
	if err != nil {
		f.Close()
		return err
	}
	st.s = s
	st.env = &bench.Env{Stack: s, URL: s.URL, AdminKey: s.AdminKey, HTTP: bench.NewHTTPClient(clients)}
	return nil
}

func (st *benchStack) stop() {
	st.s.Stop()
	st.logFile.Close()
}

// quietTimeout bounds how long a report waits for the stack to quiet down (the import's
// 100,000 events took several minutes on a 2-core machine).
const quietTimeout = 10 * time.Minute

// crashed names the processes of the stack that exited on their own, if any.
func crashed(s *stack.Stack) string {
	var out string
	for {
		select {
		case p := <-s.Crashed():
			out += fmt.Sprintf("; %s exited: %v (see %s)", p.Name, p.Err(), filepath.Join(s.Dir(), "logs"))
		default:
			return out
		}
	}
}
