package devinfra_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/keyhouse/keyhouse/devinfra"
	"github.com/keyhouse/keyhouse/devinfra/testkit"
)

// make run's cluster (Durable) keeps Postgres's crash safety: its data is kept from run
// to run, and with fsync off a crash of the machine could lose committed changes or
// corrupt the cluster. The tests' and benchmarks' throwaway clusters keep running
// without it.
func TestDurablePostgresKeepsCrashSafety(t *testing.T) {
	testkit.Integration(t)
	ctx := context.Background()
	root := testkit.Dir(t)
	for _, c := range []struct {
		name string
		opts []devinfra.PostgresOption
		want string
	}{
		{"pg-durable", []devinfra.PostgresOption{devinfra.Durable()}, "on"},
		{"pg-throwaway", nil, "off"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := devinfra.StartPostgres(ctx, filepath.Join(root, c.name), 0, c.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = p.Stop() }()
			conn, err := p.Connect(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			for _, setting := range []string{"fsync", "full_page_writes", "synchronous_commit"} {
				var got string
				if err := conn.QueryRow(ctx, "SHOW "+setting).Scan(&got); err != nil {
					t.Fatal(err)
				}
				if got != c.want {
					t.Errorf("%s = %s, want %s", setting, got, c.want)
				}
			}
		})
	}
}
