package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The refusal floors: the least CPU a refusal can cost on this machine, measured in the
// overload report's run. Goal 4 at k× the capacity needs a refusal under refusalCeiling
// of an answer; whether a cheaper gateway could get there, or no server that reads a
// request before it refuses it can, is what these say; and goal 5's tenant A, whose
// flood no server can take in for less. Each is a process of its own (this binary
// again), fed by the same generator at the rate of the phase it is set against (the
// overload report's 2×, the isolation report's A at 10×), refusing every request with
// the gateway's exact 503, so its CPU is measured as the stack's is: from /proc, apart
// from the generator's.
//
//   - "net/http": Go's HTTP server and a handler that writes the 503 and nothing else
//     (the gateway's admission control adds about 2 µs to that: BenchmarkRefusal).
//   - "raw": no HTTP library: a loop per connection that reads the request's bytes (its
//     head to the blank line, then Content-Length bytes of body) and writes the 503's
//     bytes, one read and one write a request. What is left is those system calls and
//     Go's network poller: the least a Go server that reads the request can spend.
const refusalFloorEnv = "KEYHOUSE_BENCH_REFUSAL_FLOOR"

// refusalFloorKind is one way of refusing, and how the report names it.
type refusalFloorKind struct{ kind, about string }

// refusalFloorKinds are the floors, cheapest last.
var refusalFloorKinds = []refusalFloorKind{
	{"net/http", "net/http and a handler that writes the 503"},
	{"raw", "no HTTP library: read the request's bytes, write the 503's"},
}

// refusalResponse is the whole HTTP/1.1 answer both floors give: the gateway's refusal
// (admission control's status, Retry-After and body).
var refusalResponse = []byte("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\nContent-Length: " +
	strconv.Itoa(len(overloadBody)) + "\r\n\r\n" + overloadBody)

// RefusalFloorChild serves a refusal floor when this process was started as one (the
// overload and isolation reports start this binary again with refusalFloorEnv set) and reports
// whether it was: the caller then exits. The floor listens on a free loopback port,
// writes its address as the first line of its output, and serves until its standard
// input ends (the report, or the bench with it, is gone).
func RefusalFloorChild() bool {
	kind := os.Getenv(refusalFloorEnv)
	if kind == "" {
		return false
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	fmt.Println(l.Addr().String())
	err = serveRefusalFloor(kind, l)
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
	return true
}

// serveRefusalFloor refuses every request that reaches l, the way kind says.
func serveRefusalFloor(kind string, l net.Listener) error {
	switch kind {
	case "net/http":
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, overloadBody)
		}), ReadHeaderTimeout: 10 * time.Second}
		return srv.Serve(l)
	case "raw":
		for {
			c, err := l.Accept()
			if err != nil {
				return err
			}
			go refuseRaw(c)
		}
	}
	return fmt.Errorf("unknown refusal floor %q", kind)
}

// refuseRaw answers each request on c with refusalResponse, reading only what it must
// to find where the request ends: the head's lines, then Content-Length bytes.
func refuseRaw(c net.Conn) {
	defer c.Close()
	r := bufio.NewReaderSize(c, 4096)
	for {
		length := 0
		for {
			line, err := r.ReadSlice('\n')
			if err != nil {
				return
			}
			line = bytes.TrimRight(line, "\r\n")
			if len(line) == 0 {
				break
			}
			if name, value, ok := bytes.Cut(line, []byte(":")); ok && strings.EqualFold(string(name), "Content-Length") {
				if length, err = strconv.Atoi(string(bytes.TrimSpace(value))); err != nil || length < 0 {
					return
				}
			}
		}
		if _, err := r.Discard(length); err != nil {
			return
		}
		if _, err := c.Write(refusalResponse); err != nil {
			return
		}
	}
}

// refusalFloor is a running floor process.
type refusalFloor struct {
	refusalFloorKind
	url   string
	cmd   *exec.Cmd
	stdin io.Closer
}

// startRefusalFloor starts this binary again as the floor k, on the CPUs the stack runs
// on (the others than the generator's under -pin), and returns once it listens.
func startRefusalFloor(k refusalFloorKind) (*refusalFloor, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), refusalFloorEnv+"="+k.kind)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	f := &refusalFloor{refusalFloorKind: k, cmd: cmd, stdin: stdin}
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		f.stop()
		return nil, fmt.Errorf("refusal floor %s: %w", k.kind, err)
	}
	f.url = "http://" + strings.TrimSpace(addr)
	if err := f.onStackSide(); err != nil {
		f.stop()
		return nil, err
	}
	return f, nil
}

// onStackSide puts the floor on the stack's CPUs; its threads made since it started
// inherit the mask of the thread that made them, so it is applied again before each
// measurement.
func (f *refusalFloor) onStackSide() error {
	if err := onStackSide(f.cmd.Process.Pid); err != nil {
		return fmt.Errorf("refusal floor %s: %w", f.kind, err)
	}
	return nil
}

func (f *refusalFloor) stop() {
	_ = f.stdin.Close()
	done := make(chan struct{})
	go func() { _ = f.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = f.cmd.Process.Kill()
		<-done
	}
}

// floorPhase is what one floor measured: the phase (its outcomes, the stack's CPU
// meanwhile) and the floor process's own CPU.
type floorPhase struct {
	*refusalFloor
	p   *phase
	cpu time.Duration
}

// perRefusal is the floor's CPU per request it refused (0 when it refused none).
func (fp floorPhase) perRefusal() time.Duration {
	if len(fp.p.refusals) == 0 {
		return 0
	}
	return fp.cpu / time.Duration(len(fp.p.refusals))
}

// measureRefusalFloors drives a floor of each of kinds open loop at rate for d (block:
// the client addresses' block) and returns what each measured.
func measureRefusalFloors(ctx context.Context, env *Env, kinds []refusalFloorKind, keys []string, rate float64, d time.Duration, block int) ([]floorPhase, error) {
	var out []floorPhase
	for i, k := range kinds {
		f, err := startRefusalFloor(k)
		if err != nil {
			return nil, err
		}
		v := newVerifier(f.url, block)
		pick := Spreads[0].pick
		send := func(ctx context.Context, n int, start time.Time) outcome {
			return v.verify(ctx, keys[pick(300+i, n)%len(keys)], 300+i, n, start)
		}
		// A short warm-up dials the generator's connections and grows the floor's threads,
		// which then take the stack's CPUs too.
		openLoop(ctx, d/4, rate, send)
		if err := f.onStackSide(); err != nil {
			f.stop()
			return nil, err
		}
		before, _, _ := procCPU(f.cmd.Process.Pid)
		p := measure(env.Stack, "refusal floor ("+k.kind+")", rate, func() []outcome {
			return openLoop(ctx, d, rate, send)
		})
		after, _, ok := procCPU(f.cmd.Process.Pid)
		v.close()
		f.stop()
		if !ok {
			return nil, errors.New("refusal floor " + k.kind + ": its CPU could not be read")
		}
		out = append(out, floorPhase{refusalFloor: f, p: p, cpu: after - before})
	}
	return out, nil
}

// refusalFloorTable formats what the floors measured, against the refusal goal 4 needs
// at 2× (ceiling2) and at 4× (ceiling4).
func refusalFloorTable(floors []floorPhase, ceiling2, ceiling4 time.Duration) string {
	var b bytes.Buffer
	b.WriteString("| refusal floor | offered/s | refused/s | other answers | refusal p50 | refusal p99 | the floor's CPU, % of a core | its CPU a refusal |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, f := range floors {
		p := f.p
		fmt.Fprintf(&b, "| %s | %.0f | %.0f | %d | %s | %s | %.0f | %s |\n", f.about, p.offered, float64(len(p.refusals))/p.duration.Seconds(),
			p.errors, ms(quantile(p.refusals, 0.5)), ms(quantile(p.refusals, 0.99)), 100*f.cpu.Seconds()/p.duration.Seconds(), us(f.perRefusal()))
	}
	cheapest := floors[len(floors)-1]
	fmt.Fprintf(&b, "\n- the cheapest refusal a server that reads the request can make on this machine: %s of CPU (%s), against the %s goal 4 needs at 2× and %s at 4×: %s\n",
		us(cheapest.perRefusal()), cheapest.about, us(ceiling2), us(ceiling4), floorVerdict(cheapest.perRefusal(), ceiling2, ceiling4))
	for _, f := range floors {
		if f.p.firstError != "" {
			fmt.Fprintf(&b, "\n%s: first other answer: %s\n", f.about, f.p.firstError)
		}
	}
	return b.String()
}

func floorVerdict(floor, ceiling2, ceiling4 time.Duration) string {
	switch {
	case floor > ceiling2:
		return "out of reach at 2× and 4× of any gateway that reads a request before it refuses it"
	case floor > ceiling4:
		return "within reach at 2× only of a gateway whose refusal costs next to nothing beyond that floor; out of reach at 4×"
	}
	return "within reach at 2× and 4× of a gateway whose refusal costs next to nothing beyond that floor"
}
