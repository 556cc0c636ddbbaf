package config

import (
	"io/fs"
	"math"
	"os"
	"path"
	"runtime/debug"
	"strconv"
	"strings"
)

// DefaultGCPercent is the garbage collector's target when GOGC is not set. These
// processes allocate per request, so Go's default of 100 spends a tenth of their CPU
// collecting; at 400 verify-license gains about 15% throughput (docs/performance-history.md).
// The heap may then grow to five times what is live, which the caches make a few hundred
// MiB under load, so the soft memory limit (below) is what keeps a process inside its
// container: near it, the collector runs as often as it must instead.
const DefaultGCPercent = 400

// memoryLimitShare is the share of the container's memory limit that the Go runtime's
// own memory (heap, goroutine stacks, its bookkeeping) is kept under when GOMEMLIMIT is
// not set. The rest is for what the kernel also counts against the container: the
// binary's mapped code and the memory the runtime has freed but not yet returned.
const memoryLimitShare = 0.9

// noMemoryLimit is the runtime's value for "no soft memory limit".
const noMemoryLimit = math.MaxInt64

// Runtime is what TuneRuntime set, for the process's start line in the log.
type Runtime struct {
	// GCPercent is the collector's target: GOGC as the operator set it, or DefaultGCPercent.
	GCPercent int
	// MemoryLimit is the soft limit of the runtime's memory in bytes (noMemoryLimit: none).
	MemoryLimit int64
	// MemoryLimitFrom says where the limit came from: "GOMEMLIMIT", "cgroup" (a share of
	// the container's memory limit) or "none".
	MemoryLimitFrom string
}

// LogAttrs are the attributes of the start line: gc_percent, memory_limit_mib and
// memory_limit_from.
func (r Runtime) LogAttrs() []any {
	limit := "none"
	if r.MemoryLimit != noMemoryLimit {
		limit = strconv.FormatInt(r.MemoryLimit>>20, 10)
	}
	return []any{"gc_percent", r.GCPercent, "memory_limit_mib", limit, "memory_limit_from", r.MemoryLimitFrom}
}

// TuneRuntime applies DefaultGCPercent unless the operator set GOGC, and a soft memory
// limit of memoryLimitShare of the container's memory limit (cgroup v2 or v1) unless the
// operator set GOMEMLIMIT. Without the limit, a process whose caches hold 150 MiB would
// let its heap reach 750 MiB before collecting and be killed by a 256 MiB container limit.
func TuneRuntime() Runtime {
	return tuneRuntime(os.DirFS("/"), os.LookupEnv)
}

func tuneRuntime(root fs.FS, lookupEnv func(string) (string, bool)) Runtime {
	operatorSet := func(name string) bool { v, set := lookupEnv(name); return set && v != "" }
	var r Runtime
	if operatorSet("GOGC") {
		// The runtime read it at start; setting it is the only way to read it back.
		r.GCPercent = debug.SetGCPercent(DefaultGCPercent)
		debug.SetGCPercent(r.GCPercent)
	} else {
		debug.SetGCPercent(DefaultGCPercent)
		r.GCPercent = DefaultGCPercent
	}
	if operatorSet("GOMEMLIMIT") {
		// The runtime read it at start.
		r.MemoryLimit, r.MemoryLimitFrom = debug.SetMemoryLimit(-1), "GOMEMLIMIT"
	} else if limit, ok := cgroupMemoryLimit(root); ok {
		r.MemoryLimit, r.MemoryLimitFrom = int64(float64(limit)*memoryLimitShare), "cgroup"
		debug.SetMemoryLimit(r.MemoryLimit)
	} else {
		r.MemoryLimit, r.MemoryLimitFrom = debug.SetMemoryLimit(-1), "none"
	}
	return r
}

// unlimitedCgroup: cgroup v1 spells "no limit" as the largest page-aligned int64, and
// no machine has memory near it.
const unlimitedCgroup = 1 << 60

// cgroupMemoryLimit is the memory limit of the cgroup this process runs in, read under
// root (the file system's root): cgroup v1's memory controller if the process is in one,
// else cgroup v2's. Inside a container the cgroup's own directory is usually mounted at
// /sys/fs/cgroup; without a cgroup namespace it is the path /proc/self/cgroup names under
// it. ok is false when there is no limit or it cannot be read.
func cgroupMemoryLimit(root fs.FS) (limit int64, ok bool) {
	own, err := fs.ReadFile(root, "proc/self/cgroup")
	if err != nil {
		return 0, false
	}
	var candidates []string
	for _, line := range strings.Split(strings.TrimSpace(string(own)), "\n") {
		// hierarchy-ID:controller-list:cgroup-path
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case hasController(parts[1], "memory"):
			candidates = append([]string{
				path.Join("sys/fs/cgroup/memory", parts[2], "memory.limit_in_bytes"),
				"sys/fs/cgroup/memory/memory.limit_in_bytes",
			}, candidates...)
		case parts[0] == "0" && parts[1] == "":
			candidates = append(candidates,
				path.Join("sys/fs/cgroup", parts[2], "memory.max"),
				"sys/fs/cgroup/memory.max")
		}
	}
	for _, name := range candidates {
		b, err := fs.ReadFile(root, name)
		if err != nil {
			continue
		}
		v := strings.TrimSpace(string(b))
		if v == "max" {
			return 0, false
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 || n >= unlimitedCgroup {
			return 0, false
		}
		return n, true
	}
	return 0, false
}

func hasController(list, name string) bool {
	for _, c := range strings.Split(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}
