// Command billing serves tenants, API keys, plans and (hosted) Stripe billing over gRPC.
package main

import (
	"context"

	"github.com/keyhouse/keyhouse/pkg/app"
	"github.com/keyhouse/keyhouse/pkg/auth"
	"github.com/keyhouse/keyhouse/pkg/config"
	accountsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/accounts/v1"
	"github.com/keyhouse/keyhouse/services/billing/internal/server"
	"github.com/keyhouse/keyhouse/services/billing/internal/store"
	"github.com/keyhouse/keyhouse/services/billing/migrations"
)

func main() {
	app.Main(app.Service{
		Name:       "billing",
		Addr:       func(c *config.Config) string { return c.BillingAddr },
		Migrations: migrations.FS,
		Tenants:    func(d *app.Deps) auth.TenantResolver { return store.New(d.DB) },
		Register: func(ctx context.Context, d *app.Deps) error {
			server.Register(d.Server.GRPC, server.New(store.New(d.DB), d.Config.MultiTenant))
			accountsv1.RegisterConsoleAccountsServiceServer(d.Server.GRPC, server.NewConsole(store.New(d.DB), d.Auth, d.Config.MultiTenant))
			return nil
		},
	})
}
