package config

import (
	"runtime/debug"
	"testing"
	"testing/fstest"
)

func TestTheContainersMemoryLimitIsFoundInEitherCgroupVersion(t *testing.T) {
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	for _, tc := range []struct {
		name  string
		fs    fstest.MapFS
		limit int64 // 0: none found
	}{
		{"v2 inside a cgroup namespace", fstest.MapFS{
			"proc/self/cgroup":         file("0::/\n"),
			"sys/fs/cgroup/memory.max": file("268435456\n"),
		}, 256 << 20},
		{"v2 without a namespace: the path /proc/self/cgroup names", fstest.MapFS{
			"proc/self/cgroup": file("0::/kubepods/burstable/pod1/c1\n"),
			"sys/fs/cgroup/kubepods/burstable/pod1/c1/memory.max": file("536870912\n"),
			"sys/fs/cgroup/memory.max":                            file("max\n"),
		}, 512 << 20},
		{"v2 without a limit", fstest.MapFS{
			"proc/self/cgroup":         file("0::/\n"),
			"sys/fs/cgroup/memory.max": file("max\n"),
		}, 0},
		{"v1, the memory controller's own path", fstest.MapFS{
			"proc/self/cgroup": file("9:name=systemd:/\n4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n0::/\n"),
			"sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes": file("134217728\n"),
		}, 128 << 20},
		{"v1 mounted at the container's own cgroup", fstest.MapFS{
			"proc/self/cgroup":                           file("4:memory:/docker/abc\n"),
			"sys/fs/cgroup/memory/memory.limit_in_bytes": file("134217728\n"),
		}, 128 << 20},
		{"v1 without a limit (this machine's case)", fstest.MapFS{
			"proc/self/cgroup": file("4:memory:/process_api/b6f5\n0::/\n"),
			"sys/fs/cgroup/memory/process_api/b6f5/memory.limit_in_bytes": file("9223372036854771712\n"),
		}, 0},
		{"no cgroup files at all (not Linux, or /proc not mounted)", fstest.MapFS{}, 0},
		{"garbage in the limit file", fstest.MapFS{
			"proc/self/cgroup":         file("0::/\n"),
			"sys/fs/cgroup/memory.max": file("lots\n"),
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			limit, ok := cgroupMemoryLimit(tc.fs)
			if ok != (tc.limit != 0) || limit != tc.limit {
				t.Fatalf("cgroupMemoryLimit = %d, %v; want %d", limit, ok, tc.limit)
			}
		})
	}
}

// The soft limit is what keeps a process whose heap may grow to five times its live
// memory (DefaultGCPercent) inside its container.
func TestTheRuntimeKeepsItsMemoryUnderTheContainersLimit(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	gcBefore := debug.SetGCPercent(100)
	t.Cleanup(func() {
		debug.SetMemoryLimit(before)
		debug.SetGCPercent(gcBefore)
	})
	container := fstest.MapFS{
		"proc/self/cgroup":         &fstest.MapFile{Data: []byte("0::/\n")},
		"sys/fs/cgroup/memory.max": &fstest.MapFile{Data: []byte("268435456\n")},
	}
	env := func(vars map[string]string) func(string) (string, bool) {
		return func(name string) (string, bool) { v, ok := vars[name]; return v, ok }
	}

	r := tuneRuntime(container, env(nil))
	containerLimit := float64(256 << 20)
	want := int64(containerLimit * memoryLimitShare)
	if r.MemoryLimit != want || r.MemoryLimitFrom != "cgroup" || debug.SetMemoryLimit(-1) != want {
		t.Fatalf("in a 256 MiB container: %+v, runtime limit %d; want %d from the cgroup", r, debug.SetMemoryLimit(-1), want)
	}
	if r.GCPercent != DefaultGCPercent || debug.SetGCPercent(DefaultGCPercent) != DefaultGCPercent {
		t.Fatalf("GC percent %d; want the default %d", r.GCPercent, DefaultGCPercent)
	}

	// The operator's own settings win: the runtime read them at start, so they are left as they are.
	debug.SetMemoryLimit(100 << 20)
	debug.SetGCPercent(150)
	r = tuneRuntime(container, env(map[string]string{"GOMEMLIMIT": "100MiB", "GOGC": "150"}))
	if r.MemoryLimit != 100<<20 || r.MemoryLimitFrom != "GOMEMLIMIT" || debug.SetMemoryLimit(-1) != 100<<20 {
		t.Fatalf("with GOMEMLIMIT set: %+v; want its 100 MiB untouched", r)
	}
	if r.GCPercent != 150 || debug.SetGCPercent(150) != 150 {
		t.Fatalf("with GOGC=150: %+v; want 150 untouched", r)
	}

	// No container limit: no soft limit either.
	debug.SetMemoryLimit(noMemoryLimit)
	r = tuneRuntime(fstest.MapFS{}, env(nil))
	if r.MemoryLimit != noMemoryLimit || r.MemoryLimitFrom != "none" {
		t.Fatalf("without a container limit: %+v", r)
	}
	if got := r.LogAttrs(); got[3] != "none" {
		t.Fatalf("log attributes %v; want memory_limit_mib none", got)
	}
}
