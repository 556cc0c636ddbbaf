// Command billing serves tenants, API keys, plans and (hosted) Stripe billing over gRPC.
package main

import (
	"context"
	"sync"

	"github.com/keyhouse/keyhouse/pkg/app"
	"github.com/keyhouse/keyhouse/pkg/auth"
	"github.com/keyhouse/keyhouse/pkg/config"
	"github.com/keyhouse/keyhouse/pkg/idempotency"
	"github.com/keyhouse/keyhouse/pkg/licensingclient"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
	"github.com/keyhouse/keyhouse/pkg/tenantpurge"
	accountsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/accounts/v1"
	billingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/billing/v1"
	"github.com/keyhouse/keyhouse/services/billing/internal/payments"
	"github.com/keyhouse/keyhouse/services/billing/internal/server"
	"github.com/keyhouse/keyhouse/services/billing/internal/store"
	"github.com/keyhouse/keyhouse/services/billing/migrations"
)

func main() {
	app.Main(app.Service{
		Name:       "billing",
		Addr:       func(c *config.Config) string { return c.BillingAddr },
		Migrations: migrations.FS,
		Tenants: func(d *app.Deps) auth.TenantResolver {
			return store.New(d.DB, nil).WithSessionKeys(sessionKeys(d.Config))
		},
		Register: register,
	})
}

func register(ctx context.Context, d *app.Deps) error {
	// Key rotations and plan changes leave through the outbox (pkg/events).
	spine, err := d.StartEventSpine(ctx, "billing", app.SpineOptions{})
	if err != nil {
		return err
	}
	st := store.New(d.DB, spine.Spine).WithSessionKeys(sessionKeys(d.Config))
	licensing, err := d.Dial("licensing", d.Config.LicensingAddr)
	if err != nil {
		return err
	}
	// usage is also the installation keyring (licensing holds it), which seals the answers
	// an Idempotency-Key replays: they show an API key.
	usage := licensingclient.New(licensing, d.Config.AdminAPIKey.Reveal())
	server.Register(d.Server.GRPC, server.New(st, usage, d.Config.MultiTenant, d.Log))
	accountsv1.RegisterConsoleAccountsServiceServer(d.Server.GRPC, server.NewConsole(st, d.Auth, d.Config.MultiTenant))

	stripe := payments.New(d.Config, d.Log)
	if d.Config.MultiTenant && stripe == nil {
		d.Log.Warn("STRIPE_SECRET_KEY is not set: billing checkout answers 503 (docs/billing.md)")
	}
	billing := server.NewBilling(server.BillingConfig{
		MultiTenant:   d.Config.MultiTenant,
		Stripe:        stripe,
		WebhookSecret: d.Config.StripeWebhookSecret.Reveal(),
		Usage:         usage,
		Log:           d.Log,
	}, st)
	billingv1.RegisterBillingServiceServer(d.Server.GRPC, billing)
	billingv1.RegisterBillingConsoleServiceServer(d.Server.GRPC, server.NewBillingConsole(billing))
	accountsv1.RegisterApiKeysServiceServer(d.Server.GRPC, server.NewAPIKeys(st, usage))
	accountsv1.RegisterOperatorServiceServer(d.Server.GRPC, server.NewOperator(st, usage, d.Config.MultiTenant, stripe, d.Log))
	// Stripe events are remembered (for replays and ordering) for RECORD_RETENTION;
	// Stripe itself retries for 3 days.
	done := make(chan struct{})
	go func() {
		defer close(done)
		pgxx.Retention{Table: "stripe_events", Column: "received_at", Keep: d.Config.RecordRetention}.Run(ctx, d.DB, d.Log)
	}()
	d.OnClose(func() { <-done })
	// A deleted tenant's rows go with the delete itself; this consumer takes what is left
	// after it: the sent tenant.deleted in the outbox (pkg/tenantpurge).
	var wg sync.WaitGroup
	// Idempotency-Key records of API key and tenant creates, past their 24 h.
	wg.Go(func() { idempotency.PurgeHourly(ctx, d.DB, d.Log) })
	wg.Go(func() {
		if err := tenantpurge.Run(ctx, spine.JetStream, "billing", tenantpurge.Forgetter{DB: d.DB}.Forget, d.Log); err != nil {
			d.Log.Error("tenant.deleted consumer stopped", "error", err.Error())
		}
	})
	d.OnClose(wg.Wait)
	return nil
}

// sessionKeys is what decides, beside the database, whether a console session's opener
// still works: the mode, and the admin keys this process accepts (as pkg/app gives them to
// the interceptor), so a session opened with the admin key ends once the key changes.
func sessionKeys(c *config.Config) store.SessionKeys {
	k := store.SessionKeys{MultiTenant: c.MultiTenant}
	for _, key := range []string{c.AdminAPIKey.Reveal(), c.AdminAPIKeyPrevious.Reveal()} {
		if key != "" {
			k.AdminKeys = append(k.AdminKeys, auth.AdminKeyFingerprint(key))
		}
	}
	return k
}
