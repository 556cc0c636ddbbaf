// Command storefront serves the storefront service over gRPC.
package main

import (
	"context"

	"github.com/keyhouse/keyhouse/pkg/app"
	"github.com/keyhouse/keyhouse/pkg/config"
	"github.com/keyhouse/keyhouse/services/storefront/migrations"
)

func main() {
	app.Main(app.Service{
		Name:       "storefront",
		Addr:       func(c *config.Config) string { return c.StorefrontAddr },
		Migrations: migrations.FS,
		Register: func(ctx context.Context, d *app.Deps) error {
			return nil
		},
	})
}
