// Package testkit holds what tests in several modules share.
package testkit

import (
	"os"
	"os/exec"
	"testing"
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
