package bench

import (
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// pinProcess reaches every thread of a process: a Go service's threads all run where
// they are pinned, and the ones it makes later inherit the mask.
func TestPinProcessSetsTheMaskOfEveryThread(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("needs 2 CPUs")
	}
	// Another process, as the stack's are.
	sleeper := exec.Command("sleep", "30")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() })

	var first unix.CPUSet
	first.Set(0)
	if err := pinProcess(sleeper.Process.Pid, &first); err != nil {
		t.Fatal(err)
	}
	assertMask(t, sleeper.Process.Pid, &first)

	// This process, whose Go runtime runs several threads: every one of them, then back
	// to every CPU for the tests after it.
	var all, last unix.CPUSet
	for cpu := range runtime.NumCPU() {
		all.Set(cpu)
	}
	last.Set(runtime.NumCPU() - 1)
	t.Cleanup(func() { _ = pinProcess(os.Getpid(), &all) })
	if err := pinProcess(os.Getpid(), &last); err != nil {
		t.Fatal(err)
	}
	assertMask(t, os.Getpid(), &last)
}

func assertMask(t *testing.T, pid int, want *unix.CPUSet) {
	t.Helper()
	tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		tid, _ := strconv.Atoi(task.Name())
		var got unix.CPUSet
		if err := unix.SchedGetaffinity(tid, &got); err != nil {
			t.Fatal(err)
		}
		if got != *want {
			t.Errorf("thread %d of %d: mask %v, want %v", tid, pid, got, *want)
		}
	}
}
