package devinfra

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
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

// StartStripeMock starts stripe-mock on a free loopback port and returns once it answers
// there. Its output goes to dir/stripe-mock.log. Another process may take the port before
// stripe-mock binds it: it is then started again on another.
func StartStripeMock(ctx context.Context, dir string) (*StripeMock, error) {
	bin, err := StripeMockBinary(ctx)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		m, err := startStripeMock(ctx, bin, filepath.Join(dir, "stripe-mock.log"), port)
		if err == nil || attempt == portAttempts || !errors.Is(err, errPortTaken) {
			return m, err
		}
	}
}

func startStripeMock(ctx context.Context, bin, log string, port int) (*StripeMock, error) {
	logf, err := os.OpenFile(log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
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
			return nil, fmt.Errorf("%w: stripe-mock exited during start on port %d (see %s)", errPortTaken, port, log)
		case <-ctx.Done():
			m.Stop()
			return nil, ctx.Err()
		default:
		}
		// Asked as a client would ask it: whatever else may hold the port does not
		// answer a Stripe list.
		if answersAsStripe(port) {
			return m, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	m.Stop()
	return nil, errors.New("stripe-mock did not start answering")
}

// answersAsStripe reports whether the server on port answers GET /v1/customers as the
// Stripe API does.
func answersAsStripe(port int) bool {
	client := &http.Client{Timeout: time.Second}
	req, err := http.NewRequest(http.MethodGet, "http://127.0.0.1:"+strconv.Itoa(port)+"/v1/customers", nil)
	if err != nil {
		return false
	}
	req.Header.Set("Authorization", "Bearer sk_test_123")
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var list struct {
		Object string `json:"object"`
	}
	return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&list) == nil && list.Object == "list"
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
