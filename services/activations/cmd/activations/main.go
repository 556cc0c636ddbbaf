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
			server.Register(d.Server.GRPC, server.New(st, licenses, d.Log))
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := purge.Run(ctx, js, st, d.Log); err != nil {
					d.Log.Error("license.deleted consumer stopped", "error", err.Error())
				}
			}()
			// Closers run in reverse: the consumer finishes its message before NATS closes.
			d.OnClose(nc.Close)
			// Removed seats are announced with a heartbeat, the caches' liveness proof.
			d.OnClose(licensecache.StartHeartbeat(nc))
			d.OnClose(stopCache)
			d.OnClose(wg.Wait)
			return nil
		},
	})
}
