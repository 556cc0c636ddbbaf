// Command releases serves the releases service over gRPC.
package main

import (
	"context"

	"github.com/keyhouse/keyhouse/pkg/app"
	"github.com/keyhouse/keyhouse/pkg/config"
	"github.com/keyhouse/keyhouse/services/releases/migrations"
)

func main() {
	app.Main(app.Service{
		Name:       "releases",
		Addr:       func(c *config.Config) string { return c.ReleasesAddr },
		Migrations: migrations.FS,
		Register: func(ctx context.Context, d *app.Deps) error {
			return nil
		},
	})
}
