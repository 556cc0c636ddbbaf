package e2e

import (
	"context"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/devinfra/testkit"
)

// make run keeps running: a service killed with SIGKILL, a killed Redis (one the stack
// started) and a gateway stopped from outside with SIGTERM are started again, the stack
// says so with the exit status (a clean exit as such, not as "<nil>"), and the API
// answers again.
func TestSupervisedStackRestartsAKilledServiceAndRedis(t *testing.T) {
	t.Parallel()
	s := startOwnStack(t, map[string]string{"REDIS_URL": "", "DATABASE_URL": testkit.DatabaseURL(t, testkit.Empty)})
	begin := time.Now()
	var mu sync.Mutex
	var lines []string
	ctx, cancel := context.WithCancel(context.Background())
	supervised := make(chan struct{})
	go func() {
		defer close(supervised)
		s.Supervise(ctx, func(line string) {
			mu.Lock()
			defer mu.Unlock()
			lines = append(lines, line)
			t.Logf("%s (%s into the test)", line, time.Since(begin).Round(time.Millisecond))
		})
	}()
	t.Cleanup(func() { cancel(); <-supervised }) // before the stack's Stop
	said := func(text string) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, l := range lines {
			if strings.Contains(l, text) {
				return true
			}
		}
		return false
	}
	a, c := admin(t, s), anon(t, s)
	key := issueLicense(t, a, lic("supervised"))
	t.Logf("stack up in %s", time.Since(begin).Round(time.Millisecond))

	if err := s.Service("activations").Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the stack reports the crash with its exit status", func() bool {
		return said("activations exited unexpectedly (signal: killed); restarting it in")
	})
	eventually(t, "the stack reports activations back", func() bool { return said("activations restarted (pid ") })
	eventually(t, "activate-license answers again", func() bool {
		return c.Post("/v1/activate-license", map[string]string{"key": key, "instance_id": "after-crash"}).Status == 200
	})

	if err := syscall.Kill(s.Redis.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the stack reports Redis's crash", func() bool {
		return said("redis exited unexpectedly (signal: killed); restarting it in")
	})
	eventually(t, "the stack reports Redis back", func() bool { return said("redis restarted") })
	eventually(t, "the gateway is ready again (it checks Redis)", func() bool {
		return c.Get("/readyz").Status == 200
	})
	c.Post("/v1/verify-license", map[string]string{"key": key}).Expect(t, 200)

	for _, p := range s.Procs() {
		if p.Name == "gateway" {
			if err := p.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
		}
	}
	eventually(t, "the stack reports the gateway's clean exit as one", func() bool {
		return said("gateway exited with status 0 (stopped from outside make run, e.g. by SIGTERM); restarting it in")
	})
	eventually(t, "the stack reports the gateway back", func() bool { return said("gateway restarted (pid ") })
	if said("<nil>") {
		mu.Lock()
		t.Errorf("an exit was reported with a nil status: %q", lines)
		mu.Unlock()
	}
	eventually(t, "verify-license answers again", func() bool {
		r, err := c.Try("POST", "/v1/verify-license", map[string]string{"key": key})
		return err == nil && r.Status == 200
	})
	t.Logf("done in %s", time.Since(begin).Round(time.Millisecond))
}
