// Command activations serves the activations service over gRPC.
package main

import (
	"context"

	"github.com/keyhouse/keyhouse/pkg/app"
	"github.com/keyhouse/keyhouse/pkg/config"
	"github.com/keyhouse/keyhouse/services/activations/migrations"
)

func main() {
	app.Main(app.Service{
		Name:       "activations",
		Addr:       func(c *config.Config) string { return c.ActivationsAddr },
		Migrations: migrations.FS,
		Register: func(ctx context.Context, d *app.Deps) error {
			return nil
		},
	})
}
