package stack

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Backoff of Supervise: the first restart after a crash waits restartMin; each crash of
// a process that ran less than stableAfter doubles the wait, up to restartMax.
const (
	restartMin  = 250 * time.Millisecond
	restartMax  = 30 * time.Second
	stableAfter = time.Minute
)

// backoff is the wait before one process's next restart.
type backoff struct{ wait time.Duration }

// next is the wait before restarting a process that ran for ran.
func (b *backoff) next(ran time.Duration) time.Duration {
	switch {
	case b.wait == 0 || ran >= stableAfter:
		b.wait = restartMin
	default:
		b.wait = min(2*b.wait, restartMax)
	}
	return b.wait
}

// Supervise keeps the stack running until ctx ends (make run): a service or gateway that
// exits without being told to is started again on its address, and so are the Postgres
// and Redis the stack started itself, each after a backoff (restartMin, doubling while
// it keeps crashing within stableAfter, up to restartMax). report gets one line when a
// process exits (with its exit status), and one when it is back or could not be started.
// Call Stop only after Supervise returned.
func (s *Stack) Supervise(ctx context.Context, report func(line string)) {
	var wg sync.WaitGroup
	defer wg.Wait()
	if s.Postgres != nil && s.Postgres.Exited() != nil {
		wg.Go(func() {
			s.superviseDependency(ctx, "postgres", s.Postgres.Exited, s.Postgres.ExitErr, s.Postgres.Restart, report)
		})
	}
	if s.Redis != nil && s.Redis.Exited() != nil {
		wg.Go(func() {
			s.superviseDependency(ctx, "redis", s.Redis.Exited, s.Redis.ExitErr, func(ctx context.Context) error {
				return s.Redis.Start(ctx, "")
			}, report)
		})
	}
	waits := map[string]*backoff{}
	for {
		select {
		case <-ctx.Done():
			return
		case p := <-s.exited:
			key := p.Name + " " + p.Addr
			if waits[key] == nil {
				waits[key] = &backoff{}
			}
			wait := waits[key].next(time.Since(p.started))
			report(exitLine(p.Name, p.Err(), wait))
			wg.Go(func() { s.restart(ctx, p, wait, report) })
		}
	}
}

// exitLine is what Supervise reports when a process it did not stop exits, before it
// starts it again. A crash shows its status; a process that exited with status 0 did not
// crash but was stopped from outside (a SIGTERM from another terminal or a process
// manager), and exec's nil error would read "(<nil>)".
func exitLine(name string, err error, wait time.Duration) string {
	if err == nil {
		return fmt.Sprintf("%s exited with status 0 (stopped from outside make run, e.g. by SIGTERM); restarting it in %s", name, wait)
	}
	return fmt.Sprintf("%s exited unexpectedly (%v); restarting it in %s", name, err, wait)
}

// restart starts crashed process p again on its address after wait. A process that
// dies again is reported through s.exited like the first time.
func (s *Stack) restart(ctx context.Context, p *Proc, wait time.Duration, report func(string)) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(wait):
	}
	l, err := listen(p.bind)
	if err != nil {
		report(fmt.Sprintf("%s not restarted: %v", p.Name, err))
		return
	}
	again, err := s.spawn(p.Name, p.extra, l)
	if err != nil {
		report(fmt.Sprintf("%s not restarted: %v", p.Name, err))
		return
	}
	s.mu.Lock()
	s.procs = slices.DeleteFunc(s.procs, func(q *Proc) bool { return q == p })
	if i := slices.Index(s.gateways, p); i >= 0 {
		s.gateways[i] = again
	}
	s.mu.Unlock()
	if p.Name == "gateway" {
		err = waitHTTP(ctx, again, "http://"+again.Addr+"/readyz")
	} else {
		err = waitGRPC(ctx, again)
	}
	if err == nil {
		report(fmt.Sprintf("%s restarted (pid %d) and serving on %s", p.Name, again.Pid(), again.Addr))
	}
}

// superviseDependency restarts a server the stack started (Postgres, Redis) whenever it
// exits, until ctx ends.
func (s *Stack) superviseDependency(ctx context.Context, name string, exited func() <-chan struct{}, exitErr func() error,
	start func(context.Context) error, report func(string)) {
	var b backoff
	since := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-exited():
		}
		wait := b.next(time.Since(since))
		report(exitLine(name, exitErr(), wait))
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			since = time.Now()
			err := start(ctx)
			if err == nil {
				report(fmt.Sprintf("%s restarted", name))
				break
			}
			wait = b.next(0)
			report(fmt.Sprintf("%s not restarted (%v); trying again in %s", name, err, wait))
		}
	}
}
