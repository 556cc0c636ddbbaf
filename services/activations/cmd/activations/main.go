// Command activations serves seats, activation tokens and usage metering over gRPC.
package main

import (
	"context"
	"sync"

	"github.com/keyhouse/keyhouse/pkg/app"
	"github.com/keyhouse/keyhouse/pkg/config"
	"github.com/keyhouse/keyhouse/pkg/license"
	"github.com/keyhouse/keyhouse/pkg/licensecache"
	"github.com/keyhouse/keyhouse/pkg/licensingclient"
	"github.com/keyhouse/keyhouse/pkg/natsx"
	"github.com/keyhouse/keyhouse/services/activations/internal/purge"
	"github.com/keyhouse/keyhouse/services/activations/internal/server"
	"github.com/keyhouse/keyhouse/services/activations/internal/store"
	"github.com/keyhouse/keyhouse/services/activations/internal/sweep"
	"github.com/keyhouse/keyhouse/services/activations/migrations"
)

func main() {
	app.Main(app.Service{
		Name:       "activations",
		Addr:       func(c *config.Config) string { return c.ActivationsAddr },
		Migrations: migrations.FS,
		Register: func(ctx context.Context, d *app.Deps) error {
			conn, err := d.Dial(d.Config.LicensingAddr)
			if err != nil {
				return err
			}
			st := store.New(d.DB)
			licenses := licensingclient.New(conn, d.Config.AdminAPIKey.Reveal())
			server.RegisterConsole(d.Server.GRPC, server.NewConsole(st, licenses))

			nc, js, err := natsx.Connect(ctx, d.Config.NATSURL, "activations", d.Log)
			if err != nil {
				return err
			}
			d.Readiness.Add(natsx.ReadinessCheck(nc))
			// A removed seat is announced, so caches of validate-license's answers (the
			// gateway's) drop the license's answers.
			st.WithChangeEvents(func(keys ...string) {
				if err := licensecache.PublishOn(nc, license.SeatRemovedSubject, keys...); err != nil {
					d.Log.Warn("seat removal not announced; gateways serve their cached validate-license answer until it expires",
						"error", err.Error(), "ttl", d.Config.LicenseCacheTTL.String())
				}
			})
			// License lookups are cached; the cache follows licensing's change events.
			stopCache, err := licenses.CacheLicenses(nc, d.Config.LicenseCacheTTL)
			if err != nil {
				nc.Close()
				return err
			}
			leases := server.NewLeases(st, licenses, licenses, server.LeaseConfig{
				Issuer: d.Config.PublicBaseURL, MultiTenant: d.Config.MultiTenant,
				MinLeaseTTL: d.Config.LeaseMinTTL, Keyring: licenses.Keyring,
			})
			server.Register(d.Server.GRPC, server.New(st, licenses, d.Log).WithLeases(leases))
			server.RegisterLeases(d.Server.GRPC, leases)
			var wg sync.WaitGroup
			wg.Add(2)
			go func() {
				defer wg.Done()
				if err := purge.Run(ctx, js, st, d.Log); err != nil {
					d.Log.Error("license.deleted consumer stopped", "error", err.Error())
				}
			}()
			go func() {
				defer wg.Done()
				sweep.Run(ctx, st, d.Config.LeaseSweepInterval, d.Log)
			}()
			// Closers run in reverse: the consumer finishes its message before NATS closes.
			d.OnClose(nc.Close)
			d.OnClose(stopCache)
			d.OnClose(wg.Wait)
			return nil
		},
	})
}
