// Command events keeps the event log (addendum §11): it consumes every service's events
// from the event stream, stores them once per event id, serves GET /v1/events and
// /v1/events/{id} over gRPC, and deletes events older than EVENT_RETENTION. It also
// delivers webhooks: the endpoint routes, and a delivery worker on every replica.
package main

import (
	"context"
	"net"
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
	"github.com/keyhouse/keyhouse/pkg/webhook"
	"github.com/keyhouse/keyhouse/services/events/internal/ingest"
	"github.com/keyhouse/keyhouse/services/events/internal/server"
	"github.com/keyhouse/keyhouse/services/events/internal/store"
	"github.com/keyhouse/keyhouse/services/events/internal/webhooks"
	"github.com/keyhouse/keyhouse/services/events/migrations"
)

func main() {
	app.Main(app.Service{
		Name:       "events",
		Addr:       func(c *config.Config) string { return c.EventsAddr },
		Migrations: migrations.FS,
		Register:   register,
	})
}

// retentionSweep is how often events older than EVENT_RETENTION are deleted.
const retentionSweep = time.Hour

func register(ctx context.Context, d *app.Deps) error {
	st := store.New(d.DB)
	server.Register(d.Server.GRPC, server.New(st))

	// The events this service emits itself (ping, webhook_endpoint.disabled) leave through
	// its own outbox, like every other service's.
	spine, err := d.StartEventSpine(ctx, "events", app.SpineOptions{})
	if err != nil {
		return err
	}
	js, relay := spine.JetStream, spine.Relay
	d.Readiness.Add(natsx.ReadinessCheck(spine.NATS)) // the event log consumes

	// Webhooks: endpoint secrets are sealed under the installation keyring, which
	// licensing holds.
	licensingConn, err := d.Dial("licensing", d.Config.LicensingAddr)
	if err != nil {
		return err
	}
	licensing := licensingclient.New(licensingConn, d.Config.AdminAPIKey.Reveal())
	billingConn, err := d.Dial("billing", d.Config.BillingAddr)
	if err != nil {
		return err
	}
	sender, err := mail.New(mail.Config{
		Provider: d.Config.EmailProvider, SMTPURL: d.Config.SMTPURL.Reveal(),
		From: d.Config.EmailFrom, ReplyTo: d.Config.EmailReplyTo,
	}, d.Log)
	if err != nil {
		return err
	}
	mailer := &webhooks.DisabledMailer{
		Mail: sender, Contacts: billingclient.New(billingConn, d.Config.AdminAPIKey.Reveal()),
		ConsoleURL: d.Config.PublicBaseURL + "/console", Log: d.Log.With("component", "webhooks"),
	}
	allowPrivate := !d.Config.MultiTenant || d.Config.WebhookAllowPrivateNetworks
	hooks := webhooks.NewStore(d.DB)
	if err := webhooks.RegisterMetrics(hooks); err != nil {
		return err
	}
	// The delivery worker has a pool of its own, a connection per attempt in flight and one
	// to claim: attempts never queue for a connection (with the default four, deliveries
	// to one endpoint topped out near 150/s), and the log's consumer and the routes, on the
	// service's pool, never wait behind them.
	workerDB, err := pgxx.Open(ctx, d.Config.DatabaseURL.Reveal(), "events", pgxx.WithMaxConns(webhooks.DefaultConcurrency+1))
	if err != nil {
		return err
	}
	d.OnClose(workerDB.Close)
	// Hosted, a tenant's attempts take at most a quarter of the worker's slots, so other
	// tenants' deliveries do not wait behind its slow receivers; self-hosted has one tenant,
	// whose endpoints share every slot (each bounded per endpoint).
	perTenant := webhooks.DefaultPerTenant
	if !d.Config.MultiTenant {
		perTenant = webhooks.DefaultConcurrency
	}
	worker := &webhooks.Worker{
		Store: webhooks.NewStore(workerDB), Keys: licensing, Log: d.Log.With("component", "webhooks"),
		PerTenant: perTenant,
		Sender:    webhook.NewSender(webhook.SenderOptions{AllowPrivate: allowPrivate}),
		OnDisable: webhooks.EmitDisabled,
		Retention: d.Config.EventRetention,
		Schedule: webhook.Schedule{
			First: d.Config.WebhookRetryFirst, Max: d.Config.WebhookRetryMax,
			Window: webhook.DefaultSchedule.Window, Jitter: webhook.DefaultSchedule.Jitter,
		},
		// The disabled event is in the outbox: publish it now, and tell the tenant.
		Disabled: func(ctx context.Context, ep *webhooks.Endpoint) {
			relay.Notify()
			mailer.Send(ctx, ep)
		},
	}
	webhooks.Register(d.Server.GRPC, &webhooks.Server{
		Store: hooks, Keys: licensing, AllowPrivate: allowPrivate, Resolver: net.DefaultResolver, Wake: worker.Wake,
	})
	in := ingest.New(st, d.Log, ingest.WithFanout(&webhooks.Fanout{Store: hooks, Worker: worker}))

	var wg sync.WaitGroup
	wg.Go(func() {
		if err := in.Run(ctx, js); err != nil {
			d.Log.Error("event stream consumer stopped", "error", err.Error())
		}
	})
	wg.Go(func() { worker.Run(ctx) })
	wg.Go(func() { ingest.Retain(ctx, st, d.Config.EventRetention, retentionSweep, time.Now, d.Log) })
	// Idempotency-Key records of webhook endpoint creates, past their 24 h.
	wg.Go(func() { idempotency.PurgeHourly(ctx, d.DB, d.Log) })
	// Closers run in reverse: the consumer finishes its batch before the relay stops and
	// NATS closes (StartEventSpine's closers).
	d.OnClose(wg.Wait)
	return nil
}
