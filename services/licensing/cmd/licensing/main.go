// Command licensing serves the licensing service over gRPC.
package main

import (
	"context"

	"github.com/keyhouse/keyhouse/pkg/app"
	"github.com/keyhouse/keyhouse/pkg/config"
	"github.com/keyhouse/keyhouse/services/licensing/migrations"
)

func main() {
	app.Main(app.Service{
		Name:       "licensing",
		Addr:       func(c *config.Config) string { return c.LicensingAddr },
		Migrations: migrations.FS,
		Register: func(ctx context.Context, d *app.Deps) error {
			return nil
		},
	})
}
