package stack

import (
	"os"
	"strconv"
	"strings"
)

// The processes behind a stack, as Linux's /proc shows them: the bench samples their CPU
// and pins them, the tests pause them.

// PIDFile is the process id on the first line of a pid file (Postgres's postmaster.pid,
// Redis's redis.pid); 0 when there is none.
func PIDFile(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, _ := strconv.Atoi(strings.TrimSpace(line))
	return pid
}

// ProcStat is the fields of /proc/<pid>/stat after the command name (which may hold
// spaces): state first, then ppid (proc(5)); nil when pid has ended.
func ProcStat(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}

// ChildrenOf lists the processes whose parent is pid.
func ChildrenOf(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	want := strconv.Itoa(pid)
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f := ProcStat(child); len(f) > 1 && f[1] == want {
			out = append(out, child)
		}
	}
	return out
}
