// Command licensing serves the license lifecycle, exports and signing keys over gRPC.
package main

import (
	"context"
	"fmt"
	"os"
	"sync"

	"github.com/keyhouse/keyhouse/pkg/app"
	"github.com/keyhouse/keyhouse/pkg/billingclient"
	"github.com/keyhouse/keyhouse/pkg/config"
	"github.com/keyhouse/keyhouse/pkg/events"
	"github.com/keyhouse/keyhouse/pkg/idempotency"
	"github.com/keyhouse/keyhouse/pkg/licensecache"
	"github.com/keyhouse/keyhouse/pkg/periodic"
	"github.com/keyhouse/keyhouse/pkg/signing"
	"github.com/keyhouse/keyhouse/pkg/tenantpurge"
	eventsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/events/v1"
	"github.com/keyhouse/keyhouse/services/licensing/internal/server"
	"github.com/keyhouse/keyhouse/services/licensing/internal/store"
	"github.com/keyhouse/keyhouse/services/licensing/migrations"
)

func main() {
	app.Main(app.Service{
		Name:       "licensing",
		Addr:       func(c *config.Config) string { return c.LicensingAddr },
		Migrations: migrations.FS,
		Register:   register,
	})
}

func register(ctx context.Context, d *app.Deps) error {
	keyring, err := loadKeyring(ctx, d.Config, store.New(d.DB, nil))
	if err != nil {
		return err
	}
	d.Log.Info("signing keyring loaded", "keyring", keyring)

	billing, err := d.Dial("billing", d.Config.BillingAddr)
	if err != nil {
		return err
	}
	activations, err := d.Dial("activations", d.Config.ActivationsAddr)
	if err != nil {
		return err
	}
	// License rows are cached for the hot paths; every committed change drops its key here
	// (the spine's local step) and, over NATS, on every other replica and caller (its fast
	// path; pkg/licensecache).
	cache := licensecache.New[*store.License](d.Config.LicenseCacheTTL)
	spine, err := d.StartEventSpine(ctx, "licensing", app.SpineOptions{Spine: []events.Option{
		events.WithLocal(func(ev *eventsv1.Event) {
			if key := events.ChangedLicense(ev); key != "" {
				cache.Invalidate(key)
			}
		}),
	}})
	if err != nil {
		return err
	}
	stopCache, err := cache.Subscribe(spine.NATS)
	if err != nil {
		return err
	}
	st := store.New(d.DB, spine.Spine).WithCache(cache)

	adminKey := d.Config.AdminAPIKey.Reveal()
	srv := server.New(server.Config{MultiTenant: d.Config.MultiTenant, Keyring: keyring, Log: d.Log}, st,
		billingclient.New(billing, adminKey), server.NewRemoteSeats(activations, adminKey))
	server.Register(d.Server.GRPC, srv)
	server.RegisterPortal(d.Server.GRPC, server.NewPortal(st, keyring, d.Config.PublicBaseURL))

	var wg sync.WaitGroup
	// A deleted tenant's rows go in one transaction, even if this service was down when
	// the tenant was deleted (pkg/tenantpurge).
	wg.Go(func() {
		if err := tenantpurge.Run(ctx, spine.JetStream, "licensing", tenantpurge.Forgetter{DB: d.DB, Stale: store.StaleOnTenantPurge, Retire: store.RetireProducts, Spine: spine.Spine}.Forget, d.Log); err != nil {
			d.Log.Error("tenant.deleted consumer stopped", "error", err.Error())
		}
	})
	wg.Go(func() { idempotency.PurgeHourly(ctx, d.DB, d.Log) })
	// The license counts' rows, one per license written, are folded into one per tenant.
	wg.Go(func() {
		periodic.Upkeep(ctx, store.CountsFoldInterval, d.Log, "folding the license counts", st.FoldCounts)
	})
	// License changes are announced with a heartbeat, the caches' liveness proof.
	d.OnClose(licensecache.StartHeartbeat(spine.NATS))
	d.OnClose(stopCache)
	d.OnClose(wg.Wait)
	return nil
}

// loadKeyring reads the operator's keyring (SIGNING_KEYS_FILE) or the one kept in
// Postgres, generating and storing it on the very first start.
func loadKeyring(ctx context.Context, cfg *config.Config, st *store.Store) (*signing.Keyring, error) {
	if cfg.SigningKeysFile != "" {
		data, err := os.ReadFile(cfg.SigningKeysFile)
		if err != nil {
			return nil, fmt.Errorf("SIGNING_KEYS_FILE: %w", err)
		}
		k, err := signing.ParseKeyring(data)
		if err != nil {
			return nil, fmt.Errorf("SIGNING_KEYS_FILE: %w", err)
		}
		return k, nil
	}
	doc, err := st.Keyring(ctx, func() ([]byte, error) {
		k, err := signing.NewKeyring()
		if err != nil {
			return nil, err
		}
		return signing.MarshalKeyring(k)
	})
	if err != nil {
		return nil, fmt.Errorf("signing keyring: %w", err)
	}
	return signing.ParseKeyring(doc)
}
