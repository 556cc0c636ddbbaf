package pgxx_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/keyhouse/keyhouse/devinfra/testkit"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
)

func TestMain(m *testing.M) { testkit.Main(m) }

func migrationFS(n int) fstest.MapFS {
	files := fstest.MapFS{}
	all := []struct{ name, sql string }{
		{"00001_a.sql", "CREATE TABLE a (id int PRIMARY KEY);"},
		{"00002_b.sql", "CREATE TABLE b (id int PRIMARY KEY);"},
		{"00003_c.sql", "ALTER TABLE b ADD COLUMN note text;"},
	}
	for _, m := range all[:n] {
		files[m.name] = &fstest.MapFile{Data: []byte("-- +goose Up\n" + m.sql + "\n")}
	}
	return files
}

// A database that cannot be reached is named by its variable and its server, never with
// the URL's password: "database unreachable: cannot connect to the database server" left
// an operator to guess which of several URLs, hosts or ports was wrong.
func TestUnreachableDatabaseIsNamedByVariableAndServer(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close() // nothing listens there now: the connection is refused
	const password = "s3cret-Passw0rd"
	_, err = pgxx.Open(context.Background(), "postgres://keyhouse:"+password+"@"+addr+"/keyhouse?sslmode=disable", "svc")
	if err == nil {
		t.Fatal("Open succeeded against a closed port")
	}
	msg := err.Error()
	for _, want := range []string{"DATABASE_URL", addr, "connection refused"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the error %q does not name %q", msg, want)
		}
	}
	if strings.Contains(msg, password) {
		t.Errorf("the error %q holds the password", msg)
	}
}

var discard = slog.New(slog.DiscardHandler)

func TestServeRefusesASchemaThatIsBehind(t *testing.T) {
	ctx := context.Background()
	url := testkit.DatabaseURL(t, testkit.Empty)
	pool, err := pgxx.Open(ctx, url, "svc")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()

	old := pgxx.Migrations{Schema: "svc", FS: migrationFS(2)}
	// Replicas or a Helm Job may migrate at once: the advisory lock serializes them.
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := old.Up(ctx, pool)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent migrate: %v", err)
		}
	}
	if err := old.Check(ctx, pool, "svc", discard); err != nil {
		t.Fatalf("current schema refused: %v", err)
	}

	newer := pgxx.Migrations{Schema: "svc", FS: migrationFS(3)}
	err = newer.Check(ctx, pool, "svc", discard)
	if !errors.Is(err, pgxx.ErrSchemaBehind) {
		t.Fatalf("Check on a schema behind the binary = %v, want ErrSchemaBehind", err)
	}
	if want := "run `svc migrate` first"; !strings.Contains(err.Error(), want) {
		t.Fatalf("message %q does not say %q", err, want)
	}
	if n, err := newer.Up(ctx, pool); err != nil || n != 1 {
		t.Fatalf("Up applied %d, %v; want 1", n, err)
	}
	if err := newer.Check(ctx, pool, "svc", discard); err != nil {
		t.Fatalf("after migrate: %v", err)
	}
	// The tables live in the service schema, found through search_path.
	if _, err := pool.Exec(ctx, "INSERT INTO b (id, note) VALUES (1, 'x')"); err != nil {
		t.Fatal(err)
	}
	var schema string
	if err := pool.QueryRow(ctx, "SELECT table_schema FROM information_schema.tables WHERE table_name = 'b'").Scan(&schema); err != nil || schema != "svc" {
		t.Fatalf("table b in schema %q (%v), want svc", schema, err)
	}
}

// A binary older than the schema (its replicas still running while a newer release's
// migrations ran, or a rollback) serves on it, as rolling upgrades need, and says so in
// one WARN line naming the two versions; a binary level with the schema says nothing.
func TestServeOnASchemaAheadOfTheBinaryLogsIt(t *testing.T) {
	ctx := context.Background()
	pool, err := pgxx.Open(ctx, testkit.DatabaseURL(t, testkit.Empty), "svc")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := (pgxx.Migrations{Schema: "svc", FS: migrationFS(3)}).Up(ctx, pool); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&out, nil))
	if err := (pgxx.Migrations{Schema: "svc", FS: migrationFS(3)}).Check(ctx, pool, "svc", log); err != nil || out.Len() != 0 {
		t.Fatalf("level schema: %v, logged %q", err, out.String())
	}
	if err := (pgxx.Migrations{Schema: "svc", FS: migrationFS(2)}).Check(ctx, pool, "svc", log); err != nil {
		t.Fatalf("a schema ahead of the binary refused: %v", err)
	}
	line := out.String()
	for _, want := range []string{`"level":"WARN"`, "database schema is newer than this binary", `"schema":"svc"`, `"schema_version":3`, `"binary_schema_version":2`, "docs/operations.md#upgrades-and-rollbacks"} {
		if !strings.Contains(line, want) {
			t.Errorf("the line lacks %s: %s", want, line)
		}
	}
}
