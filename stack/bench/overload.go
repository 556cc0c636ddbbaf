package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
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
	// lag is how late the request left the generator (a connection to wait for, or the
	// generator's own CPU): the part of latency that is not the stack's.
	lag time.Duration
	err string
}

// phase is what one phase of a report measured.
type phase struct {
	name          string
	offered       float64 // arrivals per second (0: closed loop)
	duration      time.Duration
	outcomes      []outcome
	rss, fds      map[string]int64 // the most each process reached during the phase
	cpu           CPUTimes
	stolen        time.Duration // the hypervisor's share of the machine (StolenCPU)
	lags          []time.Duration
	accepted      []time.Duration
	refusals      []time.Duration
	errors        int
	firstError    string
	acceptedCount int
}

func (p *phase) summarize() {
	for _, o := range p.outcomes {
		p.lags = append(p.lags, o.lag)
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
	sortDurations(p.lags)
}

func (p *phase) goodput() float64 { return float64(p.acceptedCount) / p.duration.Seconds() }

// cpuPerOp is every process's CPU (the load generator's included) per accepted request, as
// Result.CPUPerOp is per completed op.
func (p *phase) cpuPerOp() time.Duration {
	if p.acceptedCount == 0 {
		return 0
	}
	return p.cpu.Total() / time.Duration(p.acceptedCount)
}

func sortDurations(d []time.Duration) { sort.Slice(d, func(i, j int) bool { return d[i] < d[j] }) }

func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return d[min(len(d)-1, int(float64(len(d))*q))]
}

// verifier sends verify-license requests for keys to one gateway, each from a client
// address of block (so the per-IP tier never refuses), and classifies the answers. It
// writes HTTP/1.1 by hand over a pool of keep-alive connections (at most maxConns, as a
// load balancer in front of the gateway would hold): net/http's client costs the
// generator several times the CPU per request, and on one machine that CPU is taken from
// the stack it measures.
type verifier struct {
	host  string
	block int
	conns chan *rawConn
	slots chan struct{} // one per connection that may be open
	// madeUpCredentials: every request carries an API key of its own, made up (a flood
	// that tries to pass for many quiet tenants).
	madeUpCredentials bool
}

type rawConn struct {
	c net.Conn
	r *bufio.Reader
}

const maxConns = 512

func newVerifier(url string, block int) *verifier {
	v := &verifier{host: strings.TrimPrefix(url, "http://"), block: block,
		conns: make(chan *rawConn, maxConns), slots: make(chan struct{}, maxConns)}
	for range maxConns {
		v.slots <- struct{}{}
	}
	return v
}

// conn takes an idle connection, or dials one while fewer than maxConns are open, or
// waits for one to come back.
func (v *verifier) conn(ctx context.Context) (*rawConn, error) {
	select {
	case c := <-v.conns:
		return c, nil
	default:
	}
	select {
	case c := <-v.conns:
		return c, nil
	case <-v.slots:
		c, err := net.Dial("tcp", v.host)
		if err != nil {
			v.slots <- struct{}{}
			return nil, err
		}
		return &rawConn{c: c, r: bufio.NewReaderSize(c, 4096)}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// close closes v's idle connections: once its loops have returned, all of them.
func (v *verifier) close() {
	for {
		select {
		case c := <-v.conns:
			_ = c.c.Close()
			v.slots <- struct{}{}
		default:
			return
		}
	}
}

func (v *verifier) verify(ctx context.Context, key string, worker, i int, start time.Time) outcome {
	c, err := v.conn(ctx)
	if err != nil {
		return outcome{latency: time.Since(start), err: err.Error()}
	}
	body := `{"key":"` + key + `"}`
	var credential string
	if v.madeUpCredentials {
		credential = "Authorization: Bearer kh_made_up_" + strconv.Itoa(worker) + "_" + strconv.Itoa(i) + "\r\n"
	}
	req := "POST /v1/verify-license HTTP/1.1\r\nHost: " + v.host + "\r\nContent-Type: application/json\r\n" + credential + "X-Forwarded-For: " +
		clientIP(v.block, worker, i, 900) + "\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	sent := time.Now()
	o, keep := v.roundTrip(c, req)
	o.latency, o.lag = time.Since(start), sent.Sub(start)
	if keep {
		v.conns <- c
	} else {
		c.c.Close()
		v.slots <- struct{}{}
	}
	return o
}

func (v *verifier) roundTrip(c *rawConn, req string) (o outcome, keep bool) {
	if _, err := io.WriteString(c.c, req); err != nil {
		return outcome{err: err.Error()}, false
	}
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		return outcome{err: err.Error()}, false
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return outcome{err: err.Error()}, false
	}
	o.status = resp.StatusCode
	switch {
	case resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "" && string(data) == overloadBody:
		o.refused = true
	case resp.StatusCode != http.StatusOK:
		o.err = fmt.Sprintf("status %d: %s", resp.StatusCode, data)
	}
	return o, !resp.Close
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
	before, stolenBefore := SampleCPU(s), StolenCPU()
	start := time.Now()
	p.outcomes = fn()
	p.duration = time.Since(start)
	p.cpu, p.stolen = SampleCPU(s).Sub(before), StolenCPU()-stolenBefore
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
	b.WriteString("| phase | offered/s | goodput/s | of capacity | accepted p50 | accepted p99 | refused | refusal p50 | refusal p99 | other errors | generator lag p99 |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, p := range phases {
		offered := "closed loop"
		if p.offered > 0 {
			offered = strconv.FormatFloat(p.offered, 'f', 0, 64)
		}
		refusalP50, refusalP99 := "–", "–"
		if len(p.refusals) > 0 {
			refusalP50, refusalP99 = ms(quantile(p.refusals, 0.5)), ms(quantile(p.refusals, 0.99))
		}
		fmt.Fprintf(&b, "| %s | %s | %.0f | %s | %s | %s | %d | %s | %s | %d | %s |\n", p.name, offered, p.goodput(), pct(p.goodput()/capacity),
			ms(quantile(p.accepted, 0.5)), ms(quantile(p.accepted, 0.99)), len(p.refusals), refusalP50, refusalP99, p.errors, ms(quantile(p.lags, 0.99)))
	}
	b.WriteString("\nCPU during each phase, % of one core (bench = the load generator and NATS; stolen = taken by the hypervisor from the machine, not in total):\n\n| phase |")
	for _, c := range CPUColumns {
		b.WriteString(" " + c + " |")
	}
	b.WriteString(" total | stolen |\n|---|")
	for range CPUColumns {
		b.WriteString("---:|")
	}
	b.WriteString("---:|---:|\n")
	for _, p := range phases {
		share := func(t time.Duration) string {
			return strconv.FormatFloat(100*t.Seconds()/p.duration.Seconds(), 'f', 0, 64)
		}
		fmt.Fprintf(&b, "| %s |", p.name)
		for _, c := range CPUColumns {
			fmt.Fprintf(&b, " %s |", share(p.cpu[c]))
		}
		fmt.Fprintf(&b, " %s | %s |\n", share(p.cpu.Total()), share(p.stolen))
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
