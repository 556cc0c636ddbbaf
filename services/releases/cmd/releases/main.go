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
	"github.com/keyhouse/keyhouse/pkg/license"
	"github.com/keyhouse/keyhouse/pkg/licensecache"
	"github.com/keyhouse/keyhouse/pkg/licensingclient"
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
	licensing, err := d.Dial("licensing", d.Config.LicensingAddr)
	if err != nil {
		return err
	}
	billing, err := d.Dial("billing", d.Config.BillingAddr)
	if err != nil {
		return err
	}
	adminKey := d.Config.AdminAPIKey.Reveal()
	remote := licensingclient.New(licensing, adminKey)
	// The latest release of each channel update checks ask about is cached; every
	// committed release change empties the cache here (the spine's local step, before the
	// change is answered) and, over NATS, on every other replica (license.ReleasesChangedSubject).
	latest := licensecache.New[*store.Release](d.Config.LicenseCacheTTL)
	// Release events leave through the outbox; the spine's fast path tells the gateways'
	// caches of check-update answers, and the other replicas' latest releases, to empty
	// themselves.
	spine, err := d.StartEventSpine(ctx, "releases", app.SpineOptions{Spine: []events.Option{store.ClearOnReleaseChange(latest)}})
	if err != nil {
		return err
	}
	stopLatest, err := latest.ClearOn(spine.NATS, license.ReleasesChangedSubject)
	if err != nil {
		return err
	}
	// Update checks read licenses from a cache that follows licensing's change events, kept
	// past LICENSE_CACHE_TTL only while it proves it missed none (as the gateway's and
	// activations' are).
	stopCache, err := remote.CacheLicensesLive(spine.NATS, d.Config.LicenseCacheTTL, d.Config.LicenseCacheLiveTTL)
	if err != nil {
		return err
	}
	// Release changes are announced with a heartbeat, the caches' liveness proof.
	d.OnClose(licensecache.StartHeartbeat(spine.NATS))
	d.OnClose(stopCache)
	d.OnClose(stopLatest)
	st := store.New(d.DB, spine.Spine).WithLatestCache(latest)
	srv := server.New(server.Config{MultiTenant: d.Config.MultiTenant, Log: d.Log}, st, remote,
		billingclient.New(billing, adminKey))
	server.Register(d.Server.GRPC, srv)

	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		remote.Prefetch(ctx, d.Log)
	}()
	go func() {
		defer wg.Done()
		idempotency.PurgeHourly(ctx, d.DB, d.Log)
	}()
	// A deleted tenant's rows go in one transaction, even if this service was down when
	// the tenant was deleted (pkg/tenantpurge).
	wg.Go(func() {
		if err := tenantpurge.Run(ctx, spine.JetStream, "releases", tenantpurge.Forgetter{DB: d.DB, Stale: store.StaleOnTenantPurge, Spine: spine.Spine}.Forget, d.Log); err != nil {
			d.Log.Error("tenant.deleted consumer stopped", "error", err.Error())
		}
	})
	d.OnClose(wg.Wait)
	return nil
}
