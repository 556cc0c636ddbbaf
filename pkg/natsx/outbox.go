package natsx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// OutboxTableSQL is the outbox table of one service. Each service that publishes events
// copies it verbatim into one of its goose migration files (goose runs the file with the
// service's schema as search_path, so the table lands in that schema and the Relay's SQL
// names only `outbox`):
//
//	-- +goose Up
//	<OutboxTableSQL>
//	-- +goose Down
//	DROP TABLE outbox;
//
// It is copied rather than created at run time because the schema belongs to the
// service's migrations: `serve` refuses a schema that is behind, and only `migrate` may
// change it; a test per service holds the copy to this constant (pgxx.CheckSharedDDL).
// msg_id is unique because it names the event, not the attempt; the partial
// index keeps the relay's "oldest unsent first" query cheap however many sent rows wait
// for cleanup, and the second one keeps that cleanup cheap.
const OutboxTableSQL = `CREATE TABLE outbox (
    id         bigserial   PRIMARY KEY,
    tenant_id  text        NOT NULL,
    subject    text        NOT NULL,
    msg_id     text        NOT NULL UNIQUE,
    payload    bytea       NOT NULL,
    headers    jsonb       NOT NULL DEFAULT '{}'::jsonb,
    created_at timestamptz NOT NULL DEFAULT now(),
    sent_at    timestamptz NULL,
    attempts   integer     NOT NULL DEFAULT 0,
    last_error text        NULL
);
CREATE INDEX outbox_unsent ON outbox (id) WHERE sent_at IS NULL;
CREATE INDEX outbox_sent_at ON outbox (sent_at) WHERE sent_at IS NOT NULL;
`

// HeaderTenant carries Message.TenantID on the published message, so a consumer scopes
// its work to the right tenant without trusting the payload for it.
const HeaderTenant = "Keyhouse-Tenant-Id"

// Message is one event to publish.
type Message struct {
	// TenantID scopes the event; it is stored on the row and sent as HeaderTenant.
	TenantID string
	// Subject is the NATS subject; a stream must capture it, or the relay waits (and says so).
	Subject string
	// MsgID names the event, e.g. "license.deleted:<key>". It is sent as Nats-Msg-Id, so
	// JetStream drops a re-publish inside the stream's duplicate window, and enqueueing
	// the same MsgID twice keeps the first message.
	MsgID   string
	Payload []byte
	// Header is optional; "Nats-" names are reserved for JetStream.
	Header map[string]string
}

// Enqueue writes m into the outbox inside tx, the transaction of the business change it
// announces, so both commit or neither does. Nothing is published until tx commits; a
// rolled-back tx leaves no trace. Call Relay.Notify after the commit to publish at once
// rather than at the next poll.
//
// A MsgID already in the outbox is a no-op, not an error: a retried operation that
// announces the same event again must not fail, and must not send it twice.
func Enqueue(ctx context.Context, tx pgx.Tx, m Message) error {
	if err := m.validate(); err != nil {
		return err
	}
	payload := m.Payload
	if payload == nil {
		payload = []byte{}
	}
	headers := m.Header
	if headers == nil {
		headers = map[string]string{}
	}
	_, err := tx.Exec(ctx, `INSERT INTO outbox (tenant_id, subject, msg_id, payload, headers)
		VALUES ($1, $2, $3, $4, $5) ON CONFLICT (msg_id) DO NOTHING`,
		m.TenantID, m.Subject, m.MsgID, payload, headers)
	if err != nil {
		return fmt.Errorf("natsx: enqueue %s: %w", m.Subject, err)
	}
	return nil
}

func (m Message) validate() error {
	switch {
	case m.TenantID == "":
		return errors.New("natsx: message without tenant id")
	case m.MsgID == "":
		return errors.New("natsx: message without msg id")
	case m.Subject == "" || strings.ContainsAny(m.Subject, " \t\r\n*>") ||
		strings.HasPrefix(m.Subject, ".") || strings.HasSuffix(m.Subject, ".") || strings.Contains(m.Subject, ".."):
		return fmt.Errorf("natsx: invalid subject %q", m.Subject)
	}
	for k := range m.Header {
		if k == "" || strings.HasPrefix(strings.ToLower(k), "nats-") || strings.EqualFold(k, HeaderTenant) {
			return fmt.Errorf("natsx: reserved or empty header %q", k)
		}
	}
	return nil
}

// Relay publishes a service's outbox rows to JetStream. Run one per replica: rows are
// claimed with FOR UPDATE SKIP LOCKED, so concurrent relays split the work instead of
// sending a row twice, and a crashed relay's claim vanishes with its transaction.
//
// Each row is published with its MsgID as Nats-Msg-Id and marked sent in the same
// transaction that claimed it. A crash (or a lost commit) between the publish and the
// mark re-publishes the row later; JetStream drops that copy if it arrives inside the
// stream's duplicate window (Duplicates, 2 minutes by default), and idempotent consumers
// absorb the rare copy that arrives after it.
//
// Within one relay rows go out in id order, and a row that fails stops its batch so a
// later row never overtakes it; several relays together do not promise an order.
type Relay struct {
	pool           *pgxpool.Pool
	js             jetstream.JetStream
	log            *slog.Logger
	batch          int
	poll           time.Duration
	maxBackoff     time.Duration
	publishTimeout time.Duration
	retention      time.Duration
	cleanupEvery   time.Duration
	wake           chan struct{}

	// beforeMark, when set (tests only), runs after a batch was published and before it
	// is marked sent; an error aborts the transaction, like a crash at that point.
	beforeMark func() error
}

// RelayOption tunes a Relay.
type RelayOption func(*Relay)

// WithBatchSize sets how many rows one transaction claims (default 32). Small batches
// keep row locks short and let concurrent relays share the work.
func WithBatchSize(n int) RelayOption { return func(r *Relay) { r.batch = max(n, 1) } }

// WithPollInterval sets how often the relay looks for rows another replica enqueued
// (default 500ms). Rows enqueued in this process can skip the wait via Notify.
func WithPollInterval(d time.Duration) RelayOption { return func(r *Relay) { r.poll = d } }

// WithRetention sets how long sent rows are kept before cleanup (default 7 days), long
// enough to answer "was it sent, and when" after an incident.
func WithRetention(d time.Duration) RelayOption { return func(r *Relay) { r.retention = d } }

// WithPublishTimeout bounds one publish, i.e. waiting for the stream's ack (default 5s).
func WithPublishTimeout(d time.Duration) RelayOption {
	return func(r *Relay) { r.publishTimeout = d }
}

// WithMaxBackoff caps the wait between retries while NATS or Postgres fails (default 5s):
// it is also the longest delay between NATS coming back and the outbox draining.
func WithMaxBackoff(d time.Duration) RelayOption { return func(r *Relay) { r.maxBackoff = d } }

// NewRelay makes a relay for the outbox table that pool's search_path resolves to.
func NewRelay(pool *pgxpool.Pool, js jetstream.JetStream, log *slog.Logger, opts ...RelayOption) *Relay {
	if log == nil {
		log = slog.Default()
	}
	r := &Relay{
		pool:           pool,
		js:             js,
		log:            log.With("component", "outbox-relay"),
		batch:          32,
		poll:           500 * time.Millisecond,
		maxBackoff:     5 * time.Second,
		publishTimeout: 5 * time.Second,
		retention:      7 * 24 * time.Hour,
		cleanupEvery:   time.Hour,
		wake:           make(chan struct{}, 1),
	}
	for _, o := range opts {
		o(r)
	}
	return r
}

// Notify wakes the relay now instead of at the next poll. It never blocks; call it after
// committing a transaction that enqueued.
func (r *Relay) Notify() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Run relays until ctx is done, then returns nil. Failures never lose rows: the relay
// logs once when publishing starts failing and once when it recovers, and in between
// retries with a growing backoff.
func (r *Relay) Run(ctx context.Context) error {
	var (
		failing     bool
		failures    int
		nextCleanup time.Time
		timer       = time.NewTimer(time.Hour)
	)
	defer timer.Stop()
	// Since Go 1.23 Reset and Stop never leave a stale tick in timer.C, so no draining.
	wait := func(d time.Duration, wakeable bool) {
		timer.Reset(d)
		defer timer.Stop()
		var wake <-chan struct{}
		if wakeable {
			wake = r.wake
		}
		select {
		case <-ctx.Done():
		case <-timer.C:
		case <-wake:
		}
	}
	for ctx.Err() == nil {
		if now := time.Now(); !now.Before(nextCleanup) {
			if n, err := r.cleanup(ctx, now.Add(-r.retention)); err != nil {
				if ctx.Err() == nil {
					r.log.Warn("outbox cleanup failed", "error", err.Error())
				}
			} else {
				if n > 0 {
					r.log.Debug("outbox cleanup", "deleted", n)
				}
				nextCleanup = now.Add(r.cleanupEvery)
			}
		}
		sent, full, err := r.relayBatch(ctx)
		if ctx.Err() != nil {
			break
		}
		if err != nil {
			failures++
			if !failing {
				failing = true
				r.log.Warn("outbox relay failing, rows kept for retry", "error", err.Error())
			}
			// While failing, only time wakes us: Notify must not turn an outage into a spin.
			wait(jitter(backoff(100*time.Millisecond, r.maxBackoff, failures)), false)
			continue
		}
		if failing {
			r.log.Info("outbox relay recovered", "failed_rounds", failures, "sent", sent)
			failing, failures = false, 0
		}
		if full {
			continue // more rows are likely waiting
		}
		wait(r.poll, true)
	}
	return nil
}

type outboxRow struct {
	id       int64
	tenantID string
	subject  string
	msgID    string
	payload  []byte
	headers  map[string]string
}

// relayBatch claims up to r.batch unsent rows, publishes them in id order and marks the
// published ones sent, all in one transaction. full reports a complete batch.
func (r *Relay) relayBatch(ctx context.Context) (sent int, full bool, err error) {
	tx, err := r.pool.Begin(ctx)
	if err != nil {
		return 0, false, fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()

	rows, err := tx.Query(ctx, `SELECT id, tenant_id, subject, msg_id, payload, headers FROM outbox
		WHERE sent_at IS NULL ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED`, r.batch)
	if err != nil {
		return 0, false, fmt.Errorf("claim rows: %w", err)
	}
	claimed, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (outboxRow, error) {
		var o outboxRow
		err := row.Scan(&o.id, &o.tenantID, &o.subject, &o.msgID, &o.payload, &o.headers)
		return o, err
	})
	if err != nil {
		return 0, false, fmt.Errorf("claim rows: %w", err)
	}
	if len(claimed) == 0 {
		return 0, false, nil
	}

	// Writes after the claim outlive a cancel of ctx: what was published should be marked
	// sent, or the next start re-publishes it (harmless, but avoidable).
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	var (
		published []int64
		pubErr    error
	)
	for _, o := range claimed {
		if ctx.Err() != nil {
			pubErr = ctx.Err()
			break
		}
		if err := r.publish(ctx, o); err != nil {
			if ctx.Err() != nil {
				pubErr = ctx.Err()
				break
			}
			pubErr = fmt.Errorf("publish %s (outbox id %d): %w", o.subject, o.id, err)
			// Record the failure on the row for operators, and stop here so a later row
			// never overtakes this one.
			if _, err := tx.Exec(cctx, `UPDATE outbox SET attempts = attempts + 1, last_error = $2 WHERE id = $1`,
				o.id, truncate(pubErr.Error(), 500)); err != nil {
				return 0, false, errors.Join(pubErr, err)
			}
			break
		}
		published = append(published, o.id)
	}
	if r.beforeMark != nil {
		if err := r.beforeMark(); err != nil {
			return 0, false, err
		}
	}
	if len(published) > 0 {
		if _, err := tx.Exec(cctx, `UPDATE outbox SET sent_at = now(), attempts = attempts + 1, last_error = NULL
			WHERE id = ANY($1)`, published); err != nil {
			return 0, false, fmt.Errorf("mark sent: %w", err)
		}
	}
	if err := tx.Commit(cctx); err != nil {
		return 0, false, fmt.Errorf("commit: %w", err)
	}
	return len(published), pubErr == nil && len(claimed) == r.batch, pubErr
}

func (r *Relay) publish(ctx context.Context, o outboxRow) error {
	msg := nats.NewMsg(o.subject)
	msg.Data = o.payload
	for k, v := range o.headers {
		msg.Header.Set(k, v)
	}
	msg.Header.Set(HeaderTenant, o.tenantID)
	pctx, cancel := context.WithTimeout(ctx, r.publishTimeout)
	defer cancel()
	ack, err := r.js.PublishMsg(pctx, msg, jetstream.WithMsgID(o.msgID))
	if err != nil {
		return err
	}
	if ack.Duplicate {
		r.log.Debug("outbox row was already in the stream", "msg_id", o.msgID, "stream", ack.Stream)
	}
	return nil
}

// cleanup deletes rows sent before cutoff, in chunks so no statement holds many locks.
func (r *Relay) cleanup(ctx context.Context, cutoff time.Time) (int64, error) {
	var total int64
	for {
		tag, err := r.pool.Exec(ctx, `DELETE FROM outbox WHERE id IN (
			SELECT id FROM outbox WHERE sent_at < $1 ORDER BY sent_at LIMIT 1000)`, cutoff)
		if err != nil {
			return total, err
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < 1000 {
			return total, nil
		}
	}
}

// truncate cuts s to at most n bytes on a rune boundary (Postgres rejects invalid UTF-8).
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}
