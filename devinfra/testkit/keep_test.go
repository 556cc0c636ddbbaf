package testkit

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAFailedRunKeepsOnlyTheLogs(t *testing.T) {
	root := t.TempDir()
	for name, data := range map[string]string{
		"bin/gateway":                      "binary",
		"postgres/data/base/1":             "table",
		"postgres/postgres.log":            "pg log",
		"stack1/logs/licensing.log":        "service log",
		"stack1/nats/jetstream/stream.blk": "stream",
	} {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	keepOnlyLogs(root)
	var left []string
	_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		rel, _ := filepath.Rel(root, path)
		left = append(left, rel)
		return nil
	})
	want := ".,postgres,postgres/postgres.log,stack1,stack1/logs,stack1/logs/licensing.log"
	if got := strings.Join(left, ","); got != want {
		t.Fatalf("left %s, want %s", got, want)
	}
	for _, gone := range []string{"bin", "postgres/data", "stack1/nats"} {
		if _, err := os.Stat(filepath.Join(root, gone)); !os.IsNotExist(err) {
			t.Fatalf("%s kept", gone)
		}
	}
}
