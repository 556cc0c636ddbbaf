// Package localinfra starts the real dependencies on this machine: a throwaway Postgres
// cluster and Redis from Debian's binaries, and NATS with JetStream embedded. `make run`
// keeps their data under .keyhouse/; tests put it in a temporary folder.
package localinfra

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
	"time"

	"github.com/jackc/pgx/v5"
)

// Postgres is a cluster started by this process (or found already running in Dir).
type Postgres struct {
	Dir  string
	Port int
	bin  string
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

// asPostgresUser runs a server binary; Postgres refuses to run as root, so as root it
// runs through runuser as the postgres system user.
func asPostgresUser(name string, args ...string) *exec.Cmd {
	if os.Geteuid() == 0 {
		return exec.Command("runuser", append([]string{"-u", "postgres", "--", name}, args...)...)
	}
	return exec.Command(name, args...)
}

// StartPostgres initializes dir on first use and starts the server on port (0 = a free
// port). A cluster already running in dir is reused.
func StartPostgres(ctx context.Context, dir string, port int) (*Postgres, error) {
	bin, err := postgresBinDir()
	if err != nil {
		return nil, err
	}
	dir, err = filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if port == 0 {
		if port, err = FreePort(); err != nil {
			return nil, err
		}
	}
	p := &Postgres{Dir: dir, Port: port, bin: bin}
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := chownToPostgres(dir); err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(data, "PG_VERSION")); err != nil {
		out, err := asPostgresUser(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8").CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("initdb: %v: %s", err, out)
		}
	}
	if asPostgresUser(filepath.Join(bin, "pg_ctl"), "-D", data, "status").Run() == nil {
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
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300", port, dir)
	out, err := asPostgresUser(filepath.Join(bin, "pg_ctl"), "-D", data, "-o", opts, "-l", filepath.Join(dir, "postgres.log"), "-w", "-t", "60", "start").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("pg_ctl start: %v: %s", err, out)
	}
	return p, p.ensureDatabase(ctx, "keyhouse")
}

func chownToPostgres(dir string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return errors.New("the postgres system user is missing: apt-get install -y postgresql")
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return os.Chown(dir, uid, gid)
}

func (p *Postgres) ensureDatabase(ctx context.Context, name string) error {
	conn, err := p.connect(ctx)
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

// CreateDatabase makes a fresh, empty database (one per test that needs isolation).
func (p *Postgres) CreateDatabase(ctx context.Context, name string) (string, error) {
	conn, err := p.connect(ctx)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", err
	}
	return p.URL(name), nil
}

func (p *Postgres) connect(ctx context.Context) (*pgx.Conn, error) {
	var lastErr error
	for i := 0; i < 100; i++ {
		conn, err := pgx.Connect(ctx, p.URL("postgres"))
		if err == nil {
			return conn, nil
		}
		lastErr = err
		time.Sleep(100 * time.Millisecond)
	}
	return nil, fmt.Errorf("postgres on port %d not reachable: %w", p.Port, lastErr)
}

// Stop shuts the cluster down (fast mode), keeping its data.
func (p *Postgres) Stop() error {
	out, err := asPostgresUser(filepath.Join(p.bin, "pg_ctl"), "-D", filepath.Join(p.Dir, "data"), "-m", "fast", "-w", "stop").CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctl stop: %v: %s", err, out)
	}
	return nil
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
