package signing

import (
	"bytes"
	"github.com/keyhouse/keyhouse/devinfra/testkit"
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

func requireTool(t *testing.T, name string) string { return testkit.RequireTool(t, name) }

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
