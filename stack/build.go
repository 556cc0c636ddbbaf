package stack

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"

	"github.com/keyhouse/keyhouse/devinfra"
)

// RepoRoot finds the folder holding go.work, walking up from the working directory.
func RepoRoot() (string, error) { return devinfra.RepoRoot() }

// Packages are the main packages of the stack, relative to the repository root.
func Packages() []string {
	pkgs := []string{"./gateway/cmd/gateway"}
	for _, s := range Services {
		pkgs = append(pkgs, "./services/"+s+"/cmd/"+s)
	}
	return pkgs
}

// Tools are the main packages of the operator's command-line tools, which a release ships
// beside the processes (in its binary archive, not in the image).
func Tools() []string { return []string{"./stack/cmd/keyhousectl"} }

// Build compiles every binary of the stack into binDir (what `make build` does).
func Build(ctx context.Context, binDir string) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	args := append([]string{"build", "-o", binDir + string(filepath.Separator)}, Packages()...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("go build: %v\n%s", err, out)
	}
	return nil
}
