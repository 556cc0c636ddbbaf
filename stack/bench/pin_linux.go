package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"time"

	"github.com/keyhouse/keyhouse/stack"
	"golang.org/x/sys/unix"
)

// pinEvery is how often Pin applies itself again: to the backends Postgres forks for new
// connections and the gateways a report starts (a Go process's later threads inherit
// the mask of the thread that makes them).
const pinEvery = 200 * time.Millisecond

// Pin keeps this process (the load generator, the embedded NATS server, the floors'
// handlers) on the machine's last CPU and every process of s (services, gateways,
// Postgres and its backends, Redis) on the others, until ctx ends. On a small machine
// an open-loop generator at 4× the capacity otherwise takes its CPU from the stack it
// measures, and its own lag enters every latency it reports; pinned, the stack has one
// CPU fewer and the generator one of its own.
func Pin(ctx context.Context, s *stack.Stack) error {
	n := runtime.NumCPU()
	if n < 2 {
		return fmt.Errorf("-pin needs at least 2 CPUs, this machine has %d", n)
	}
	var generator, rest unix.CPUSet
	generator.Set(n - 1)
	for cpu := range n - 1 {
		rest.Set(cpu)
	}
	apply := func() error {
		if err := pinProcess(os.Getpid(), &generator); err != nil {
			return err
		}
		for _, pid := range stackPIDs(s) {
			_ = pinProcess(pid, &rest) // a process that ended meanwhile has nothing to pin
		}
		return nil
	}
	if err := apply(); err != nil {
		return err
	}
	go func() {
		tick := time.NewTicker(pinEvery)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				_ = apply()
			}
		}
	}()
	return nil
}

// pinProcess sets the CPU mask of every thread of pid.
func pinProcess(pid int, set *unix.CPUSet) error {
	tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		return err
	}
	for _, t := range tasks {
		if tid, err := strconv.Atoi(t.Name()); err == nil {
			if err := unix.SchedSetaffinity(tid, set); err != nil && pid == os.Getpid() {
				return fmt.Errorf("pin thread %d: %w", tid, err)
			}
		}
	}
	return nil
}

// stackPIDs lists the processes of s: its services and gateways, the postmaster and its
// backends, and Redis.
func stackPIDs(s *stack.Stack) []int {
	var pids []int
	for _, p := range s.Procs() {
		pids = append(pids, p.Pid())
	}
	if pid := postmasterPID(s); pid > 0 {
		pids = append(pids, pid)
		pids = append(pids, stack.ChildrenOf(pid)...)
	}
	if pid := redisPID(s); pid > 0 {
		pids = append(pids, pid)
	}
	return pids
}

// onStackSide puts every thread of pid on the CPUs this process is not pinned to: a
// process the bench starts in the stack's stead (a refusal floor) runs where the stack
// does. Without -pin this process has every CPU, and pid, which inherited that, too.
func onStackSide(pid int) error {
	var mine, side unix.CPUSet
	if err := unix.SchedGetaffinity(0, &mine); err != nil {
		return err
	}
	for cpu := range runtime.NumCPU() {
		if !mine.IsSet(cpu) {
			side.Set(cpu)
		}
	}
	if side.Count() == 0 {
		return nil
	}
	return pinProcess(pid, &side)
}
