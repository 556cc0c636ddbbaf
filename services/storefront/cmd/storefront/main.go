// Command storefront serves storefront webhooks, mappings and deliveries over gRPC, and
// runs the fulfillment worker (a JetStream consumer; every replica runs one, and they
// share the work).
package main

import (
	"context"
	"sync"
	"time"

	"github.com/keyhouse/keyhouse/pkg/app"
	"github.com/keyhouse/keyhouse/pkg/config"
	"github.com/keyhouse/keyhouse/pkg/mail"
	"github.com/keyhouse/keyhouse/pkg/natsx"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	"github.com/keyhouse/keyhouse/services/storefront/internal/fulfill"
	"github.com/keyhouse/keyhouse/services/storefront/internal/remote"
	"github.com/keyhouse/keyhouse/services/storefront/internal/server"
	"github.com/keyhouse/keyhouse/services/storefront/internal/store"
	"github.com/keyhouse/keyhouse/services/storefront/migrations"
)

// workerConcurrency is how many deliveries one replica fulfills at once; deliveries of
// one checkout session still go one at a time (the session lock).
const workerConcurrency = 4

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
	conn, err := d.Dial(d.Config.LicensingAddr)
	if err != nil {
		return err
	}
	licensing := &remote.Licensing{
		Client:   licensingv1.NewLicensingInternalServiceClient(conn),
		AdminKey: d.Config.AdminAPIKey.Reveal(),
	}
	nc, js, err := natsx.Connect(ctx, d.Config.NATSURL, "storefront", d.Log)
	if err != nil {
		return err
	}
	if err := natsx.EnsureStream(ctx, js, fulfill.StreamConfig); err != nil {
		nc.Close()
		return err
	}
	d.Readiness.Add(natsx.ReadinessCheck(nc)) // the fulfillment worker consumes
	st := store.New(d.DB)
	// Sent rows hold a sealed buyer address: keep them no longer than needed to diagnose.
	relay := natsx.NewRelay(d.DB, js, d.Log, natsx.WithRetention(time.Hour), natsx.WithPollInterval(200*time.Millisecond))
	server.Register(d.Server.GRPC, server.New(server.Config{
		PublicBaseURL: d.Config.PublicBaseURL, MultiTenant: d.Config.MultiTenant,
	}, st, licensing, relay.Notify, d.Log))

	worker := &fulfill.Worker{
		Store: st, Licensing: licensing, Keys: licensing, Mail: sender,
		Portal: fulfill.NoPortal{}, Log: d.Log.With("component", "fulfillment"),
		MaxAttempts: fulfill.DefaultMaxAttempts,
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := relay.Run(ctx); err != nil {
			d.Log.Error("outbox relay stopped", "error", err.Error())
		}
	}()
	go func() {
		defer wg.Done()
		if err := worker.Run(ctx, js, workerConcurrency); err != nil {
			d.Log.Error("fulfillment worker stopped", "error", err.Error())
		}
	}()
	// Closers run in reverse: the worker and relay finish before NATS closes.
	d.OnClose(nc.Close)
	d.OnClose(wg.Wait)
	d.Log.Info("storefront ready", "email_provider", sender.Provider(), "public_base_url", d.Config.PublicBaseURL)
	return nil
}
