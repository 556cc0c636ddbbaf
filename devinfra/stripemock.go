package devinfra

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// StripeMock is Stripe's own API mock (github.com/stripe/stripe-mock, pinned in
// tools/go.mod), serving the real API's shapes over HTTP; billing's STRIPE_API_BASE points
// at it in tests. It is stateless: every call answers a fixture.
type StripeMock struct {
	Port int
	cmd  *exec.Cmd
	done chan struct{}
}

// URL is the API base for STRIPE_API_BASE.
func (m *StripeMock) URL() string { return fmt.Sprintf("http://127.0.0.1:%d", m.Port) }

// StripeMockBinary finds stripe-mock: $STRIPE_MOCK_BIN, then .keyhouse/tools/stripe-mock
// of the checkout (built by `make stripe-mock`, or here from tools/go.mod when missing),
// then $PATH.
func StripeMockBinary(ctx context.Context) (string, error) {
	if p := os.Getenv("STRIPE_MOCK_BIN"); p != "" {
		return p, nil
	}
	root, err := RepoRoot()
	if err != nil {
		if p, lerr := exec.LookPath("stripe-mock"); lerr == nil {
			return p, nil
		}
		return "", err
	}
	bin := filepath.Join(root, ".keyhouse", "tools", "stripe-mock")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/stripe/stripe-mock")
	cmd.Dir = filepath.Join(root, "tools")
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build stripe-mock (make stripe-mock): %v: %s", err, out)
	}
	return bin, nil
}

// RepoRoot finds the folder holding go.work, walking up from the working directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.work not found above the working directory")
		}
		dir = parent
	}
}

// StartStripeMock starts stripe-mock on a free loopback port and returns once it accepts
// connections. Its output goes to dir/stripe-mock.log.
func StartStripeMock(ctx context.Context, dir string) (*StripeMock, error) {
	bin, err := StripeMockBinary(ctx)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "stripe-mock.log"))
	if err != nil {
		return nil, err
	}
	m := &StripeMock{Port: port, done: make(chan struct{})}
	// stripe-mock also serves HTTPS, on :12112 unless told otherwise, so two of them (two
	// test binaries at once) collided there: the kernel picks its HTTPS port instead.
	m.cmd = exec.Command(bin, "-http-addr", "127.0.0.1:"+strconv.Itoa(port), "-https-addr", "127.0.0.1:")
	m.cmd.Stdout, m.cmd.Stderr = logf, logf
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := m.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start stripe-mock: %w", err)
	}
	go func() { _ = m.cmd.Wait(); logf.Close(); close(m.done) }()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-m.done:
			return nil, fmt.Errorf("stripe-mock exited during start (see %s)", logf.Name())
		case <-ctx.Done():
			m.Stop()
			return nil, ctx.Err()
		default:
		}
		if c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second); err == nil {
			c.Close()
			return m, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	m.Stop()
	return nil, errors.New("stripe-mock did not start listening")
}

// Stop ends the process.
func (m *StripeMock) Stop() {
	if m == nil || m.cmd == nil || m.cmd.Process == nil {
		return
	}
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.done:
	case <-time.After(5 * time.Second):
		_ = m.cmd.Process.Kill()
		<-m.done
	}
}
