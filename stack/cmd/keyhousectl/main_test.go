package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The admin key in KEYHOUSE_API_KEY never reaches keyhousectl's output: -h and a mistyped
// flag print the usage, and a flag whose default came from the environment would print it
// there ((default "…")), into terminals and CI logs. The usage names the variables instead.
func TestUsageNeverShowsTheKeyFromTheEnvironment(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "keyhousectl")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	const key = "kh-admin-0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e"
	const url = "https://user:hunter2@licenses.example.com"
	for _, args := range [][]string{
		{"import", "-h"},
		{"import", "--help"},
		{"import", "--form", "keygen", "export.json"}, // mistyped --from
		{"import", "--api-kye", "x", "export.json"},
	} {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "KEYHOUSE_API_KEY="+key, "KEYHOUSE_URL="+url)
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Errorf("keyhousectl %s exited 0, want a usage error", strings.Join(args, " "))
		}
		got := string(out)
		if strings.Contains(got, key) || strings.Contains(got, "hunter2") {
			t.Errorf("keyhousectl %s printed the environment's credentials:\n%s", strings.Join(args, " "), got)
		}
		for _, want := range []string{"-api-key", "KEYHOUSE_API_KEY", "KEYHOUSE_URL"} {
			if !strings.Contains(got, want) {
				t.Errorf("keyhousectl %s: usage does not mention %s:\n%s", strings.Join(args, " "), want, got)
			}
		}
	}
}

// The environment still supplies the URL and the key when the flags are not given.
func TestTheEnvironmentStillSuppliesURLAndKey(t *testing.T) {
	t.Setenv("KEYHOUSE_URL", "")
	t.Setenv("KEYHOUSE_API_KEY", "")
	var out, errOut strings.Builder
	err := run(t.Context(), []string{"import", "--from", "keygen", "export.json"}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "KEYHOUSE_URL") {
		t.Fatalf("without URL: %v", err)
	}
	t.Setenv("KEYHOUSE_URL", "http://127.0.0.1:1")
	err = run(t.Context(), []string{"import", "--from", "keygen", "export.json"}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "KEYHOUSE_API_KEY") {
		t.Fatalf("with KEYHOUSE_URL, without a key: %v", err)
	}
	t.Setenv("KEYHOUSE_API_KEY", "kh-admin-key")
	// Both from the environment: it gets as far as opening the file.
	err = run(t.Context(), []string{"import", "--from", "keygen", filepath.Join(t.TempDir(), "missing.json")}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "missing.json") {
		t.Fatalf("with both from the environment: %v", err)
	}
}

// A mistyped --on-conflict is refused by its flag's name before a file is read or a call
// sent (the API would refuse the first call, in words naming its own field).
func TestOnConflictIsCheckedBeforeAnythingIsSent(t *testing.T) {
	var out, errOut strings.Builder
	err := run(t.Context(), []string{"import", "--from", "keygen", "--on-conflict", "Skip",
		"--url", "http://127.0.0.1:1", "--api-key", "k", filepath.Join(t.TempDir(), "missing.json")}, &out, &errOut)
	if err == nil || err.Error() != `--on-conflict must be skip or fail, not "Skip"` {
		t.Fatalf("--on-conflict Skip: %v", err)
	}
}
