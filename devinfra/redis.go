package devinfra

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Redis is a redis-server started by this process, with persistence off: it holds only
// rate-limit counters.
type Redis struct {
	Dir  string
	Port int
	cmd  *exec.Cmd
	done chan struct{}
	// exitErr is cmd's exit status, once done is closed.
	exitErr error
}

// Exited is closed when the server this process started last exits (nil for a server
// found running); ExitErr then says how it ended.
func (r *Redis) Exited() <-chan struct{} { return r.done }

// ExitErr is how the server ended, once Exited is closed.
func (r *Redis) ExitErr() error { return r.exitErr }

// Pid is the server's process id, 0 when unknown.
func (r *Redis) Pid() int { return r.pid() }

// URL is the redis:// URL of the server.
func (r *Redis) URL() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", r.Port) }

// StartRedis starts redis-server on port (0 = a free port), logging into dir. A server
// already running from dir (an older `make run`'s daemon) is reused.
func StartRedis(ctx context.Context, dir string, port int) (*Redis, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errors.New("redis-server not found: apt-get install -y redis-server")
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	r := &Redis{Dir: dir, Port: port}
	if pid := r.pid(); pid > 0 && syscall.Kill(pid, 0) == nil {
		if b, err := os.ReadFile(filepath.Join(dir, "port")); err == nil {
			r.Port, _ = strconv.Atoi(strings.TrimSpace(string(b)))
			if r.ping(ctx, time.Second) == nil {
				return r, nil
			}
		}
	}
	// Another process may take a chosen port before the server binds it: the server is
	// then started again elsewhere.
	chosen := r.Port == 0
	for attempt := 1; ; attempt++ {
		if chosen {
			if r.Port, err = freePort(); err != nil {
				return nil, err
			}
		}
		err = r.Start(ctx, bin)
		if err == nil || !chosen || attempt == portAttempts || !errors.Is(err, errPortTaken) {
			return r, err
		}
	}
}

// Start (re)starts the server on its port, e.g. after Stop in a test. It runs as a child
// of this process and dies with it.
func (r *Redis) Start(ctx context.Context, bin string) error {
	if bin == "" {
		bin = "redis-server"
	}
	cmd := exec.Command(bin,
		"--port", strconv.Itoa(r.Port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--daemonize", "no", "--pidfile", filepath.Join(r.Dir, "redis.pid"),
		"--logfile", filepath.Join(r.Dir, "redis.log"), "--dir", r.Dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("redis-server: %w", err)
	}
	r.cmd, r.done = cmd, make(chan struct{})
	done := r.done
	go func() { r.exitErr = cmd.Wait(); close(done) }()
	err := os.WriteFile(filepath.Join(r.Dir, "port"), []byte(strconv.Itoa(r.Port)), 0o644)
	if err == nil {
		err = r.ping(ctx, 10*time.Second)
	}
	if err != nil {
		_ = r.Stop()
	}
	return err
}

func (r *Redis) pid() int {
	b, err := os.ReadFile(filepath.Join(r.Dir, "redis.pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// ping waits until the server on r.Port answers as the one of r.Dir (its pidfile is
// there): another server holding the port, whose bind won, does not count.
func (r *Redis) ping(ctx context.Context, within time.Duration) error {
	deadline := time.Now().Add(within)
	ours := filepath.Join(r.Dir, "redis.pid")
	for {
		pidfile, err := r.pidfileAnswered()
		switch {
		case err != nil:
		case pidfile == ours:
			return nil
		default:
			return fmt.Errorf("%w: port %d answered by the redis of %s", errPortTaken, r.Port, pidfile)
		}
		switch {
		case r.exited():
			return fmt.Errorf("%w: redis exited on port %d (log: %s)", errPortTaken, r.Port, filepath.Join(r.Dir, "redis.log"))
		case time.Now().After(deadline) || ctx.Err() != nil:
			return fmt.Errorf("redis on port %d not ready (log: %s)", r.Port, filepath.Join(r.Dir, "redis.log"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pidfileAnswered asks the server on r.Port for its pidfile (CONFIG GET pidfile).
func (r *Redis) pidfileAnswered() (string, error) {
	conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", r.Port), time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte("CONFIG GET pidfile\r\n")); err != nil {
		return "", err
	}
	// *2, $7, pidfile, $<n>, the path.
	in := bufio.NewReader(conn)
	var lines []string
	for len(lines) < 5 {
		line, err := in.ReadString('\n')
		if err != nil {
			return "", err
		}
		lines = append(lines, strings.TrimRight(line, "\r\n"))
		if lines[0] != "*2" { // -LOADING, or not a redis at all
			return "", fmt.Errorf("unexpected answer %q", lines[0])
		}
	}
	if lines[2] != "pidfile" {
		return "", fmt.Errorf("unexpected answer %q", lines)
	}
	return lines[4], nil
}

func (r *Redis) exited() bool {
	if r.done == nil {
		return false
	}
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// Stop terminates the server and waits for it to exit.
func (r *Redis) Stop() error {
	if r.cmd != nil {
		_ = r.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-r.done:
		case <-time.After(10 * time.Second):
			_ = r.cmd.Process.Kill()
			<-r.done
		}
		r.cmd = nil
		return nil
	}
	pid := r.pid()
	if pid <= 0 {
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return nil
	}
	for i := 0; i < 200; i++ {
		if syscall.Kill(pid, 0) != nil {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("redis pid %d did not stop", pid)
}
