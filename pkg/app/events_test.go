package app

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/keyhouse/keyhouse/devinfra/devnats"
	"github.com/keyhouse/keyhouse/devinfra/testkit"
	"github.com/keyhouse/keyhouse/pkg/config"
	"github.com/keyhouse/keyhouse/pkg/events"
	"github.com/keyhouse/keyhouse/pkg/natsx"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// The outbox relay publishes while every connection of the service's request pool is
// busy: under load it queued behind the requests for one, and the events fell behind
// the changes by hundreds a second.
func TestRelayPublishesWhileTheRequestPoolIsBusy(t *testing.T) {
	ctx := context.Background()
	d, pool := outboxDeps(t, devnats.SharedURL(t), pgxx.WithMaxConns(1))
	runCtx, stop := context.WithCancel(ctx)
	spine, err := d.StartEventSpine(runCtx, "svc", SpineOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		stop()
		d.close()
	}()

	held, err := pool.Acquire(ctx) // the request pool's only connection, busy
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release()
	subject := events.Subject("license.issued")
	err = pgx.BeginFunc(ctx, held, func(tx pgx.Tx) error {
		return natsx.Enqueue(ctx, tx, natsx.Message{TenantID: "t1", Subject: subject, MsgID: "relay-test-1", Payload: []byte(`{}`)})
	})
	if err != nil {
		t.Fatal(err)
	}
	spine.Relay.Notify()

	// A failure bound, not a timing goal: the relay polls and backs off within seconds.
	wait, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	stream, err := spine.JetStream.Stream(ctx, events.Stream)
	if err != nil {
		t.Fatal(err)
	}
	for {
		msg, err := stream.GetLastMsgForSubject(wait, subject)
		if err == nil && msg.Header.Get(jetstream.MsgIDHeader) == "relay-test-1" {
			return
		}
		if wait.Err() != nil {
			t.Fatalf("the event was not published while the request pool was busy: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// outboxDeps is a service's dependencies for its event spine: a fresh database with the
// service's schema ("svc") and its outbox table, and NATS at natsURL. The pool is closed
// when the test ends.
func outboxDeps(t *testing.T, natsURL string, opts ...pgxx.Option) (*Deps, *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	url := testkit.DatabaseURL(t, testkit.Empty)
	pool, err := pgxx.Open(ctx, url, "svc", opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	for _, q := range []string{`CREATE SCHEMA svc`, natsx.OutboxTableSQL} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	return &Deps{
		Config: &config.Config{Common: config.Common{DatabaseURL: config.Secret(url)}, NATSURL: config.Secret(natsURL)},
		Log:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		DB:     pool,
	}, pool
}
