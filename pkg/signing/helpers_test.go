package signing

import (
	"bytes"
	"os"
	"os/exec"
	"sync"
	"testing"
)

var (
	testKeyringOnce sync.Once
	testKeyringVal  *Keyring
	testKeyringErr  error
)

// sharedKeyring is generated once per test binary (RSA key generation is the slow part).
func sharedKeyring(t testing.TB) *Keyring {
	t.Helper()
	testKeyringOnce.Do(func() { testKeyringVal, testKeyringErr = NewKeyring() })
	if testKeyringErr != nil {
		t.Fatalf("NewKeyring: %v", testKeyringErr)
	}
	return testKeyringVal
}

// requireTool finds an external program for an interoperability test. Without it the test
// is skipped, unless KEYHOUSE_REQUIRE_TOOLS=1 (set it in CI so these tests cannot
// silently stop running).
func requireTool(t *testing.T, name string) string {
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

func run(t *testing.T, stdin []byte, name string, args ...string) ([]byte, error) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Logf("%s %v: %v; stderr: %s", name, args, err, stderr.String())
	}
	return out, err
}
