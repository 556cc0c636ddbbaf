// Command storefront serves storefront webhooks, mappings and deliveries over gRPC, and
// runs the fulfillment worker (a JetStream consumer; every replica runs one, and they
// share the work).
package main

import (
	"context"
	"sync"
	"time"

	"github.com/keyhouse/keyhouse/pkg/app"
	"github.com/keyhouse/keyhouse/pkg/billingclient"
	"github.com/keyhouse/keyhouse/pkg/config"
	"github.com/keyhouse/keyhouse/pkg/idempotency"
	"github.com/keyhouse/keyhouse/pkg/licensingclient"
	"github.com/keyhouse/keyhouse/pkg/mail"
	"github.com/keyhouse/keyhouse/pkg/natsx"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
	"github.com/keyhouse/keyhouse/pkg/tenantpurge"
	"github.com/keyhouse/keyhouse/services/storefront/internal/fulfill"
	"github.com/keyhouse/keyhouse/services/storefront/internal/server"
	"github.com/keyhouse/keyhouse/services/storefront/internal/store"
	"github.com/keyhouse/keyhouse/services/storefront/migrations"
	"github.com/nats-io/nats.go/jetstream"
)

// workerConcurrency is how many deliveries one replica fulfills at once; deliveries of
// one checkout session still go one at a time (the session lock). Each holds one
// connection of the worker's own pool while it works, so the callback and the outbox
// relay, on the service's pool, never wait behind the worker.
const workerConcurrency = 8

func main() {
	app.Main(app.Service{
		Name:       "storefront",
		Addr:       func(c *config.Config) string { return c.StorefrontAddr },
		Migrations: migrations.FS,
		Register:   register,
	})
}

func register(ctx context.Context, d *app.Deps) error {
	sender, err := mail.New(mail.Config{
		Provider: d.Config.EmailProvider, SMTPURL: d.Config.SMTPURL.Reveal(),
		From: d.Config.EmailFrom, ReplyTo: d.Config.EmailReplyTo,
	}, d.Log)
	if err != nil {
		return err
	}
	conn, err := d.Dial("licensing", d.Config.LicensingAddr)
	if err != nil {
		return err
	}
	licensing := licensingclient.New(conn, d.Config.AdminAPIKey.Reveal())
	billingConn, err := d.Dial("billing", d.Config.BillingAddr)
	if err != nil {
		return err
	}
	// Sent rows hold a sealed buyer address: keep them no longer than needed to diagnose.
	// storefront.delivery events leave through the same outbox (pkg/events).
	spine, err := d.StartEventSpine(ctx, "storefront", app.SpineOptions{
		Streams: []jetstream.StreamConfig{fulfill.StreamConfig},
		Relay:   []natsx.RelayOption{natsx.WithRetention(time.Hour), natsx.WithPollInterval(200 * time.Millisecond)},
	})
	if err != nil {
		return err
	}
	js, relay := spine.JetStream, spine.Relay
	d.Readiness.Add(natsx.ReadinessCheck(spine.NATS)) // the fulfillment worker consumes
	workerDB, err := pgxx.Open(ctx, d.Config.DatabaseURL.Reveal(), "storefront", pgxx.WithMaxConns(workerConcurrency+1))
	if err != nil {
		return err
	}
	d.OnClose(workerDB.Close)
	st := store.New(d.DB, spine.Spine)
	worker := &fulfill.Worker{
		Store: store.New(workerDB, spine.Spine), Licensing: licensing, Keys: licensing, Mail: sender,
		// The buyer email carries the license's portal link while the tenant's portal is on.
		Portal: licensing, Log: d.Log.With("component", "fulfillment"),
		// The tenant hears of a paid purchase that got no license (hosted: its address), and
		// its buyer emails answer to its name and address unless it set others.
		Vendors:     billingclient.New(billingConn, d.Config.AdminAPIKey.Reveal()),
		MaxAttempts: fulfill.DefaultMaxAttempts,
		Hosted:      d.Config.MultiTenant,
	}
	// The portal reads the buyer emails' sender settings on the API's pool (its own Worker
	// view), never waiting behind the worker's connections.
	senders := *worker
	senders.Store = st
	server.Register(d.Server.GRPC, server.New(server.Config{
		PublicBaseURL: d.Config.PublicBaseURL,
	}, st, licensing, relay.Notify, d.Log))
	server.RegisterPortal(d.Server.GRPC, server.NewPortal(licensing, &senders, d.Config.EmailReplyTo))
	var wg sync.WaitGroup
	// Delivery and fulfillment records are kept for RECORD_RETENTION (by last update):
	// a replay of a session older than that is a new purchase.
	for _, r := range []pgxx.Retention{
		{Table: "deliveries", Column: "updated_at", Keep: d.Config.RecordRetention},
		{Table: "fulfillments", Column: "updated_at", Keep: d.Config.RecordRetention},
	} {
		wg.Go(func() { r.Run(ctx, d.DB, d.Log) })
	}
	wg.Add(3)
	go func() {
		defer wg.Done()
		licensing.Prefetch(ctx, d.Log)
	}()
	go func() {
		defer wg.Done()
		// Idempotency-Key records of mapping creates, past their 24 h.
		idempotency.PurgeHourly(ctx, d.DB, d.Log)
	}()
	go func() {
		defer wg.Done()
		if err := worker.Run(ctx, js, workerConcurrency); err != nil {
			d.Log.Error("fulfillment worker stopped", "error", err.Error())
		}
	}()
	// Closers run in reverse: the worker finishes before the relay stops and NATS closes
	// (StartEventSpine's closers).
	// A deleted tenant's rows go in one transaction, even if this service was down when
	// the tenant was deleted (pkg/tenantpurge).
	wg.Go(func() {
		if err := tenantpurge.Run(ctx, spine.JetStream, "storefront", tenantpurge.Forgetter{DB: d.DB}.Forget, d.Log); err != nil {
			d.Log.Error("tenant.deleted consumer stopped", "error", err.Error())
		}
	})
	d.OnClose(wg.Wait)
	d.Log.Info("storefront ready", "email_provider", sender.Provider(), "public_base_url", d.Config.PublicBaseURL)
	return nil
}
