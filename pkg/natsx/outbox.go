package natsx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/keyhouse/keyhouse/pkg/periodic"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
	"github.com/keyhouse/keyhouse/pkg/telemetry"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
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
// change it; a test per service holds the copy to OutboxTable (pgxx.CheckSharedTables).
// A service whose outbox was created from an earlier version adds the upgrades instead
// (OutboxTable.Earlier: OutboxParkingMigration, OutboxRetryIndexMigration).
//
// msg_id is unique because it names the event, not the attempt. A row is pending until it
// is sent or parked (parked_at, park_reason: it can never be published, see Relay);
// retry_at holds a row back after a failure that was its own, failures counts those. The
// partial indexes keep the relay's claim cheap however many sent or parked rows wait:
// outbox_pending_tenant finds the tenants with pending rows and each tenant's oldest,
// outbox_retrying a tenant's row waiting to retry without reading its other pending rows
// (a row is in it only after a failure), and the sent and parked ones keep cleanup cheap.
// Every index is written by every event's INSERT, so none is kept that the relay's
// queries do not use (see OutboxRetryIndexMigration).
const OutboxTableSQL = `CREATE TABLE outbox (
    id          bigserial   PRIMARY KEY,
    tenant_id   text        NOT NULL,
    subject     text        NOT NULL,
    msg_id      text        NOT NULL UNIQUE,
    payload     bytea       NOT NULL,
    headers     jsonb       NOT NULL DEFAULT '{}'::jsonb,
    created_at  timestamptz NOT NULL DEFAULT now(),
    sent_at     timestamptz NULL,
    attempts    integer     NOT NULL DEFAULT 0,
    last_error  text        NULL,
    failures    integer     NOT NULL DEFAULT 0,
    retry_at    timestamptz NULL,
    parked_at   timestamptz NULL,
    park_reason text        NULL
);
CREATE INDEX outbox_pending_tenant ON outbox (tenant_id, id) WHERE sent_at IS NULL AND parked_at IS NULL;
CREATE INDEX outbox_retrying ON outbox (tenant_id, id) WHERE retry_at IS NOT NULL AND sent_at IS NULL AND parked_at IS NULL;
CREATE INDEX outbox_sent_at ON outbox (sent_at) WHERE sent_at IS NOT NULL;
CREATE INDEX outbox_parked ON outbox (parked_at) WHERE parked_at IS NOT NULL;
`

// outboxTableV2SQL is OutboxTableSQL with parking, before OutboxRetryIndexMigration.
const outboxTableV2SQL = `CREATE TABLE outbox (
    id          bigserial   PRIMARY KEY,
    tenant_id   text        NOT NULL,
    subject     text        NOT NULL,
    msg_id      text        NOT NULL UNIQUE,
    payload     bytea       NOT NULL,
    headers     jsonb       NOT NULL DEFAULT '{}'::jsonb,
    created_at  timestamptz NOT NULL DEFAULT now(),
    sent_at     timestamptz NULL,
    attempts    integer     NOT NULL DEFAULT 0,
    last_error  text        NULL,
    failures    integer     NOT NULL DEFAULT 0,
    retry_at    timestamptz NULL,
    parked_at   timestamptz NULL,
    park_reason text        NULL
);
CREATE INDEX outbox_pending ON outbox (id) WHERE sent_at IS NULL AND parked_at IS NULL;
CREATE INDEX outbox_pending_tenant ON outbox (tenant_id, id) WHERE sent_at IS NULL AND parked_at IS NULL;
CREATE INDEX outbox_sent_at ON outbox (sent_at) WHERE sent_at IS NOT NULL;
CREATE INDEX outbox_parked ON outbox (parked_at) WHERE parked_at IS NOT NULL;
`

// outboxTableV1SQL is OutboxTableSQL as first published (before parking).
const outboxTableV1SQL = `CREATE TABLE outbox (
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

// OutboxParkingMigration takes an outbox created from the first OutboxTableSQL to the
// current one. A service whose migrations hold that first version copies it verbatim as a
// new migration file of its own.
const OutboxParkingMigration = `-- +goose Up
-- The outbox parks a row that can never be published instead of retrying it forever
-- (pkg/natsx OutboxParkingMigration, copied verbatim).
ALTER TABLE outbox
    ADD COLUMN failures    integer     NOT NULL DEFAULT 0,
    ADD COLUMN retry_at    timestamptz NULL,
    ADD COLUMN parked_at   timestamptz NULL,
    ADD COLUMN park_reason text        NULL;
DROP INDEX outbox_unsent;
CREATE INDEX outbox_pending ON outbox (id) WHERE sent_at IS NULL AND parked_at IS NULL;
CREATE INDEX outbox_pending_tenant ON outbox (tenant_id, id) WHERE sent_at IS NULL AND parked_at IS NULL;
CREATE INDEX outbox_parked ON outbox (parked_at) WHERE parked_at IS NOT NULL;

-- +goose Down
DROP INDEX outbox_parked;
DROP INDEX outbox_pending_tenant;
DROP INDEX outbox_pending;
CREATE INDEX outbox_unsent ON outbox (id) WHERE sent_at IS NULL;
ALTER TABLE outbox
    DROP COLUMN park_reason,
    DROP COLUMN parked_at,
    DROP COLUMN retry_at,
    DROP COLUMN failures;
`

// OutboxRetryIndexMigration takes an outbox created from the second OutboxTableSQL (with
// parking) to the current one. outbox_pending (id) goes: the claim finds rows through
// outbox_pending_tenant and locks them by primary key, so it was one more index entry
// written by every event and read by nothing. outbox_retrying comes: the claim's test
// "does a row of this tenant wait to retry" read every pending row of the tenant; it
// reads this index, which holds only rows that failed. Every service copies it verbatim
// as a new migration file of its own. Both statements are quick on an outbox of the
// usual size (rows go as they are sent), and CREATE INDEX blocks the outbox's writes
// only while it runs.
const OutboxRetryIndexMigration = `-- +goose Up
-- The outbox drops an index no query reads and indexes the rows waiting to retry
-- (pkg/natsx OutboxRetryIndexMigration, copied verbatim).
DROP INDEX outbox_pending;
CREATE INDEX outbox_retrying ON outbox (tenant_id, id) WHERE retry_at IS NOT NULL AND sent_at IS NULL AND parked_at IS NULL;

-- +goose Down
DROP INDEX outbox_retrying;
CREATE INDEX outbox_pending ON outbox (id) WHERE sent_at IS NULL AND parked_at IS NULL;
`

// OutboxTable is the outbox's DDL with its history, for a service's migration test:
// pgxx.CheckSharedTables(migrations.FS, natsx.OutboxTable).
var OutboxTable = pgxx.SharedTable{
	Create: OutboxTableSQL,
	Earlier: []pgxx.SharedTableVersion{
		{Create: outboxTableV1SQL, Upgrade: OutboxParkingMigration},
		{Create: outboxTableV2SQL, Upgrade: OutboxRetryIndexMigration},
	},
}

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
// announces the same event again must not fail, and must not send it twice. A row the
// relay deleted on sending (WithRetention) is no longer there to match: a second enqueue
// after that is dropped by the stream's duplicate window, or by idempotent consumers.
func Enqueue(ctx context.Context, tx pgx.Tx, m Message) error {
	return EnqueueAll(ctx, tx, m)
}

// EnqueueAll is Enqueue for the messages of a batched change: one row per message, in
// the order given (a tenant's rows are published in that order), written by one
// statement instead of one per message. Every message is checked before anything is
// written.
func EnqueueAll(ctx context.Context, tx pgx.Tx, msgs ...Message) error {
	for _, m := range msgs {
		if err := m.validate(); err != nil {
			return err
		}
	}
	msgs = traced(ctx, msgs)
	switch len(msgs) {
	case 0:
		return nil
	case 1:
		m := msgs[0]
		_, err := tx.Exec(ctx, enqueueOneSQL, m.TenantID, m.Subject, m.MsgID, m.payload(), m.headers())
		if err != nil {
			return fmt.Errorf("natsx: enqueue %s: %w", m.Subject, err)
		}
		return nil
	}
	_, err := tx.Exec(ctx, enqueueManySQL, columns(msgs)...)
	if err != nil {
		return fmt.Errorf("natsx: enqueue %d messages (%s, …): %w", len(msgs), msgs[0].Subject, err)
	}
	return nil
}

// QueueAll is EnqueueAll for a transaction sent as a pipeline (pgx.Batch, BEGIN to
// COMMIT): it queues the statement that writes the messages' rows on b, to run in the
// change's transaction before its COMMIT (nothing when msgs is empty). An error of the
// statement is the batch's. Every message is checked before anything is queued.
func QueueAll(ctx context.Context, b *pgx.Batch, msgs ...Message) error {
	for _, m := range msgs {
		if err := m.validate(); err != nil {
			return err
		}
	}
	msgs = traced(ctx, msgs)
	switch len(msgs) {
	case 0:
	case 1:
		m := msgs[0]
		b.Queue(enqueueOneSQL, m.TenantID, m.Subject, m.MsgID, m.payload(), m.headers())
	default:
		b.Queue(enqueueManySQL, columns(msgs)...)
	}
	return nil
}

// enqueueOneSQL writes one message's row; enqueueManySQL the rows of many, given as
// columns (columns). ORDER BY n: the ids (bigserial) follow the order given, which is the
// order the relay publishes a tenant's rows in.
const (
	enqueueOneSQL = `INSERT INTO outbox (tenant_id, subject, msg_id, payload, headers)
		VALUES ($1, $2, $3, $4, $5) ON CONFLICT (msg_id) DO NOTHING`
	enqueueManySQL = `INSERT INTO outbox (tenant_id, subject, msg_id, payload, headers)
		SELECT tenant_id, subject, msg_id, payload, headers
		FROM unnest($1::text[], $2::text[], $3::text[], $4::bytea[], $5::jsonb[])
			WITH ORDINALITY AS m(tenant_id, subject, msg_id, payload, headers, n)
		ORDER BY n
		ON CONFLICT (msg_id) DO NOTHING`
)

// columns is enqueueManySQL's arguments: the messages' fields, one array each.
func columns(msgs []Message) []any {
	tenants, subjects, msgIDs := make([]string, len(msgs)), make([]string, len(msgs)), make([]string, len(msgs))
	payloads, headers := make([][]byte, len(msgs)), make([]map[string]string, len(msgs))
	for i, m := range msgs {
		tenants[i], subjects[i], msgIDs[i], payloads[i], headers[i] = m.TenantID, m.Subject, m.MsgID, m.payload(), m.headers()
	}
	return []any{tenants, subjects, msgIDs, payloads, headers}
}

func (m Message) payload() []byte {
	if m.Payload == nil {
		return []byte{}
	}
	return m.Payload
}

// HeaderTraceparent carries the W3C traceparent of the span that wrote an outbox row (the
// request that caused the event), when tracing is on: the consumer's span links to it.
const HeaderTraceparent = "traceparent"

// traced returns msgs with ctx's traceparent in their headers (msgs itself without one).
func traced(ctx context.Context, msgs []Message) []Message {
	tp := telemetry.Traceparent(ctx)
	if tp == "" {
		return msgs
	}
	out := make([]Message, len(msgs))
	for i, m := range msgs {
		h := make(map[string]string, len(m.Header)+1)
		maps.Copy(h, m.Header)
		h[HeaderTraceparent] = tp
		m.Header = h
		out[i] = m
	}
	return out
}

func (m Message) headers() map[string]string {
	if m.Header == nil {
		return map[string]string{}
	}
	return m.Header
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
// Each row is published with its MsgID as Nats-Msg-Id and deleted (or, WithRetention,
// marked sent) in the same transaction that claimed it; a batch's publishes are
// asynchronous, one wait for all their acks rather than a round trip per row. A crash (or a lost commit) between the publish and the
// mark re-publishes the row later; JetStream drops that copy if it arrives inside the
// stream's duplicate window (Duplicates, 2 minutes by default), and idempotent consumers
// absorb the rare copy that arrives after it.
//
// No row can stall the others. A row that can never be published is parked (parked_at,
// park_reason) and the rows behind it go out: at once when the message is larger than
// the connection's MaxPayload (checked before trying), or after WithMaxFailures failed
// attempts whose failure was the row's own (the stream refused it). Parking is logged,
// counted in keyhouse_outbox_parked_total and kept in keyhouse_outbox_parked; an operator
// requeues a row by clearing parked_at. A failure that is NATS's, not the row's (NATS
// unreachable, a publish timeout, no stream answering while JetStream restarts), parks
// nothing: it stops the batch and the relay backs off, as every row would fail the same.
//
// Order is kept per tenant only: within one relay a tenant's rows go out in id order, a
// row waiting to retry holds back its tenant's later rows and nobody else's, and a parked
// row holds back nothing. A batch is published without waiting for each ack, so a
// tenant's rows behind a failed one may reach the stream in the same round; they are
// left unsent and go again after it, and the duplicate window drops the second copy. Tenants take turns, so one tenant's backlog delays another's
// rows by at most a batch. Several relays together do not promise an order.
type Relay struct {
	pool            *pgxpool.Pool
	js              jetstream.JetStream
	log             *slog.Logger
	batch           int
	poll            time.Duration
	maxBackoff      time.Duration
	publishTimeout  time.Duration
	retention       time.Duration
	parkedRetention time.Duration
	maxFailures     int
	cleanupEvery    time.Duration
	linger          time.Duration
	wake            chan struct{}
	cursors         relayCursors

	// beforeMark, when set (tests only), runs after a batch was published and before it
	// is marked sent; an error aborts the transaction, like a crash at that point.
	beforeMark func() error
}

// RelayOption tunes a Relay.
type RelayOption func(*Relay)

// WithBatchSize sets how many rows one transaction claims (default 128): room for what a
// linger gathers under load (WithLinger; 1,500 events/s write 45 rows in 30 ms), which a
// smaller batch would split into rounds back to back. Smaller batches keep row locks
// shorter and let concurrent relays share a backlog in smaller pieces.
func WithBatchSize(n int) RelayOption { return func(r *Relay) { r.batch = max(n, 1) } }

// WithPollInterval sets how often the relay looks for rows another replica enqueued
// (default 500ms). Rows enqueued in this process can skip the wait via Notify.
func WithPollInterval(d time.Duration) RelayOption { return func(r *Relay) { r.poll = d } }

// WithLinger sets how long the relay, woken by Notify while commits keep coming, waits for
// more before it claims (default 30ms): that much delivery latency for one round (claim,
// publish, mark, and the consumers' fetch and store after it) per 30 ms of commits instead
// of one per commit. Woken longer than d/3 after its last round, it claims at once
// (lingerAfter), so commits that come one at a time are not delayed.
func WithLinger(d time.Duration) RelayOption { return func(r *Relay) { r.linger = max(d, 0) } }

// WithRetention keeps sent rows, marked sent_at, for d before cleanup deletes them. By
// default (0) a published row is deleted in the statement that ends its batch: marking it
// would write a second copy of the row, payload included (about ten times the WAL of the
// delete), for a record the event log keeps anyway. Keep rows when Enqueue's "same MsgID
// keeps the first message" must outlive the send (a work queue whose producer may enqueue
// the same job again later), or to answer "was it sent, and when" from the outbox.
func WithRetention(d time.Duration) RelayOption { return func(r *Relay) { r.retention = max(d, 0) } }

// WithParkedRetention sets how long parked rows are kept for an operator to look at or
// requeue before cleanup deletes them (default 30 days).
func WithParkedRetention(d time.Duration) RelayOption {
	return func(r *Relay) { r.parkedRetention = d }
}

// WithMaxFailures sets after how many failed attempts of its own a row is parked
// (default 5; retried in between after 0.5 s, 1 s, 2 s, …).
func WithMaxFailures(n int) RelayOption { return func(r *Relay) { r.maxFailures = max(n, 1) } }

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
		pool:            pool,
		js:              js,
		log:             log.With("component", "outbox-relay"),
		batch:           128,
		poll:            500 * time.Millisecond,
		maxBackoff:      5 * time.Second,
		publishTimeout:  5 * time.Second,
		parkedRetention: 30 * 24 * time.Hour,
		maxFailures:     5,
		cleanupEvery:    time.Hour,
		linger:          30 * time.Millisecond,
		wake:            make(chan struct{}, 1),
	}
	for _, o := range opts {
		o(r)
	}
	// Both kinds' series are there at 0 from the start, so an alert on an increase has a
	// series before the first row is parked.
	for _, kind := range []string{parkTooLarge, parkFailed} {
		outboxParked.WithLabelValues(kind)
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
		failing     periodic.Failing
		nextCleanup time.Time
		timer       = time.NewTimer(time.Hour)
	)
	defer timer.Stop()
	// Since Go 1.23 Reset and Stop never leave a stale tick in timer.C, so no draining.
	wait := func(d time.Duration, wakeable bool) (woken bool) {
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
			return true
		}
		return false
	}
	for ctx.Err() == nil {
		if now := time.Now(); !now.Before(nextCleanup) {
			if n, err := r.cleanup(ctx, now.Add(-r.retention), now.Add(-r.parkedRetention)); err != nil {
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
			failing.Fail(r.log, "outbox relay failing, rows kept for retry", err)
			// While failing, only time wakes us: Notify must not turn an outage into a spin.
			wait(jitter(backoff(100*time.Millisecond, r.maxBackoff, failing.Rounds())), false)
			continue
		}
		failing.Worked(r.log, "outbox relay recovered", "sent", sent)
		if full {
			continue // more rows are likely waiting
		}
		idleSince := time.Now()
		if wait(r.poll, true) {
			if d := r.lingerAfter(time.Since(idleSince)); d > 0 {
				wait(d, false)
			}
		}
	}
	return nil
}

// lingerAfter is how long to wait for more commits after a Notify that came idle after the
// relay's last round. Commits that keep coming (the Notify within a third of the linger
// of the round before) are gathered for r.linger, so that under load the rows of many
// commits go in one claim, publish and mark, and the consumers fetch and store them in
// one round too: each round costs Postgres, NATS and the consumers about as much as its
// rows do. Commits further apart go at once: at 50 commits a second (the storefront's
// purchases in make bench) lingering would add its whole length to every event and
// gather little.
func (r *Relay) lingerAfter(idle time.Duration) time.Duration {
	if idle < r.linger/3 {
		return r.linger
	}
	return 0
}

type outboxRow struct {
	id       int64
	tenantID string
	subject  string
	msgID    string
	payload  []byte
	headers  map[string]string
	failures int
	// version is the row's ctid as claimed: the batch's marks find the row by it.
	version pgtype.TID
}

// claimSQL takes up to $1 pending rows that may go now, taking turns between tenants: the
// oldest row of every tenant, then the second oldest of every tenant, and so on, so a
// tenant with a large backlog never delays another's rows by more than a batch. Within a
// tenant rows go in id order, stopping before a row that waits to retry (per-tenant
// order; nobody else is held back). Each tenant offers four batches' worth of rows, so
// relays in other replicas find rows this one has not locked (SKIP LOCKED) instead of
// nothing. The outer WHERE repeats the pending test on the row it locks: a row another
// relay sent after this statement's snapshot is re-checked there (READ COMMITTED
// re-evaluates only the locked row's own conditions) and left out.
//
// $2 and $3 are the relay's cursors (relayCursors): tenants it knows and, for each, the
// id of the last row it relayed; a known tenant's rows are read after its cursor. Rows
// relayed are deleted, and until vacuum runs (and while any older transaction of the
// database may still see them) their entries stay at the front of each tenant's range of
// outbox_pending_tenant: a scan from the front read them all again on every claim, so the
// claim cost more the more rows had gone before it. The tenants the relay does not know
// are found with a loose index scan of outbox_pending_tenant confined to the gaps between
// known tenants (found: one probe per gap and per tenant found in it; a gap's bounds stop
// the probe on an index entry, never inside a known tenant's range). With no cursors
// ($2 empty) it is the claim from the front: one gap, every tenant found, read from its
// oldest row.
//
// The plan must not depend on the table's statistics: a busy outbox churns faster than
// autovacuum analyzes it (a fresh one has none at all; one analyzed while empty has no
// pages, and without pgxx.GenericPlanSettings' enable_seqscan = off its every lookup
// would be a sequential scan, kept with the plan), and a planner that believes the
// table holds a row re-ran ready's per-tenant scans once per pending row, a claim taking
// a minute at 6,000 pending rows, so a backlog only grew. ready is therefore MATERIALIZED
// (computed once) and the rows to lock are fetched by their ids, a primary key probe
// each in claim order (turn, id), locked one by one until the batch is full: a LATERAL
// subquery with its own FOR UPDATE, under a LIMIT with nothing to sort above it, so the
// claim reads the batch's rows and the ones skipped, not all four batches' worth of every
// tenant that ready offers (fetching them all, then sorting, was most of a claim's
// buffers in BenchmarkRelayDrain). A tenant's rows are read
// through outbox_pending_tenant whatever its statistics say: its bounds are written as
// row comparisons on (tenant_id, id), and its order as that index's, which the primary
// key cannot serve (analyzed, the planner took the primary key from id 0 for a tenant
// new to the relay, reading every dead row before it). Their pending test is
// written COALESCE(sent_at, parked_at) IS NULL (the same test) so that no partial index's
// predicate follows from it: written as the index's predicate, the planner read all of
// outbox_pending_tenant, dead front included, filtering it by id (638 of the 678 buffers
// of a claim from the cursors in TestClaimFromTheCursorsSkipsTheDeadFront).
const claimSQL = `WITH RECURSIVE known AS MATERIALIZED (
		SELECT k.tenant_id, k.after FROM unnest($2::text[], $3::bigint[]) AS k(tenant_id, after)
	), gaps (lo, hi) AS (
		SELECT COALESCE(lag(k.tenant_id) OVER (ORDER BY k.tenant_id), ''), k.tenant_id FROM known k
		UNION ALL
		SELECT COALESCE(max(k.tenant_id), ''), NULL FROM known k
	), found (tenant_id, hi, seed) AS (
		SELECT g.lo, g.hi, true FROM gaps g
		UNION ALL
		SELECT CASE WHEN f.hi IS NULL THEN
				(SELECT o.tenant_id FROM outbox o
				WHERE o.sent_at IS NULL AND o.parked_at IS NULL AND o.tenant_id > f.tenant_id
				ORDER BY o.tenant_id LIMIT 1)
			ELSE
				(SELECT o.tenant_id FROM outbox o
				WHERE o.sent_at IS NULL AND o.parked_at IS NULL AND o.tenant_id > f.tenant_id AND o.tenant_id < f.hi
				ORDER BY o.tenant_id LIMIT 1)
			END, f.hi, false
		FROM found f WHERE f.tenant_id IS NOT NULL
	), tenants (tenant_id, after) AS (
		SELECT k.tenant_id, k.after FROM known k
		UNION ALL
		SELECT f.tenant_id, 0 FROM found f WHERE NOT f.seed AND f.tenant_id IS NOT NULL
	), ready AS MATERIALIZED (
		SELECT r.id, r.turn FROM tenants t CROSS JOIN LATERAL (
			SELECT o.id, row_number() OVER (ORDER BY o.tenant_id, o.id) AS turn FROM outbox o
			WHERE o.tenant_id = t.tenant_id AND o.sent_at IS NULL AND o.parked_at IS NULL
			  AND (o.tenant_id, o.id) > (t.tenant_id, t.after)
			  AND (o.tenant_id, o.id) < (t.tenant_id, COALESCE((SELECT min(w.id) FROM outbox w
				WHERE w.tenant_id = t.tenant_id AND w.sent_at IS NULL AND w.parked_at IS NULL
				  AND w.retry_at > now()), 9223372036854775807))
			ORDER BY o.tenant_id, o.id LIMIT $1 * 4) r
	)
	SELECT o.id, o.tenant_id, o.subject, o.msg_id, o.payload, o.headers, o.failures, o.ctid
	FROM (SELECT r.id, r.turn FROM ready r ORDER BY r.turn, r.id) r CROSS JOIN LATERAL (
		SELECT o.id, o.tenant_id, o.subject, o.msg_id, o.payload, o.headers, o.failures, o.ctid FROM outbox o
		WHERE o.id = r.id AND COALESCE(o.sent_at, o.parked_at) IS NULL AND (o.retry_at IS NULL OR o.retry_at <= now())
		FOR UPDATE SKIP LOCKED) o
	ORDER BY r.turn, r.id LIMIT $1`

// The marks of a relay batch find their rows by the version its claim locked (ctid, a
// TID scan) and are planned for their arguments each time (marksPlanMode). The relay's
// connection keeps one generic plan per statement (pgxx.WithGenericPlans: planning the
// claim took three times its run), and a new deployment's relay makes those plans on an
// empty outbox, where a sequential scan costs less than any lookup of a list of rows by
// id or by version: kept, every delete of the published rows read the whole outbox,
// dead rows included (2.3 ms a batch of 24 at 2,000 seat events/s, growing until
// autovacuum came). Planned for a batch's own list, a TID scan is the plan at any size,
// and planning these one-line statements is cheap. The claimed rows are locked until the
// batch's COMMIT and each is marked once, so the version is the row's own.
const marksPlanMode = `SET LOCAL plan_cache_mode = force_custom_plan`

// The marks, each finding its rows by the versions the claim locked.
const (
	deletePublishedSQL = `DELETE FROM outbox WHERE ctid = ANY($1::tid[])`
	markSentSQL        = `UPDATE outbox SET sent_at = now(), attempts = attempts + 1, last_error = NULL,
		retry_at = NULL WHERE ctid = ANY($1::tid[])`
	markNATSFailureSQL = `UPDATE outbox SET attempts = attempts + 1, last_error = $2 WHERE ctid = $1`
	markRetrySQL       = `UPDATE outbox SET attempts = attempts + 1, failures = failures + 1,
		last_error = $2, retry_at = now() + $3::interval WHERE ctid = $1`
	markParkedSQL = `UPDATE outbox SET parked_at = now(), park_reason = $2, retry_at = NULL,
		attempts = attempts + $3, failures = failures + $3 WHERE ctid = $1`
)

// relayBatch claims up to r.batch pending rows, publishes them all at once (asynchronous
// JetStream publishes, then one wait for their acks), deletes the published ones (or
// marks them sent, WithRetention) and marks the failed ones for retry or parked, all in
// one transaction of two round trips to Postgres: BEGIN with the claim, then the marks
// with COMMIT.
// full reports a complete batch; err is a failure of NATS or Postgres, not of a row.
func (r *Relay) relayBatch(ctx context.Context) (sent int, full bool, err error) {
	conn, err := r.pool.Acquire(ctx)
	if err != nil {
		return 0, false, fmt.Errorf("acquire: %w", err)
	}
	committed := false
	defer func() {
		if !committed && conn.Conn().PgConn().TxStatus() != 'I' {
			// A connection left inside a transaction is destroyed by Release anyway; the
			// rollback only saves a reconnect.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_, _ = conn.Exec(rctx, "ROLLBACK")
			cancel()
		}
		conn.Release()
	}()

	tenants, after, front := r.cursors.next()
	claim := &pgx.Batch{}
	claim.Queue("BEGIN")
	claim.Queue(claimSQL, r.batch, tenants, after)
	br := conn.SendBatch(ctx, claim)
	claimed, err := readClaim(br)
	if cerr := br.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err == nil && len(claimed) == 0 && !front {
		// Nothing after the cursors: look from the front, where a row that committed
		// after the relay passed its id (or one another relay left) waits.
		front = true
		var rows pgx.Rows
		if rows, err = conn.Query(ctx, claimSQL, r.batch, []string{}, []int64{}); err == nil {
			claimed, err = collectClaim(rows)
		}
	}
	if err != nil {
		return 0, false, fmt.Errorf("claim rows: %w", err)
	}
	if front {
		r.cursors.fromFront()
	}
	if len(claimed) == 0 {
		// Nothing locked: the empty transaction needs no COMMIT round trip of its own,
		// the deferred ROLLBACK ends it.
		return 0, false, nil
	}

	span := startRelaySpan(ctx, claimed)
	defer func() { endRelaySpan(span, sent, err) }()
	results := r.publishAll(ctx, claimed)

	// Writes after the claim outlive a cancel of ctx: what was published should be marked
	// sent, or the next start re-publishes it (harmless, but avoidable).
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	var (
		published []int64
		versions  []pgtype.TID // the published rows', for their mark
		parked    []parkedRow
		pubErr    error
		marks     = &pgx.Batch{}
		held      = map[string]bool{} // tenants whose sequence stopped in this batch
	)
	marks.Queue(marksPlanMode)

	// Results are read in claim order, so a tenant's sequence stops at its first row that
	// failed: its later rows stay pending even if their publish succeeded, and go again
	// with the next claim, where JetStream drops them as duplicates (same Nats-Msg-Id).
	for i, o := range claimed {
		res := results[i]
		if held[o.tenantID] {
			continue
		}
		switch {
		case res.tooLarge != "":
			parked = append(parked, parkedRow{row: o, kind: parkTooLarge, reason: res.tooLarge})
			continue
		case res.notTried:
			held[o.tenantID] = true
			continue
		case res.err == nil:
			published, versions = append(published, o.id), append(versions, o.version)
			continue
		}
		err := res.err
		rowErr := fmt.Errorf("publish %s (outbox id %d): %w", o.subject, o.id, err)
		switch {
		case ctx.Err() != nil && errors.Is(err, ctx.Err()):
			held[o.tenantID] = true // stopping, not failing: nothing to record
		case errors.Is(err, nats.ErrMaxPayload):
			parked = append(parked, parkedRow{row: o, kind: parkTooLarge, reason: truncate(rowErr.Error(), 500), attempted: true})
		case !rowsOwnFailure(err):
			// NATS's failure, not this row's: Run backs off, as the next rows would fail
			// the same. Recorded on the row for operators.
			held[o.tenantID] = true
			if pubErr == nil {
				pubErr = rowErr
				marks.Queue(markNATSFailureSQL, o.version, truncate(rowErr.Error(), 500))
			}
		case o.failures+1 >= r.maxFailures:
			parked = append(parked, parkedRow{row: o, kind: parkFailed, attempted: true,
				reason: truncate(fmt.Sprintf("publish failed %d times: %s", o.failures+1, rowErr), 500)})
		default:
			held[o.tenantID] = true
			retryIn := backoff(500*time.Millisecond, time.Minute, o.failures+1)
			marks.Queue(markRetrySQL, o.version, truncate(rowErr.Error(), 500), retryIn.String())
			r.log.Warn("outbox row failed, will retry", "outbox_id", o.id, "subject", o.subject,
				"tenant_id", o.tenantID, "failures", o.failures+1, "retry_in", retryIn.String(), "error", err.Error())
		}
	}
	if pubErr == nil && ctx.Err() != nil && len(published) < len(claimed) {
		pubErr = ctx.Err()
	}
	if r.beforeMark != nil {
		if err := r.beforeMark(); err != nil {
			return 0, false, err
		}
	}
	switch {
	case len(published) == 0:
	case r.retention == 0:
		marks.Queue(deletePublishedSQL, versions)
	default:
		marks.Queue(markSentSQL, versions)
	}
	for _, p := range parked {
		tried := 0
		if p.attempted {
			tried = 1
		}
		marks.Queue(markParkedSQL, p.row.version, p.reason, tried)
	}
	marks.Queue("COMMIT")
	if err := execAll(cctx, conn, marks); err != nil {
		return 0, false, fmt.Errorf("mark rows: %w", err)
	}
	committed = true
	r.cursors.advance(claimed, published, parked)
	for _, p := range parked {
		outboxParked.WithLabelValues(p.kind).Inc()
		r.log.Error("outbox row parked: it will not be published until an operator requeues it",
			"outbox_id", p.row.id, "subject", p.row.subject, "tenant_id", p.row.tenantID, "reason", p.reason)
	}
	return len(published), pubErr == nil && len(claimed) == r.batch, pubErr
}

// startRelaySpan starts the span of a relay batch that claimed rows, "outbox publish":
// one per batch, not per row (the relay is on every change's way to its consumers), a
// trace of its own linked to the request that wrote each row (HeaderTraceparent), so an
// operator sees when and how fast the event of a request left for JetStream, and whether
// that batch failed. Rows of one request link once. With tracing off the rows'
// traceparents are not read (telemetry.StartRoot).
func startRelaySpan(ctx context.Context, claimed []outboxRow) trace.Span {
	traceparents := func(yield func(string) bool) {
		for _, o := range claimed {
			if !yield(o.headers[HeaderTraceparent]) {
				return
			}
		}
	}
	_, span := telemetry.StartRoot(ctx, "outbox publish", trace.SpanKindProducer, traceparents,
		attribute.String("messaging.system", "nats"), attribute.String("messaging.operation.name", "publish"),
		attribute.Int("messaging.batch.message_count", len(claimed)))
	return span
}

// endRelaySpan ends a relay batch's span with how many of its rows went out. A failure's
// status says only that it failed: its error may quote a row (a msg_id can hold a
// license key), and the relay's WARN line says why.
func endRelaySpan(span trace.Span, sent int, err error) {
	span.SetAttributes(attribute.Int("keyhouse.outbox.published", sent))
	if err != nil {
		span.SetStatus(codes.Error, "outbox relay batch failed")
	}
	span.End()
}

// readClaim reads the results of the claim batch: BEGIN, then claimSQL.
func readClaim(br pgx.BatchResults) ([]outboxRow, error) {
	if _, err := br.Exec(); err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	return collectClaim(rows)
}

// collectClaim reads claimSQL's rows.
func collectClaim(rows pgx.Rows) ([]outboxRow, error) {
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (outboxRow, error) {
		var o outboxRow
		err := row.Scan(&o.id, &o.tenantID, &o.subject, &o.msgID, &o.payload, &o.headers, &o.failures, &o.version)
		return o, err
	})
}

// execAll sends b in one round trip and fails on the first statement that failed (the
// server skips the rest, COMMIT included, so nothing is half written). A COMMIT that
// answers ROLLBACK is a failure too.
func execAll(ctx context.Context, conn *pgxpool.Conn, b *pgx.Batch) error {
	br := conn.SendBatch(ctx, b)
	for _, q := range b.QueuedQueries {
		tag, err := br.Exec()
		if err != nil {
			_ = br.Close()
			return err
		}
		if q.SQL == "COMMIT" && tag.String() != "COMMIT" {
			_ = br.Close()
			return fmt.Errorf("commit answered %s", tag)
		}
	}
	return br.Close()
}

// publishResult is what became of one claimed row's publish.
type publishResult struct {
	err      error
	tooLarge string // why the row was parked without trying: it exceeds MaxPayload
	notTried bool   // not published: NATS failed before its turn
}

// publishAll publishes the claimed rows in claim order without waiting for each ack, then
// waits for all of them (at most r.publishTimeout in all). Rows go to the server in that
// order on the one connection, so a tenant's rows reach the stream in id order unless
// one of them fails; relayBatch then stops that tenant's sequence at the failure.
func (r *Relay) publishAll(ctx context.Context, claimed []outboxRow) []publishResult {
	results := make([]publishResult, len(claimed))
	futures := make([]jetstream.PubAckFuture, len(claimed))
	limit := r.js.Conn().MaxPayload()
	stopped := false
	for i, o := range claimed {
		if stopped || ctx.Err() != nil {
			results[i].notTried = true
			continue
		}
		msg := o.message()
		if size := msgSize(msg); limit > 0 && int64(size) > limit {
			results[i].tooLarge = fmt.Sprintf("message of %d bytes exceeds the NATS max payload of %d bytes", size, limit)
			continue
		}
		f, err := r.js.PublishMsgAsync(msg, jetstream.WithMsgID(o.msgID))
		if err != nil {
			results[i].err = err
			// Not the row's own failure (not connected, too many pending acks): the rows
			// behind it would fail alike.
			stopped = !rowsOwnFailure(err)
			continue
		}
		futures[i] = f
	}
	deadline := time.NewTimer(r.publishTimeout)
	defer deadline.Stop()
	expired := false
	for i, f := range futures {
		if f == nil {
			continue
		}
		if expired {
			// Whatever has arrived by now counts; the rest timed out.
			select {
			case ack := <-f.Ok():
				r.noteDuplicate(ack)
			case err := <-f.Err():
				results[i].err = err
			default:
				results[i].err = errPublishTimeout
			}
			continue
		}
		select {
		case ack := <-f.Ok():
			r.noteDuplicate(ack)
		case err := <-f.Err():
			results[i].err = err
		case <-deadline.C:
			expired = true
			results[i].err = errPublishTimeout
		case <-ctx.Done():
			expired = true
			results[i].err = ctx.Err()
		}
	}
	return results
}

// errPublishTimeout is a publish whose ack did not come within WithPublishTimeout.
var errPublishTimeout = errors.New("no ack from the stream within the publish timeout")

func (r *Relay) noteDuplicate(ack *jetstream.PubAck) {
	if ack != nil && ack.Duplicate {
		r.log.Debug("outbox row was already in the stream", "stream", ack.Stream, "seq", ack.Sequence)
	}
}

// Park kinds, the values of keyhouse_outbox_parked_total's label.
const (
	parkTooLarge = "too_large"
	parkFailed   = "failed"
)

type parkedRow struct {
	row       outboxRow
	kind      string
	reason    string
	attempted bool // a publish was tried (and failed), not refused before trying
}

func (o outboxRow) message() *nats.Msg {
	msg := nats.NewMsg(o.subject)
	msg.Data = o.payload
	for k, v := range o.headers {
		msg.Header.Set(k, v)
	}
	msg.Header.Set(HeaderTenant, o.tenantID)
	// Set here (WithMsgID sets the same) so msgSize counts it.
	msg.Header.Set(jetstream.MsgIDHeader, o.msgID)
	return msg
}

// msgSize is what NATS holds against MaxPayload: the data and the encoded headers.
func msgSize(msg *nats.Msg) int { return msg.Size() - len(msg.Subject) - len(msg.Reply) }

// rowsOwnFailure tells a publish failure that is the row's own (retrying it alone cannot
// help for long: the stream refused this message) from one that is NATS's (unreachable,
// slow, restarting), after which every row would fail alike. Unknown errors count as
// NATS's: stopping and backing off is safe, while parking a row needs an operator.
func rowsOwnFailure(err error) bool {
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, nats.ErrMaxPayload), errors.Is(err, nats.ErrBadHeaderMsg),
		errors.Is(err, nats.ErrBadSubject), errors.Is(err, nats.ErrHeadersNotSupported):
		return true
	case errors.As(err, &apiErr):
		// The stream answered and refused this message (too large for the stream, a
		// subject it does not take …); 503 is JetStream itself unavailable.
		return apiErr.Code != 503
	}
	return false
}

// cleanup deletes rows sent before sentCutoff and rows parked before parkedCutoff, in
// chunks so no statement holds many locks.
func (r *Relay) cleanup(ctx context.Context, sentCutoff, parkedCutoff time.Time) (int64, error) {
	var total int64
	for _, q := range []struct {
		sql    string
		cutoff time.Time
	}{
		{`DELETE FROM outbox WHERE id IN (
			SELECT id FROM outbox WHERE sent_at < $1 ORDER BY sent_at LIMIT 1000)`, sentCutoff},
		{`DELETE FROM outbox WHERE id IN (
			SELECT id FROM outbox WHERE parked_at < $1 ORDER BY parked_at LIMIT 1000)`, parkedCutoff},
	} {
		for {
			tag, err := r.pool.Exec(ctx, q.sql, q.cutoff)
			if err != nil {
				return total, err
			}
			total += tag.RowsAffected()
			if tag.RowsAffected() < 1000 {
				break
			}
		}
	}
	return total, nil
}

// truncate cuts s to at most n bytes of valid UTF-8 (Postgres rejects invalid UTF-8).
func truncate(s string, n int) string {
	return strings.ToValidUTF8(s[:min(len(s), n)], "")
}
