package stack

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// launcherEnv makes the test binary a launcher that spawns one process and waits to be
// killed (TestProcessesDieWithTheirLauncher).
const launcherEnv = "KEYHOUSE_STACK_TEST_LAUNCHER"

func init() {
	dir := os.Getenv(launcherEnv)
	if dir == "" {
		return
	}
	s := &Stack{opts: Options{BinDir: dir, Output: os.Stderr}, exited: make(chan *Proc, 1)}
	l, err := listen("127.0.0.1:0")
	if err == nil {
		var p *Proc
		if p, err = s.spawn("sleeper", map[string]string{}, l); err == nil {
			println("pid", p.cmd.Process.Pid)
			select {}
		}
	}
	println("error", err.Error())
	os.Exit(1)
}

// A launcher that dies without stopping its processes (a test binary killed at its
// -timeout, make run's launcher killed) takes them with it: they get SIGTERM.
func TestProcessesDieWithTheirLauncher(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "sleeper"), []byte("#!/bin/sh\nexec sleep 600\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	launcher := exec.Command(self, "-test.run=^$")
	launcher.Env = append(os.Environ(), launcherEnv+"="+dir)
	stderr, err := launcher.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := launcher.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = launcher.Process.Kill(); _ = launcher.Wait() })
	line, err := bufio.NewReader(stderr).ReadString('\n')
	if err != nil {
		t.Fatalf("launcher: %q %v", line, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "pid ")))
	if err != nil {
		t.Fatalf("launcher: %q", line)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("the spawned process %d is not running: %v", pid, err)
	}
	if err := launcher.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = launcher.Wait()
	deadline := time.Now().Add(time.Minute)
	for {
		if exited(pid) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the spawned process %d still runs a minute after its launcher was killed", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// exited reports whether pid has ended: gone, or a zombie its new parent has not reaped
// (not every init does).
func exited(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	// pid (comm) state ...: comm may hold spaces and parentheses, the state follows the last ')'.
	rest := stat[strings.LastIndexByte(string(stat), ')')+1:]
	return strings.HasPrefix(strings.TrimSpace(string(rest)), "Z")
}
