package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/keyhouse/keyhouse/devinfra/testkit"
	"github.com/keyhouse/keyhouse/stack"
)

// quickstart is the first code block of a README in the given language.
func quickstart(t *testing.T, readme, lang string) string {
	t.Helper()
	b, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```" + lang + "\n(.*?)```").FindSubmatch(b)
	if m == nil {
		t.Fatalf("%s has no %s block", readme, lang)
	}
	if n := strings.Count(string(m[1]), "\n"); n > 25 {
		t.Fatalf("%s quickstart is %d lines, more than 25", readme, n)
	}
	return string(m[1])
}

// Each SDK README's quickstart, copied into a fresh project that installs the SDK as the
// README says, runs as written against the stack and prints a licensed verdict: on a
// self-hosted stack, and on a hosted one with nothing configured but the URL, the product
// and the key (the SDK learns the tenant's lease keys from the lease). Run again with the
// server out of reach, it is still licensed, from the stored lease; the Go one, run with
// its environment unset, says what is missing instead of panicking.
func TestSDKQuickstartsRunAsWritten(t *testing.T) {
	t.Parallel()
	root, err := stack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"self-hosted", "hosted"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			var s *stack.Stack
			var vendor *Client
			if mode == "hosted" {
				s = hosted(t)
				vendor = newTenant(t, s)
			} else {
				s = selfHosted(t)
				vendor = admin(t, s)
			}
			p := product("quickstart")
			for _, sdk := range []string{"go", "js", "python"} {
				t.Run(sdk, func(t *testing.T) {
					key := issueLicense(t, vendor, lic(p))
					run := newQuickstart(t, root, sdk)
					if out, err := run("KEYHOUSE_URL="+s.URL, "KEYHOUSE_PRODUCT="+p, "KEYHOUSE_KEY="+key); err != nil || !regexp.MustCompile(`(?i)^licensed: true licensed\n$`).Match(out) {
						t.Fatalf("%v\n%s", err, out)
					}
					// Port 1 of the loopback: nothing listens, the connection is refused.
					if out, err := run("KEYHOUSE_URL=http://127.0.0.1:1", "KEYHOUSE_PRODUCT="+p, "KEYHOUSE_KEY="+key); err != nil || !regexp.MustCompile(`(?i)(^|\n)licensed: true licensed\n$`).Match(out) {
						t.Fatalf("offline: %v\n%s", err, out)
					}
					if sdk == "go" {
						out, err := run("KEYHOUSE_URL=", "KEYHOUSE_PRODUCT=", "KEYHOUSE_KEY=")
						if err == nil || strings.Contains(string(out), "panic") || !strings.Contains(string(out), "URL, ProductID and Key are required") {
							t.Fatalf("unconfigured: %v\n%s", err, out)
						}
					}
				})
			}
		})
	}
}

// newQuickstart copies an SDK README's quickstart into a fresh project that installs the
// SDK as the README says, and returns a function that runs it with the given environment
// (one HOME for every run: the runs are one machine).
func newQuickstart(t *testing.T, root, sdk string) func(env ...string) ([]byte, error) {
	t.Helper()
	dir, home := t.TempDir(), t.TempDir()
	sdkDir := filepath.Join(root, "clients", sdk)
	base := append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME=")
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var argv []string
	switch sdk {
	case "go":
		write("main.go", quickstart(t, filepath.Join(sdkDir, "README.md"), "go"))
		write("go.mod", "module quickstart\n\ngo 1.22\n\nrequire github.com/keyhouse/keyhouse/clients/go v0.0.0\n\nreplace github.com/keyhouse/keyhouse/clients/go => "+sdkDir+"\n")
		// Built once, so a run is the app starting, not a compile.
		build := exec.Command("go", "build", "-o", "quickstart", ".")
		build.Dir, build.Env = dir, append(base, "GOWORK=off", "GOFLAGS=-mod=mod")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
		argv = []string{filepath.Join(dir, "quickstart")}
	case "js":
		write("quickstart.js", quickstart(t, filepath.Join(sdkDir, "README.md"), "js"))
		write("package.json", `{"name": "quickstart", "private": true}`)
		install := exec.Command(testkit.RequireTool(t, "npm"), "install", "--no-audit", "--no-fund", "--offline", sdkDir)
		install.Dir = dir
		if out, err := install.CombinedOutput(); err != nil {
			t.Fatalf("npm install: %v\n%s", err, out)
		}
		argv = []string{testkit.RequireTool(t, "node"), "quickstart.js"}
	case "python":
		write("quickstart.py", quickstart(t, filepath.Join(sdkDir, "README.md"), "python"))
		// No package index is reachable here: the folder on PYTHONPATH is how the README
		// says to install it without one.
		argv = []string{pythonWithPytest(t), "quickstart.py"}
		base = append(base, "PYTHONPATH="+sdkDir)
	}
	return func(env ...string) ([]byte, error) {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Dir, cmd.Env = dir, append(append([]string(nil), base...), env...)
		return cmd.CombinedOutput()
	}
}
