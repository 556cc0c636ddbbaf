// Command releases serves the release registry and the signed update check over gRPC.
package main

import (
	"context"
	"sync"

	"github.com/keyhouse/keyhouse/pkg/app"
	"github.com/keyhouse/keyhouse/pkg/billingclient"
	"github.com/keyhouse/keyhouse/pkg/config"
	"github.com/keyhouse/keyhouse/pkg/events"
	"github.com/keyhouse/keyhouse/pkg/idempotency"
	"github.com/keyhouse/keyhouse/pkg/licensecache"
	"github.com/keyhouse/keyhouse/pkg/licensingclient"
	"github.com/keyhouse/keyhouse/pkg/natsx"
	"github.com/keyhouse/keyhouse/pkg/tenantpurge"
	"github.com/keyhouse/keyhouse/services/releases/internal/server"
	"github.com/keyhouse/keyhouse/services/releases/internal/store"
	"github.com/keyhouse/keyhouse/services/releases/migrations"
)

func main() {
	app.Main(app.Service{
		Name:       "releases",
		Addr:       func(c *config.Config) string { return c.ReleasesAddr },
		Migrations: migrations.FS,
		Register:   register,
	})
}

func register(ctx context.Context, d *app.Deps) error {
	licensing, err := d.Dial(d.Config.LicensingAddr)
	if err != nil {
		return err
	}
	billing, err := d.Dial(d.Config.BillingAddr)
	if err != nil {
		return err
	}
	adminKey := d.Config.AdminAPIKey.Reveal()
	remote := licensingclient.New(licensing, adminKey)
	// Update checks read licenses from a cache that follows licensing's change events.
	nc, js, err := natsx.Connect(ctx, d.Config.NATSURL, "releases", d.Log)
	if err != nil {
		return err
	}
	if err := events.EnsureStream(ctx, js); err != nil {
		nc.Close()
		return err
	}
	stopCache, err := remote.CacheLicenses(nc, d.Config.LicenseCacheTTL)
	if err != nil {
		nc.Close()
		return err
	}
	d.OnClose(nc.Close)
	// Release changes are announced with a heartbeat, the caches' liveness proof.
	d.OnClose(licensecache.StartHeartbeat(nc))
	d.OnClose(stopCache)
	// Release events leave through the outbox; the spine's fast path tells the gateways'
	// caches of check-update answers to empty themselves.
	relay := natsx.NewRelay(d.DB, js, d.Log)
	spine := events.NewSpine(events.WithRelay(relay), events.WithFastPath(nc), events.WithLog(d.Log))
	st := store.New(d.DB, spine)
	srv := server.New(server.Config{MultiTenant: d.Config.MultiTenant}, st, remote,
		billingclient.New(billing, adminKey))
	server.Register(d.Server.GRPC, srv)

	var wg sync.WaitGroup
	wg.Go(func() {
		if err := relay.Run(ctx); err != nil {
			d.Log.Error("outbox relay stopped", "error", err.Error())
		}
	})
	// A deleted tenant's rows go in one transaction, even if this service was down when
	// the tenant was deleted (pkg/tenantpurge).
	wg.Go(func() {
		if err := tenantpurge.Run(ctx, js, "releases", tenantpurge.Forgetter{DB: d.DB, Stale: store.StaleOnTenantPurge, Spine: spine}.Forget, d.Log); err != nil {
			d.Log.Error("tenant.deleted consumer stopped", "error", err.Error())
		}
	})
	wg.Add(2)
	go func() {
		defer wg.Done()
		remote.Prefetch(ctx, d.Log)
	}()
	go func() {
		defer wg.Done()
		idempotency.PurgeHourly(ctx, d.DB, d.Log)
	}()
	d.OnClose(wg.Wait)
	return nil
}
