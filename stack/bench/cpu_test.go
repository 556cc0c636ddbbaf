package bench

import (
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"
)

// A postmaster's backends and autovacuum workers end and are reaped while the bench
// samples; each sample of the tree must still count every one of them exactly once, or a
// slice's CPU share comes out negative (a whole backend's CPU missing from its second
// sample). This process plays the postmaster: children that burn CPU and end, one after
// another, while the test samples the tree as fast as it can.
func TestProcessTreeCPUNeverGoesBackWhenChildrenEnd(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	// Thirty children, one after another; the test samples until the last has ended
	// (a count, not a duration, so a slow machine only makes it take longer).
	const children = 30
	done := make(chan error, 1)
	go func() {
		for range children {
			// Run waits for the child: it is reaped into this process's children's times.
			if err := exec.Command("sh", "-c", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done").Run(); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	var last time.Duration
	samples, fell := 0, 0
	for running := true; running; samples++ {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			running = false
		default:
		}
		cpu, ok := processTreeCPU(os.Getpid())
		if !ok {
			t.Fatal("could not read this process's CPU from /proc")
		}
		if cpu < last {
			fell++
			t.Logf("sample %d: %v after %v", samples, cpu, last)
		}
		last = cpu
	}
	if fell > 0 {
		t.Errorf("the tree's CPU went back in %d of %d samples while %d children ended", fell, samples, children)
	}
}
