// Package testkit is the one test harness of the repository: real servers, started once
// per test binary on first use, shared by its tests, gone when the binary exits.
//
//	func TestMain(m *testing.M) { testkit.Main(m) }  // required: stops what was started
//
//	url := testkit.DatabaseURL(t, schema)   // a fresh database cloned from a migrated template
//	url := testkit.DatabaseURL(t, testkit.Empty)
//	url := testkit.RedisURL(t)              // the binary's redis-server
//	url := devnats.SharedURL(t)             // the binary's embedded NATS (package devnats)
//	url := testkit.StripeMockURL(t)         // the binary's stripe-mock (STRIPE_API_BASE)
//	dir := testkit.Dir(t)                   // the binary's scratch folder (for servers of a test's own)
//	bin := testkit.RequireTool(t, "node")   // an external verifier, or skip (fatal in CI)
//
// Every function that starts something calls Integration(t), which skips the test under
// -short: `make test-unit` runs `go test -short` and starts no process.
//
// Postgres: one cluster per binary (Debian's binaries, fsync off). A Template is migrated
// once into a template database; each DatabaseURL call clones it with CREATE DATABASE …
// TEMPLATE, which takes milliseconds, so every test gets a database of its own.
//
// Adding a component (stripe-mock, an SMTP sink, a browser): write one function
// `Xxx(t testing.TB) string` that calls Integration(t), starts the process once per
// binary (sync.Once) with its files under Dir(t), registers its stop with AtExit, and
// returns the address. Call Integration(t) (or Dir(t)) before the Once, never inside it:
// a test skipped inside a Once leaves it done with nothing started. Put it here unless it would pull a heavy library into every test
// binary (then a package of its own, like devnats).
package testkit

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/keyhouse/keyhouse/devinfra"
)

var (
	mainCalled atomic.Bool
	exitMu     sync.Mutex
	atExit     []func()

	dir struct {
		once sync.Once
		path string
		err  error
	}
)

// Main runs the tests, then stops every server they started and removes the scratch
// folder: all of it on success, all but the logs when a test failed (its path printed),
// nothing with KEYHOUSE_KEEP_TEST_DIR=1.
//
// afterAll checks run once every test has ended and every server has stopped, with the
// scratch folder (and so every process's complete log) still there: a check about the
// whole run, such as "no secret reached a log line". A check that fails fails the run.
func Main(m *testing.M, afterAll ...func(dir string) error) {
	mainCalled.Store(true)
	code := m.Run()
	exitMu.Lock()
	fns := atExit
	atExit = nil
	exitMu.Unlock()
	for i := len(fns) - 1; i >= 0; i-- {
		fns[i]()
	}
	for _, check := range afterAll {
		if dir.path == "" {
			break
		}
		if err := check(dir.path); err != nil {
			fmt.Fprintf(os.Stderr, "--- FAIL: after all tests: %v\n", err)
			code = 1
		}
	}
	switch {
	case dir.path == "":
	case os.Getenv("KEYHOUSE_KEEP_TEST_DIR") == "1":
		fmt.Fprintf(os.Stderr, "testkit: test files kept in %s\n", dir.path)
	case code != 0:
		keepOnlyLogs(dir.path)
		fmt.Fprintf(os.Stderr, "testkit: server and process logs kept in %s\n", dir.path)
	default:
		_ = os.RemoveAll(dir.path)
	}
	os.Exit(code)
}

// keepOnlyLogs deletes everything under root but the *.log files: a failed run's
// binaries and database files take a gigabyte, its logs are what explains the failure.
func keepOnlyLogs(root string) {
	var dirs []string
	_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return nil
		case d.IsDir():
			dirs = append(dirs, path)
		case !strings.HasSuffix(d.Name(), ".log"):
			_ = os.Remove(path)
		}
		return nil
	})
	for i := len(dirs) - 1; i > 0; i-- {
		_ = os.Remove(dirs[i]) // only the empty ones go
	}
}

// AtExit registers f to run after the binary's tests, in reverse order of registration.
func AtExit(f func()) {
	exitMu.Lock()
	defer exitMu.Unlock()
	atExit = append(atExit, f)
}

// Integration marks a test that starts processes: skipped under -short.
func Integration(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts local servers; skipped under -short (make test-unit)")
	}
	if !mainCalled.Load() {
		t.Fatal("testkit: this package needs func TestMain(m *testing.M) { testkit.Main(m) }")
	}
}

// Dir is the binary's scratch folder, readable by the postgres system user.
func Dir(t testing.TB) string {
	t.Helper()
	Integration(t)
	dir.once.Do(func() {
		// Not t.TempDir: it outlives a test, and as root Postgres runs as the postgres
		// user, which must traverse every parent of its data folder.
		if dir.path, dir.err = os.MkdirTemp("", "keyhouse-test-"); dir.err == nil {
			dir.err = os.Chmod(dir.path, 0o755)
		}
	})
	if dir.err != nil {
		t.Fatal(dir.err)
	}
	return dir.path
}

var pg struct {
	once sync.Once
	srv  *devinfra.Postgres
	err  error
}

func postgres(t testing.TB) *devinfra.Postgres {
	t.Helper()
	root := Dir(t)
	pg.once.Do(func() {
		pg.srv, pg.err = devinfra.StartPostgres(context.Background(), filepath.Join(root, "postgres"), 0)
		if pg.err == nil {
			AtExit(func() { _ = pg.srv.Stop() })
		}
	})
	if pg.err != nil {
		t.Fatal(pg.err)
	}
	return pg.srv
}

// Template is a database layout tests start from. Migrate runs once per test binary, on
// a database of the template's Name, and must close its connections before it returns.
type Template struct {
	Name    string
	Migrate func(ctx context.Context, url string) error
}

// Empty is the template of an empty database.
var Empty = Template{}

var (
	templatesMu sync.Mutex
	templates   = map[string]*templateState{}
	dbSeq       atomic.Int64
	nonIdent    = regexp.MustCompile(`[^a-z0-9]+`)
)

type templateState struct {
	once sync.Once
	db   string
	err  error
}

// DatabaseURL returns the URL of a database of the test's own, a copy of tmpl.
func DatabaseURL(t testing.TB, tmpl Template) string {
	t.Helper()
	srv := postgres(t)
	ctx := context.Background()
	source := "template1"
	if tmpl.Migrate != nil {
		source = "tmpl_" + ident(tmpl.Name)
		templatesMu.Lock()
		st, ok := templates[tmpl.Name]
		if !ok {
			st = &templateState{db: source}
			templates[tmpl.Name] = st
		}
		templatesMu.Unlock()
		st.once.Do(func() { st.err = makeTemplate(ctx, srv, st.db, tmpl) })
		if st.err != nil {
			t.Fatalf("testkit: template %s: %v", tmpl.Name, st.err)
		}
	}
	name := fmt.Sprintf("t%d_%s", dbSeq.Add(1), ident(t.Name()))
	if err := createDatabase(ctx, srv, name, source); err != nil {
		t.Fatalf("testkit: create database %s: %v", name, err)
	}
	return srv.URL(name)
}

// ident is a short, readable database-name fragment of s.
func ident(s string) string {
	n := strings.Trim(nonIdent.ReplaceAllString(strings.ToLower(s), "_"), "_")
	if len(n) > 40 {
		n = n[len(n)-40:]
	}
	return n
}

func makeTemplate(ctx context.Context, srv *devinfra.Postgres, name string, tmpl Template) error {
	if err := createDatabase(ctx, srv, name, "template1"); err != nil {
		return err
	}
	if err := tmpl.Migrate(ctx, srv.URL(name)); err != nil {
		return err
	}
	conn, err := srv.Connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH IS_TEMPLATE true ALLOW_CONNECTIONS false")
	return err
}

// createDatabase clones source. Postgres refuses while another session is connected to
// the source (a just-closed pool may still be saying goodbye), so that case is retried.
func createDatabase(ctx context.Context, srv *devinfra.Postgres, name, source string) error {
	conn, err := srv.Connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	sql := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize() + " TEMPLATE " + pgx.Identifier{source}.Sanitize()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err = conn.Exec(ctx, sql)
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "55006" || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

var redisSrv struct {
	once sync.Once
	srv  *devinfra.Redis
	err  error
}

// RedisURL is the URL of the binary's redis-server. Tests share it by using keys of
// their own; a test that stops Redis starts its own with devinfra.StartRedis under Dir(t).
func RedisURL(t testing.TB) string {
	t.Helper()
	root := Dir(t)
	redisSrv.once.Do(func() {
		redisSrv.srv, redisSrv.err = devinfra.StartRedis(context.Background(), filepath.Join(root, "redis"), 0)
		if redisSrv.err == nil {
			AtExit(func() { _ = redisSrv.srv.Stop() })
		}
	})
	if redisSrv.err != nil {
		t.Fatal(redisSrv.err)
	}
	return redisSrv.srv.URL()
}

// RequireTool finds an external program for an interoperability test (openssl, node:
// verifiers nobody here wrote). Without it the test is skipped, unless
// KEYHOUSE_REQUIRE_TOOLS=1 (CI sets it, so these tests cannot silently stop running).
func RequireTool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("KEYHOUSE_REQUIRE_TOOLS") == "1" {
			t.Fatalf("%s not found on PATH and KEYHOUSE_REQUIRE_TOOLS=1", name)
		}
		t.Skipf("%s not found on PATH; set KEYHOUSE_REQUIRE_TOOLS=1 to make this fatal", name)
	}
	return p
}

var stripeMock struct {
	once sync.Once
	srv  *devinfra.StripeMock
	err  error
}

// StripeMockURL is the binary's stripe-mock (Stripe's own API mock, pinned in
// tools/go.mod), the STRIPE_API_BASE of tests that call Stripe. It is stateless: every
// call answers a fixture shaped like the real API, after validating the parameters.
func StripeMockURL(t testing.TB) string {
	t.Helper()
	root := Dir(t)
	stripeMock.once.Do(func() {
		stripeMock.srv, stripeMock.err = devinfra.StartStripeMock(context.Background(), filepath.Join(root, "stripe-mock"))
		if stripeMock.err == nil {
			AtExit(stripeMock.srv.Stop)
		}
	})
	if stripeMock.err != nil {
		t.Fatal(stripeMock.err)
	}
	return stripeMock.srv.URL()
}

// Gzip is s compressed as a client sends a body with Content-Encoding: gzip.
func Gzip(t testing.TB, s string) []byte {
	t.Helper()
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	if _, err := w.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}
