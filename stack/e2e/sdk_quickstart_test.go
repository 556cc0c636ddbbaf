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
	if n := strings.Count(string(m[1]), "\n"); n > 15 {
		t.Fatalf("%s quickstart is %d lines, more than 15", readme, n)
	}
	return string(m[1])
}

// Each SDK README's quickstart, copied into a fresh project that installs the SDK as the
// README says, runs as written against the stack and prints a licensed verdict.
func TestSDKQuickstartsRunAsWritten(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	root, err := stack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	p := product("quickstart")
	for _, sdk := range []string{"go", "js", "python"} {
		t.Run(sdk, func(t *testing.T) {
			key := issueLicense(t, admin(t, s), lic(p))
			dir, home := t.TempDir(), t.TempDir()
			sdkDir := filepath.Join(root, "clients", sdk)
			env := append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME=", "KEYHOUSE_URL="+s.URL, "KEYHOUSE_PRODUCT="+p, "KEYHOUSE_KEY="+key)
			var cmd *exec.Cmd
			write := func(name, text string) {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			switch sdk {
			case "go":
				write("main.go", quickstart(t, filepath.Join(sdkDir, "README.md"), "go"))
				write("go.mod", "module quickstart\n\ngo 1.22\n\nrequire github.com/keyhouse/keyhouse/clients/go v0.0.0\n\nreplace github.com/keyhouse/keyhouse/clients/go => "+sdkDir+"\n")
				cmd = exec.Command("go", "run", ".")
				env = append(env, "GOWORK=off", "GOFLAGS=-mod=mod")
			case "js":
				node := testkit.RequireTool(t, "node")
				write("quickstart.js", quickstart(t, filepath.Join(sdkDir, "README.md"), "js"))
				write("package.json", `{"name": "quickstart", "private": true}`)
				install := exec.Command(testkit.RequireTool(t, "npm"), "install", "--no-audit", "--no-fund", "--offline", sdkDir)
				install.Dir = dir
				if out, err := install.CombinedOutput(); err != nil {
					t.Fatalf("npm install: %v\n%s", err, out)
				}
				cmd = exec.Command(node, "quickstart.js")
			case "python":
				write("quickstart.py", quickstart(t, filepath.Join(sdkDir, "README.md"), "python"))
				// No package index is reachable here: the folder on PYTHONPATH stands in for pip install.
				cmd = exec.Command(pythonWithPytest(t), "quickstart.py")
				env = append(env, "PYTHONPATH="+sdkDir)
			}
			cmd.Dir, cmd.Env = dir, env
			out, err := cmd.CombinedOutput()
			if err != nil || !regexp.MustCompile(`(?i)^licensed: true licensed\n$`).Match(out) {
				t.Fatalf("%v\n%s", err, out)
			}
		})
	}
}
