package localinfra

import (
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
}

// URL is the redis:// URL of the server.
func (r *Redis) URL() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", r.Port) }

// StartRedis starts redis-server on port (0 = a free port), daemonized with its pid file
// in dir. A server already running from dir is reused.
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
	if r.Port == 0 {
		if r.Port, err = FreePort(); err != nil {
			return nil, err
		}
	}
	return r, r.Start(ctx, bin)
}

// Start (re)starts the server on its port, e.g. after Stop in a test.
func (r *Redis) Start(ctx context.Context, bin string) error {
	if bin == "" {
		bin = "redis-server"
	}
	out, err := exec.CommandContext(ctx, bin,
		"--port", strconv.Itoa(r.Port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--daemonize", "yes", "--pidfile", filepath.Join(r.Dir, "redis.pid"),
		"--logfile", filepath.Join(r.Dir, "redis.log"), "--dir", r.Dir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("redis-server: %v: %s", err, out)
	}
	if err := os.WriteFile(filepath.Join(r.Dir, "port"), []byte(strconv.Itoa(r.Port)), 0o644); err != nil {
		return err
	}
	return r.ping(ctx, 10*time.Second)
}

func (r *Redis) pid() int {
	b, err := os.ReadFile(filepath.Join(r.Dir, "redis.pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

func (r *Redis) ping(ctx context.Context, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", r.Port), time.Second)
		if err == nil {
			_, _ = conn.Write([]byte("PING\r\n"))
			buf := make([]byte, 16)
			_ = conn.SetReadDeadline(time.Now().Add(time.Second))
			n, _ := conn.Read(buf)
			conn.Close()
			if strings.HasPrefix(string(buf[:n]), "+PONG") {
				return nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("redis on port %d not ready", r.Port)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop terminates the server and waits for it to exit.
func (r *Redis) Stop() error {
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
