// Command activations serves seats, activation tokens and usage metering over gRPC.
package main

import (
	"context"
	"sync"
	"time"

	"github.com/keyhouse/keyhouse/pkg/app"
	"github.com/keyhouse/keyhouse/pkg/billingclient"
	"github.com/keyhouse/keyhouse/pkg/config"
	"github.com/keyhouse/keyhouse/pkg/idempotency"
	"github.com/keyhouse/keyhouse/pkg/licensecache"
	"github.com/keyhouse/keyhouse/pkg/licensingclient"
	"github.com/keyhouse/keyhouse/pkg/natsx"
	"github.com/keyhouse/keyhouse/pkg/periodic"
	"github.com/keyhouse/keyhouse/pkg/tenantpurge"
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
			conn, err := d.Dial("licensing", d.Config.LicensingAddr)
			if err != nil {
				return err
			}
			licenses := licensingclient.New(conn, d.Config.AdminAPIKey.Reveal())
			// Seat events leave through the outbox; the spine's fast path announces a removed
			// seat, so caches of validate-license's answers (the gateway's) drop the license's.
			spine, err := d.StartEventSpine(ctx, "activations", app.SpineOptions{})
			if err != nil {
				return err
			}
			nc := spine.NATS
			d.Readiness.Add(natsx.ReadinessCheck(nc)) // the seat purge consumes
			st := store.New(d.DB, spine.Spine)
			server.RegisterConsole(d.Server.GRPC, server.NewConsole(st, licenses))
			// License lookups are cached; the cache follows licensing's change events, and
			// serves an entry past LICENSE_CACHE_TTL only while it proves it missed none (a
			// lease or renewal then asks licensing once per key and LICENSE_CACHE_LIVE_TTL).
			stopCache, err := licenses.CacheLicensesLive(nc, d.Config.LicenseCacheTTL, d.Config.LicenseCacheLiveTTL)
			if err != nil {
				return err
			}
			billingConn, err := d.Dial("billing", d.Config.BillingAddr)
			if err != nil {
				nc.Close()
				return err
			}
			leases := server.NewLeases(st, licenses, licenses, server.LeaseConfig{
				Issuer: d.Config.PublicBaseURL, MultiTenant: d.Config.MultiTenant,
				MinLeaseTTL: d.Config.LeaseMinTTL, Keyring: licenses.Keyring, RefreshKeyring: licenses.RefreshKeyring,
				Tenants: billingclient.New(billingConn, d.Config.AdminAPIKey.Reveal()), Log: d.Log,
			})
			server.Register(d.Server.GRPC, server.New(st, licenses, d.Log).WithLeases(leases))
			server.RegisterLeases(d.Server.GRPC, leases)
			var wg sync.WaitGroup
			wg.Go(func() {
				if err := purge.Run(ctx, spine.JetStream, st, d.Log); err != nil {
					d.Log.Error("license.deleted consumer stopped", "error", err.Error())
				}
			})
			// A deleted tenant's rows go in one transaction, even if this service was down when
			// the tenant was deleted (pkg/tenantpurge).
			wg.Go(func() {
				if err := tenantpurge.Run(ctx, spine.JetStream, "activations", tenantpurge.Forgetter{DB: d.DB, Stale: store.StaleOnTenantPurge, Spine: spine.Spine}.Forget, d.Log); err != nil {
					d.Log.Error("tenant.deleted consumer stopped", "error", err.Error())
				}
			})
			wg.Go(func() { idempotency.PurgeHourly(ctx, d.DB, d.Log) })
			// The records of usage changes are needed only while a call waits for its
			// outcome: those older than store.CommitRecordsKept go every minute.
			wg.Go(func() { periodic.Upkeep(ctx, time.Minute, d.Log, "purging usage commit records", st.PurgeCommits) })
			wg.Go(func() { sweep.Run(ctx, st, d.Config.LeaseSweepInterval, d.Log) })
			// Closers run in reverse: the consumer finishes its message before the relay
			// stops and NATS closes (StartEventSpine's closers).
			// Removed seats are announced with a heartbeat, the caches' liveness proof.
			d.OnClose(licensecache.StartHeartbeat(nc))
			d.OnClose(stopCache)
			d.OnClose(wg.Wait)
			return nil
		},
	})
}
