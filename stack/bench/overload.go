package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/keyhouse/keyhouse/stack"
)

// Report is a measurement with phases of its own (the overload and isolation runs: a
// capacity first, then open-loop rates derived from it), printed as its own table after
// the scenarios and tasks.
type Report struct {
	Name string
	// Run measures for about d per phase and returns the report's Markdown.
	Run func(ctx context.Context, env *Env, d time.Duration) (string, error)
}

var (
	reportsMu sync.Mutex
	reports   []Report
)

// RegisterReport adds a report; call it from an init function.
func RegisterReport(r Report) {
	reportsMu.Lock()
	defer reportsMu.Unlock()
	reports = append(reports, r)
}

// Reports returns the registered reports in registration order.
func Reports() []Report {
	reportsMu.Lock()
	defer reportsMu.Unlock()
	return slices.Clone(reports)
}

// overloadBody is the exact 503 of a request the gateway's admission control refused.
const overloadBody = `{"error":"Service unavailable, retry"}`

// outcome is one request of an open-loop phase.
type outcome struct {
	status  int // 0: transport error
	refused bool
	latency time.Duration
	err     string
}

// phase is what one phase of a report measured.
type phase struct {
	name          string
	offered       float64 // arrivals per second (0: closed loop)
	duration      time.Duration
	outcomes      []outcome
	rss, fds      map[string]int64 // the most each process reached during the phase
	accepted      []time.Duration
	refusals      []time.Duration
	errors        int
	firstError    string
	acceptedCount int
}

func (p *phase) summarize() {
	for _, o := range p.outcomes {
		switch {
		case o.status == http.StatusOK:
			p.accepted = append(p.accepted, o.latency)
		case o.refused:
			p.refusals = append(p.refusals, o.latency)
		default:
			p.errors++
			if p.firstError == "" {
				p.firstError = o.err
			}
		}
	}
	p.acceptedCount = len(p.accepted)
	sortDurations(p.accepted)
	sortDurations(p.refusals)
}

func (p *phase) goodput() float64 { return float64(p.acceptedCount) / p.duration.Seconds() }

func sortDurations(d []time.Duration) { sort.Slice(d, func(i, j int) bool { return d[i] < d[j] }) }

func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return d[min(len(d)-1, int(float64(len(d))*q))]
}

// verifier sends verify-license requests for keys to one gateway, each from a client
// address of block (so the per-IP tier never refuses) and classifies the answers.
type verifier struct {
	url    string
	client *http.Client
	block  int
}

func newVerifier(url string, block int) *verifier {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns, t.MaxIdleConnsPerHost = 4096, 4096
	return &verifier{url: url, block: block, client: &http.Client{Transport: t, Timeout: 30 * time.Second}}
}

func (v *verifier) verify(ctx context.Context, key string, worker, i int, start time.Time) outcome {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, v.url+"/v1/verify-license", strings.NewReader(`{"key":"`+key+`"}`))
	if err != nil {
		return outcome{err: err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Forwarded-For", clientIP(v.block, worker, i, 900))
	resp, err := v.client.Do(req)
	if err != nil {
		return outcome{latency: time.Since(start), err: err.Error()}
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	o := outcome{status: resp.StatusCode, latency: time.Since(start)}
	switch {
	case err != nil:
		o.status, o.err = 0, err.Error()
	case resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "" && string(body) == overloadBody:
		o.refused = true
	case resp.StatusCode != http.StatusOK:
		o.err = fmt.Sprintf("status %d: %s", resp.StatusCode, body)
	}
	return o
}

// openLoop starts one request at every 1/rate seconds of a schedule for d, whatever is in
// flight (a late generator catches up at once rather than skipping), and times each from
// its scheduled start, so a queue in front of the generator counts too. It waits for the
// requests in flight at the end.
func openLoop(ctx context.Context, d time.Duration, rate float64, send func(ctx context.Context, i int, start time.Time) outcome) []outcome {
	var (
		mu  sync.Mutex
		out []outcome
		wg  sync.WaitGroup
	)
	begin := time.Now()
	n := int(rate * d.Seconds())
	for i := range n {
		due := begin.Add(time.Duration(float64(i) / rate * float64(time.Second)))
		if wait := time.Until(due); wait > 0 {
			time.Sleep(wait)
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := send(ctx, i, due)
			mu.Lock()
			out = append(out, o)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// closedLoop runs workers clients back to back for d.
func closedLoop(ctx context.Context, d time.Duration, workers int, send func(ctx context.Context, worker, i int, start time.Time) outcome) []outcome {
	var (
		mu  sync.Mutex
		out []outcome
		wg  sync.WaitGroup
	)
	end := time.Now().Add(d)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []outcome
			for i := 0; time.Now().Before(end) && ctx.Err() == nil; i++ {
				mine = append(mine, send(ctx, w, i, time.Now()))
			}
			mu.Lock()
			out = append(out, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// measure runs fn while sampling every process's memory and open files, and returns the
// phase with the most each reached.
func measure(s *stack.Stack, name string, offered float64, fn func() []outcome) *phase {
	p := &phase{name: name, offered: offered, rss: map[string]int64{}, fds: map[string]int64{}}
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			for _, pr := range s.Procs() {
				if rss := procRSS(pr.Pid()); rss > p.rss[pr.Name] {
					p.rss[pr.Name] = rss
				}
				if fds := procFDs(pr.Pid()); fds > p.fds[pr.Name] {
					p.fds[pr.Name] = fds
				}
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	start := time.Now()
	p.outcomes = fn()
	p.duration = time.Since(start)
	close(stop)
	<-sampled
	p.summarize()
	return p
}

// procRSS is a process's resident memory in bytes (0 when it cannot be read).
func procRSS(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// procFDs is how many files a process has open.
func procFDs(pid int) int64 {
	entries, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		return 0
	}
	return int64(len(entries))
}

// phaseTable formats phases: arrivals, goodput against capacity, the accepted requests'
// latency, the refusals and their latency, other errors.
func phaseTable(phases []*phase, capacity float64) string {
	var b bytes.Buffer
	b.WriteString("| phase | offered/s | goodput/s | of capacity | accepted p50 | accepted p99 | refused | refusal p99 | other errors |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, p := range phases {
		offered := "closed loop"
		if p.offered > 0 {
			offered = strconv.FormatFloat(p.offered, 'f', 0, 64)
		}
		refusalP99 := "–"
		if len(p.refusals) > 0 {
			refusalP99 = ms(quantile(p.refusals, 0.99))
		}
		fmt.Fprintf(&b, "| %s | %s | %.0f | %s | %s | %s | %d | %s | %d |\n", p.name, offered, p.goodput(), pct(p.goodput()/capacity),
			ms(quantile(p.accepted, 0.5)), ms(quantile(p.accepted, 0.99)), len(p.refusals), refusalP99, p.errors)
	}
	b.WriteString("\nThe most memory (RSS) and open files each process reached during each phase:\n\n| phase |")
	names := procNames(phases)
	for _, n := range names {
		b.WriteString(" " + n + " |")
	}
	b.WriteString("\n|---|")
	for range names {
		b.WriteString("---:|")
	}
	b.WriteString("\n")
	for _, p := range phases {
		fmt.Fprintf(&b, "| %s |", p.name)
		for _, n := range names {
			fmt.Fprintf(&b, " %d MB, %d fds |", p.rss[n]>>20, p.fds[n])
		}
		b.WriteString("\n")
	}
	for _, p := range phases {
		if p.firstError != "" {
			fmt.Fprintf(&b, "\n%s: first other error: %s\n", p.name, p.firstError)
		}
	}
	return b.String()
}

func procNames(phases []*phase) []string {
	seen := map[string]bool{}
	var names []string
	for _, p := range phases {
		for n := range p.rss {
			if !seen[n] {
				seen[n] = true
				names = append(names, n)
			}
		}
	}
	sort.Strings(names)
	return names
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "**missed**"
}
