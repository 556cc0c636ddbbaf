// Package testkit holds what tests in several modules share.
package testkit

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/keyhouse/keyhouse/pkg/localinfra"
)

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

// PostgresURL starts a throwaway Postgres cluster for the test (Debian's binaries, see
// localinfra), creates the database name in it and returns its URL. The cluster is
// stopped and deleted when the test ends.
func PostgresURL(t testing.TB, name string) string {
	t.Helper()
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "keyhouse-pg-test-")
	if err != nil {
		t.Fatal(err)
	}
	// The postgres system user must reach the cluster folder inside it.
	_ = os.Chmod(dir, 0o755)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	pg, err := localinfra.StartPostgres(ctx, filepath.Join(dir, "pg"), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.Stop() })
	url, err := pg.CreateDatabase(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return url
}
