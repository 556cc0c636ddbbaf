package bench

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/keyhouse/keyhouse/stack"
)

// clockTick is the unit of /proc/<pid>/stat's CPU times (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

// CPUTimes is the CPU time (user + system) each process of the stack has used so far,
// by name: the gateway and service processes, "postgres" (the postmaster and its
// backends), "redis", and "bench" (this process: the load generator, the embedded NATS
// server and the floor's handler).
type CPUTimes map[string]time.Duration

// CPUColumns is the order of the CPU table's columns; processes not listed are summed
// into "other".
var CPUColumns = []string{"gateway", "licensing", "activations", "releases", "storefront", "postgres", "redis", "bench"}

// SampleCPU reads the CPU times of every process of s from /proc. A process that cannot
// be read (not Linux, already gone) is left out.
func SampleCPU(s *stack.Stack) CPUTimes {
	out := CPUTimes{}
	for _, p := range s.Procs() {
		if t, _, ok := procCPU(p.Pid()); ok {
			out[p.Name] += t
		}
	}
	if pid := postmasterPID(s); pid > 0 {
		if t, ok := processTreeCPU(pid); ok {
			out["postgres"] += t
		}
	}
	if pid := redisPID(s); pid > 0 {
		if t, _, ok := procCPU(pid); ok {
			out["redis"] += t
		}
	}
	if t, _, ok := procCPU(os.Getpid()); ok {
		out["bench"] += t
	}
	return out
}

// Sub returns the CPU used between before and c.
func (c CPUTimes) Sub(before CPUTimes) CPUTimes {
	out := CPUTimes{}
	for k, v := range c {
		out[k] = v - before[k]
	}
	return out
}

// Total is the CPU of every process.
func (c CPUTimes) Total() time.Duration {
	var t time.Duration
	for _, v := range c {
		t += v
	}
	return t
}

// StolenCPU is the CPU time the hypervisor has taken from this machine's CPUs so far
// (steal in /proc/stat's cpu line: time a virtual CPU had work and the host ran something
// else), 0 where it cannot be read. A row measured while it grows ran on less of the
// machine than its CPU columns suggest.
func StolenCPU() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	// proc(5): cpu user nice system idle iowait irq softirq steal ...
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0
	}
	steal, err := strconv.ParseInt(f[8], 10, 64)
	if err != nil {
		return 0
	}
	return time.Duration(steal) * clockTick
}

// procCPU is pid's own CPU (utime + stime) and that of its children it has waited for
// (cutime + cstime).
func procCPU(pid int) (self, children time.Duration, ok bool) {
	f := stack.ProcStat(pid)
	if len(f) < 15 {
		return 0, 0, false
	}
	// proc(5): utime 14, stime 15, cutime 16, cstime 17 (index = field - 3).
	var ticks [4]int64
	for i := range ticks {
		n, err := strconv.ParseInt(f[11+i], 10, 64)
		if err != nil {
			return 0, 0, false
		}
		ticks[i] = n
	}
	return time.Duration(ticks[0]+ticks[1]) * clockTick, time.Duration(ticks[2]+ticks[3]) * clockTick, true
}

// processTreeCPU is the CPU of pid and its children, the running ones and those it has
// reaped (a postmaster and its backends). A child reaped while the children are listed
// would be in neither sum (its own times read too late, the parent's too early), and a
// backend's lifetime of CPU missing from one sample shows as a negative share in a
// table, so the sum is taken again until the parent reaped nothing during it (at most
// ten times; then the last sum, which at worst misses the children of one moment).
func processTreeCPU(pid int) (time.Duration, bool) {
	var total time.Duration
	for range 10 {
		self, reaped, ok := procCPU(pid)
		if !ok {
			return 0, false
		}
		total = self + reaped
		for _, child := range stack.ChildrenOf(pid) {
			if t, _, ok := procCPU(child); ok {
				total += t
			}
		}
		if _, reapedAfter, ok := procCPU(pid); ok && reapedAfter == reaped {
			break
		}
	}
	return total, true
}

// postmasterPID and redisPID are the stack's Postgres and Redis server processes (0: not
// running).
func postmasterPID(s *stack.Stack) int {
	return stack.PIDFile(filepath.Join(s.Dir(), "postgres", "data", "postmaster.pid"))
}

func redisPID(s *stack.Stack) int { return stack.PIDFile(filepath.Join(s.Dir(), "redis", "redis.pid")) }
