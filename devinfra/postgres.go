// Package devinfra starts the real dependencies on this machine for `make run`, the
// integration tests and the benchmarks: a throwaway Postgres cluster and Redis from
// Debian's binaries (package devnats embeds NATS). It is its own module, outside every
// service's dependency graph. Tests use it through package testkit, which shares one
// server of each kind per test binary.
//
// The servers run as children of the calling process and die with it (Pdeathsig), so a
// test binary that panics or times out leaves no daemon behind.
//
// A server started on port 0 gets a free port just before it starts. Another process (a
// parallel test binary) may take that port before the server binds it; the server then
// exits, and is started again on another port (up to three). A server counts as started
// only once it answers as itself (Postgres with its data directory, Redis with its
// pidfile, stripe-mock with a Stripe answer), never when whatever holds the port answers.
package devinfra

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Postgres is a cluster started by this process (or found already running in Dir).
type Postgres struct {
	Dir  string
	Port int
	bin  string
	cmd  *exec.Cmd
	done chan struct{}
	// exitErr is cmd's exit status, once done is closed.
	exitErr error
	// durable keeps Postgres's crash safety (Durable).
	durable bool
}

// PostgresOption tunes StartPostgres.
type PostgresOption func(*Postgres)

// Durable keeps Postgres's crash safety, which StartPostgres otherwise turns off
// (fsync, full_page_writes, synchronous_commit) for the tests' and benchmarks'
// throwaway clusters: `make run`, whose data is kept from run to run, starts its cluster
// so, and a crash of the machine then loses no committed change and corrupts nothing.
func Durable() PostgresOption { return func(p *Postgres) { p.durable = true } }

// Exited is closed when the server this process started last exits (nil for a cluster
// found running); ExitErr then says how it ended.
func (p *Postgres) Exited() <-chan struct{} { return p.done }

// ExitErr is how the server ended, once Exited is closed.
func (p *Postgres) ExitErr() error { return p.exitErr }

// Restart starts the cluster again on its port after it exited.
func (p *Postgres) Restart(ctx context.Context) error {
	return p.start(ctx, filepath.Join(p.Dir, "data"))
}

// URL is the connection URL of database db as the postgres superuser (trust auth on loopback).
func (p *Postgres) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", p.Port, db)
}

func postgresBinDir() (string, error) {
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		dir := strings.TrimSpace(string(out))
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err == nil {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", errors.New("postgres server binaries not found: apt-get install -y postgresql")
}

func versionOf(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// asPostgresUser prepares a server binary; Postgres refuses to run as root, so as root
// it runs as the postgres system user.
func asPostgresUser(name string, args ...string) (*exec.Cmd, error) {
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if os.Geteuid() != 0 {
		return cmd, nil
	}
	uid, gid, err := postgresUser()
	if err != nil {
		return nil, err
	}
	cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	cmd.Env = append(os.Environ(), "HOME=/var/lib/postgresql")
	return cmd, nil
}

func postgresUser() (uid, gid int, err error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return 0, 0, errors.New("the postgres system user is missing: apt-get install -y postgresql")
	}
	uid, _ = strconv.Atoi(u.Uid)
	gid, _ = strconv.Atoi(u.Gid)
	return uid, gid, nil
}

// StartPostgres initializes dir on first use and starts the server on port (0 = a free
// port), with durability off unless opts say Durable (fsync=off: the data is throwaway,
// and a crash of the machine may corrupt it). A cluster already running in dir (an older
// `make run`) is reused as it runs.
func StartPostgres(ctx context.Context, dir string, port int, opts ...PostgresOption) (*Postgres, error) {
	bin, err := postgresBinDir()
	if err != nil {
		return nil, err
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return nil, err
	}
	p := &Postgres{Dir: dir, Port: port, bin: bin}
	for _, o := range opts {
		o(p)
	}
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := chownToPostgres(dir); err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(data, "PG_VERSION")); err != nil {
		initdb := []string{"-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8"}
		if !p.durable {
			initdb = append(initdb, "--no-sync")
		}
		if err := p.run("initdb", initdb...); err != nil {
			return nil, err
		}
	}
	if p.run("pg_ctl", "-D", data, "status") == nil {
		if pid, err := os.ReadFile(filepath.Join(data, "postmaster.pid")); err == nil {
			lines := strings.Split(string(pid), "\n")
			if len(lines) > 3 {
				if running, err := strconv.Atoi(strings.TrimSpace(lines[3])); err == nil {
					p.Port = running
				}
			}
		}
		return p, p.ensureDatabase(ctx, "keyhouse")
	}
	// The port is chosen last, after initdb: another process may take it between the
	// choice and the server's bind, and a server that lost it is started again elsewhere.
	for attempt := 1; ; attempt++ {
		if port == 0 {
			if p.Port, err = freePort(); err != nil {
				return nil, err
			}
		}
		err := p.start(ctx, data)
		if err == nil {
			return p, nil
		}
		if port != 0 || attempt == portAttempts || !errors.Is(err, errPortTaken) {
			return nil, fmt.Errorf("%w (log: %s)", err, filepath.Join(dir, "postgres.log"))
		}
	}
}

// freePort chooses the port of a server started on port 0 (tests hand out taken ones).
var freePort = FreePort

// portAttempts bounds the ports tried for a server started on port 0.
const portAttempts = 3

// errPortTaken: the server could not have the port it was given (another process bound
// it first) and did not start.
var errPortTaken = errors.New("port taken by another process")

// start runs the server on p.Port and returns once it answers there as the cluster in
// data: an answer from another cluster on the same port (whose bind won) does not count.
//
// max_connections is what the e2e suite's stacks at their most need together: a stack is
// six services, each with its pool, and the suite runs a few dozen, many side by side.
// At 300, a full run once had Postgres refuse connections ("too many clients") for a
// minute, and two crash tests waited out their deadlines for a restarted service that
// could not reach its database. A connection slot costs little until it is used.
func (p *Postgres) start(ctx context.Context, data string) error {
	args := []string{"-D", data, "-p", strconv.Itoa(p.Port), "-k", p.Dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "max_connections=1000"}
	if !p.durable {
		args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	cmd, err := asPostgresUser(filepath.Join(p.bin, "postgres"), args...)
	if err != nil {
		return err
	}
	// Fast shutdown (SIGINT) when this process dies, however it dies.
	cmd.SysProcAttr.Pdeathsig = syscall.SIGINT
	logFile, err := os.OpenFile(filepath.Join(p.Dir, "postgres.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("postgres: %w", err)
	}
	done := make(chan struct{})
	p.cmd, p.done = cmd, done
	go func() { p.exitErr = cmd.Wait(); logFile.Close(); close(done) }()
	err = p.answersAs(ctx, data)
	if err == nil {
		err = p.ensureDatabase(ctx, "keyhouse")
	}
	if err != nil {
		_ = p.Stop()
	}
	return err
}

// answersAs waits until the server on p.Port answers, and checks that it is the cluster
// in data.
func (p *Postgres) answersAs(ctx context.Context, data string) error {
	conn, err := p.Connect(ctx)
	if err != nil {
		select {
		case <-p.done:
			return fmt.Errorf("%w: postgres exited on port %d: %v", errPortTaken, p.Port, err)
		default:
			return err
		}
	}
	defer conn.Close(ctx)
	var answering string
	if err := conn.QueryRow(ctx, "SHOW data_directory").Scan(&answering); err != nil {
		return err
	}
	if answering != data {
		return fmt.Errorf("%w: port %d answered by the cluster in %s", errPortTaken, p.Port, answering)
	}
	return nil
}

func (p *Postgres) run(name string, args ...string) error {
	cmd, err := asPostgresUser(filepath.Join(p.bin, name), args...)
	if err != nil {
		return err
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %v: %s", name, err, out)
	}
	return nil
}

func chownToPostgres(dir string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	uid, gid, err := postgresUser()
	if err != nil {
		return err
	}
	return os.Chown(dir, uid, gid)
}

func (p *Postgres) ensureDatabase(ctx context.Context, name string) error {
	conn, err := p.Connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return err
	}
	if exists {
		return nil
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	return err
}

// CreateDatabase makes a fresh, empty database.
func (p *Postgres) CreateDatabase(ctx context.Context, name string) (string, error) {
	conn, err := p.Connect(ctx)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", err
	}
	return p.URL(name), nil
}

// Connect opens a connection to the postgres maintenance database, waiting up to 30 s
// for the server to accept it.
func (p *Postgres) Connect(ctx context.Context) (*pgx.Conn, error) {
	var lastErr error
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if p.done != nil {
			select {
			case <-p.done:
				return nil, fmt.Errorf("postgres on port %d exited", p.Port)
			default:
			}
		}
		// Bounded: whatever holds the port may accept and never answer.
		attemptCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgx.Connect(attemptCtx, p.URL("postgres"))
		cancel()
		if err == nil {
			return conn, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil, fmt.Errorf("postgres on port %d not reachable: %w", p.Port, lastErr)
}

// Stop shuts the cluster down (fast mode), keeping its data.
func (p *Postgres) Stop() error {
	if p.cmd == nil {
		return p.run("pg_ctl", "-D", filepath.Join(p.Dir, "data"), "-m", "fast", "-w", "stop")
	}
	_ = p.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-p.done:
		return nil
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		return errors.New("postgres did not stop within 30 s; killed")
	}
}

// FreePort asks the kernel for an unused loopback TCP port.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
