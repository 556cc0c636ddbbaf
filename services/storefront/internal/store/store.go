// Package store is the storefront's SQL: webhooks, mappings, deliveries and the
// per-checkout-session fulfillment record, every query scoped by tenant (the callback's
// webhook lookup excepted: the webhook id is what tells the tenant).
package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/events"
	"github.com/keyhouse/keyhouse/pkg/idempotency"
	"github.com/keyhouse/keyhouse/pkg/natsx"
)

// Errors the handlers turn into API answers.
var (
	ErrNotFound  = errors.New("store: not found")
	ErrConflict  = errors.New("store: conflicts with an existing row")
	ErrNotActive = errors.New("store: webhook is not active")
)

// Webhook states.
const (
	StatePending  = "pending"
	StateActive   = "active"
	StateDisabled = "disabled"
)

// Outcomes of a delivery (api.md "Storefront webhook and mapping").
const (
	OutcomeIssued          = "issued"
	OutcomeProcessing      = "processing"
	OutcomeAwaitingPayment = "awaiting_payment"
	OutcomeUnmapped        = "unmapped"
	OutcomeOverQuota       = "over_quota"
	OutcomeInvalidInput    = "invalid_input"
	OutcomeError           = "error"
)

// Outcomes lists every outcome, for the deliveries filter.
var Outcomes = []string{OutcomeIssued, OutcomeProcessing, OutcomeAwaitingPayment, OutcomeUnmapped,
	OutcomeOverQuota, OutcomeInvalidInput, OutcomeError, OutcomeHeld, OutcomeExpirySet, OutcomeRenewed, OutcomeCanceled,
	OutcomeRevokedRefund, OutcomeRevokedDispute, OutcomeReactivated, OutcomeKept, OutcomeIgnored}

// Email statuses (addendum §4).
const (
	EmailPending = "pending"
	EmailSent    = "sent"
	EmailLogged  = "logged"
	EmailFailed  = "failed"
)

// EmailDelivered says the purchase's email went out (the SMTP server accepted it, or the
// log provider wrote it).
func EmailDelivered(status *string) bool {
	return status != nil && (*status == EmailSent || *status == EmailLogged)
}

// Store wraps the service's pool (search_path = storefront). A delivery whose outcome
// moves (to anything but processing) is storefront.delivery, emitted in the transaction
// of the move (pkg/events).
type Store struct {
	pool  *pgxpool.Pool
	spine *events.Spine
}

// New returns a Store on pool; spine may be nil (no post-commit path: the events are
// written all the same).
func New(pool *pgxpool.Pool, spine *events.Spine) *Store { return &Store{pool: pool, spine: spine} }

// Pool is the underlying pool (the outbox relay shares it).
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Webhook is a webhooks row.
type Webhook struct {
	ID, TenantID, Provider, State string
	SecretSealed                  []byte
	CreatedAt                     time.Time
}

const webhookCols = `id, tenant_id, provider, state, secret_sealed, created_at`

func scanWebhook(row pgx.Row) (*Webhook, error) {
	var w Webhook
	err := row.Scan(&w.ID, &w.TenantID, &w.Provider, &w.State, &w.SecretSealed, &w.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	return &w, err
}

// CreateWebhook inserts a pending webhook, unless the tenant already has an active one
// for the provider (ErrNotFound: no row was inserted); answer turns the new webhook into
// the call's answer. Under an Idempotency-Key (idemKey non-empty; pkg/idempotency) the
// answer is stored with the webhook, and a repeated request gets it back and inserts
// nothing.
func (s *Store) CreateWebhook(ctx context.Context, idemKey string, requestHash []byte, tenant, id, provider string,
	answer func(*Webhook) ([]byte, error)) ([]byte, error) {
	resp, _, err := idempotency.Do(ctx, s.pool, tenant, idemKey, requestHash, func(tx pgx.Tx) ([]byte, error) {
		w, err := scanWebhook(tx.QueryRow(ctx, `INSERT INTO webhooks (id, tenant_id, provider, state)
			SELECT $1, $2, $3, 'pending'
			WHERE NOT EXISTS (SELECT 1 FROM webhooks WHERE tenant_id = $2 AND provider = $3 AND state = 'active')
			RETURNING `+webhookCols, id, tenant, provider))
		if err != nil {
			return nil, err
		}
		return answer(w)
	})
	return resp, err
}

// Webhooks lists a tenant's webhooks, oldest first.
func (s *Store) Webhooks(ctx context.Context, tenant string) ([]*Webhook, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+webhookCols+` FROM webhooks WHERE tenant_id = $1 ORDER BY created_at, id`, tenant)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*Webhook
	for rows.Next() {
		w, err := scanWebhook(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, w)
	}
	return out, rows.Err()
}

// WebhookByID finds a webhook in any tenant (the callback).
func (s *Store) WebhookByID(ctx context.Context, id string) (*Webhook, error) {
	return scanWebhook(s.pool.QueryRow(ctx, `SELECT `+webhookCols+` FROM webhooks WHERE id = $1`, id))
}

// SaveSecret stores the sealed secret and makes the webhook active. ErrNotFound for
// another tenant's or an unknown id, ErrNotActive for a disabled one, ErrConflict when
// another webhook of the provider is active.
func (s *Store) SaveSecret(ctx context.Context, tenant, id string, sealed []byte) (*Webhook, error) {
	w, err := scanWebhook(s.pool.QueryRow(ctx, `UPDATE webhooks SET secret_sealed = $3, state = 'active', updated_at = now()
		WHERE tenant_id = $1 AND id = $2 AND state <> 'disabled' RETURNING `+webhookCols, tenant, id, sealed))
	if isUniqueViolation(err) {
		return nil, ErrConflict
	}
	if errors.Is(err, ErrNotFound) {
		if _, err := s.webhook(ctx, tenant, id); err != nil {
			return nil, err
		}
		return nil, ErrNotActive
	}
	return w, err
}

// Disable moves a webhook to disabled. ErrNotActive when it already is.
func (s *Store) Disable(ctx context.Context, tenant, id string) (*Webhook, error) {
	w, err := scanWebhook(s.pool.QueryRow(ctx, `UPDATE webhooks SET state = 'disabled', updated_at = now()
		WHERE tenant_id = $1 AND id = $2 AND state <> 'disabled' RETURNING `+webhookCols, tenant, id))
	if errors.Is(err, ErrNotFound) {
		if _, err := s.webhook(ctx, tenant, id); err != nil {
			return nil, err
		}
		return nil, ErrNotActive
	}
	return w, err
}

func (s *Store) webhook(ctx context.Context, tenant, id string) (*Webhook, error) {
	return scanWebhook(s.pool.QueryRow(ctx, `SELECT `+webhookCols+` FROM webhooks WHERE tenant_id = $1 AND id = $2`, tenant, id))
}

// Mapping is a mappings row.
type Mapping struct {
	ID                      int32
	TenantID                string
	PaymentLink, ServiceRef *string
	ProductID, Tier         string
	Seats                   int32
	Limits                  map[string]float64
	DurationDays            *int32
	CreatedAt               time.Time
	RenewalGraceDays        int32
	OnRefund                string
}

const mappingCols = `id, tenant_id, payment_link, service_ref, product_id, tier, seats, limits, duration_days, created_at,
	renewal_grace_days, on_refund`

func scanMapping(row pgx.Row) (*Mapping, error) {
	var m Mapping
	err := row.Scan(&m.ID, &m.TenantID, &m.PaymentLink, &m.ServiceRef, &m.ProductID, &m.Tier, &m.Seats, &m.Limits, &m.DurationDays, &m.CreatedAt,
		&m.RenewalGraceDays, &m.OnRefund)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	return &m, err
}

// MaxMappings bounds a tenant's storefront mappings, in the manner of its webhook endpoints
// and API keys: GET /v1/storefront/mappings lists them all, with no paging.
const MaxMappings = 200

// ErrTooManyMappings answers a create beyond MaxMappings.
var ErrTooManyMappings = apierr.Invalid("A tenant may have at most %d storefront mappings: delete one first", MaxMappings)

// CreateMapping inserts m; ErrConflict when its payment link or service_ref is mapped
// already. Under an Idempotency-Key (idemKey non-empty; pkg/idempotency) answer turns the
// new mapping into the answer stored with it, and a repeated request gets that stored
// answer back (replayed) and inserts nothing.
func (s *Store) CreateMapping(ctx context.Context, idemKey string, requestHash []byte, m *Mapping,
	answer func(*Mapping) ([]byte, error)) (resp []byte, replayed bool, err error) {
	return idempotency.Do(ctx, s.pool, m.TenantID, idemKey, requestHash, func(tx pgx.Tx) ([]byte, error) {
		// The count and the insert take turns per tenant, so creates at once, on any
		// replicas, cannot pass MaxMappings.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('storefront.mappings:' || $1, 0))`, m.TenantID); err != nil {
			return nil, err
		}
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM mappings WHERE tenant_id = $1`, m.TenantID).Scan(&n); err != nil {
			return nil, err
		}
		if n >= MaxMappings {
			return nil, ErrTooManyMappings
		}
		out, err := insertMapping(ctx, tx, m)
		if err != nil {
			return nil, err
		}
		return answer(out)
	})
}

func insertMapping(ctx context.Context, tx pgx.Tx, m *Mapping) (*Mapping, error) {
	limits := m.Limits
	if limits == nil {
		limits = map[string]float64{}
	}
	if m.OnRefund == "" {
		m.OnRefund = OnRefundRevoke
	}
	out, err := scanMapping(tx.QueryRow(ctx, `INSERT INTO mappings (tenant_id, payment_link, service_ref, product_id, tier, seats, limits, duration_days,
		renewal_grace_days, on_refund)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING `+mappingCols,
		m.TenantID, m.PaymentLink, m.ServiceRef, m.ProductID, m.Tier, m.Seats, limits, m.DurationDays, m.RenewalGraceDays, m.OnRefund))
	if isUniqueViolation(err) {
		return nil, ErrConflict
	}
	return out, err
}

// Mappings lists a tenant's mappings, oldest first.
func (s *Store) Mappings(ctx context.Context, tenant string) ([]*Mapping, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+mappingCols+` FROM mappings WHERE tenant_id = $1 ORDER BY id`, tenant)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*Mapping
	for rows.Next() {
		m, err := scanMapping(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

// DeleteMapping deletes one of the tenant's mappings.
func (s *Store) DeleteMapping(ctx context.Context, tenant string, id int32) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM mappings WHERE tenant_id = $1 AND id = $2`, tenant, id)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

// Delivery is a deliveries row.
type Delivery struct {
	ID                                      int32
	TenantID, WebhookID, EventID, EventType string
	CheckoutSessionID                       string
	PaymentLink, ServiceRef                 *string
	PaymentStatus                           string
	Customer                                *string
	SessionCreated                          time.Time
	Outcome                                 string
	EmailStatus, LicenseKey, Error          *string
	Receipts                                int32
	CreatedAt, UpdatedAt                    time.Time
	// Refs are the Stripe ids that name the purchase (lifecycle.go); Detail the fields of
	// the event the worker acts on (stripeevent.Detail as JSON).
	Refs   []string
	Detail []byte
}

const deliveryCols = `id, tenant_id, webhook_id, event_id, event_type, checkout_session_id, payment_link, service_ref,
	payment_status, customer, session_created, outcome, email_status, license_key, error, receipts, created_at, updated_at,
	refs, detail`

func scanDelivery(row pgx.Row) (*Delivery, error) {
	var d Delivery
	err := row.Scan(&d.ID, &d.TenantID, &d.WebhookID, &d.EventID, &d.EventType, &d.CheckoutSessionID, &d.PaymentLink,
		&d.ServiceRef, &d.PaymentStatus, &d.Customer, &d.SessionCreated, &d.Outcome, &d.EmailStatus, &d.LicenseKey,
		&d.Error, &d.Receipts, &d.CreatedAt, &d.UpdatedAt, &d.Refs, &d.Detail)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	return &d, err
}

// Recorded is what RecordEvent did.
type Recorded struct {
	Delivery *Delivery
	// Enqueued says a fulfillment message was written to the outbox.
	Enqueued bool
}

// RecordEvent stores a received event and, in the same transaction, the outbox message
// that asks the fulfillment worker to act on it (msg builds it from the delivery). A
// redelivered event (same event id) counts a receipt and is queued again unless it is
// still in progress or fully done, so a failed email is retried and 20 simultaneous
// copies queue one message.
func (s *Store) RecordEvent(ctx context.Context, d *Delivery, msg func(*Delivery) natsx.Message) (*Recorded, error) {
	var out Recorded
	err := s.spine.InTx(ctx, s.pool, func(ctx context.Context, tx pgx.Tx) error {
		adopted, err := linkPurchase(ctx, tx, d)
		if err != nil {
			return err
		}
		var inserted bool
		refs := d.Refs
		if refs == nil {
			refs = []string{}
		}
		row := tx.QueryRow(ctx, `INSERT INTO deliveries (tenant_id, webhook_id, event_id, event_type, checkout_session_id,
			payment_link, service_ref, payment_status, customer, session_created, outcome, error, refs, detail)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
			ON CONFLICT (tenant_id, event_id) DO UPDATE SET receipts = deliveries.receipts + 1
			RETURNING `+deliveryCols+`, (xmax = 0)`,
			d.TenantID, d.WebhookID, d.EventID, d.EventType, d.CheckoutSessionID, d.PaymentLink, d.ServiceRef,
			d.PaymentStatus, d.Customer, d.SessionCreated, d.Outcome, d.Error, refs, d.Detail)
		var rd Delivery
		if err := row.Scan(&rd.ID, &rd.TenantID, &rd.WebhookID, &rd.EventID, &rd.EventType, &rd.CheckoutSessionID,
			&rd.PaymentLink, &rd.ServiceRef, &rd.PaymentStatus, &rd.Customer, &rd.SessionCreated, &rd.Outcome,
			&rd.EmailStatus, &rd.LicenseKey, &rd.Error, &rd.Receipts, &rd.CreatedAt, &rd.UpdatedAt, &rd.Refs, &rd.Detail,
			&inserted); err != nil {
			return err
		}
		out.Delivery = &rd
		for _, a := range adopted {
			// A held event whose purchase is known now: the worker applies it.
			if err := natsx.Enqueue(ctx, tx, msg(a)); err != nil {
				return err
			}
			out.Enqueued = true
		}
		// A delivery recorded already settled (no mapping, bad input, ignored, held) is one.
		if inserted && rd.Outcome != OutcomeProcessing {
			if err := emitDelivery(ctx, tx, &rd); err != nil {
				return err
			}
		}
		if !needsWork(&rd, inserted) {
			return nil
		}
		out.Enqueued = true
		return natsx.Enqueue(ctx, tx, msg(&rd))
	})
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// staleProcessing is how long a delivery may sit in "processing" without the worker
// touching it (a retrying worker records each attempt) before a redelivery of its event
// queues it again: its message was lost (a NATS store wiped, a stream purged by hand).
const staleProcessing = 10 * time.Minute

// needsWork decides whether a received event goes to the worker.
func needsWork(d *Delivery, inserted bool) bool {
	switch {
	case inserted:
		return d.Outcome == OutcomeProcessing
	case d.Outcome == OutcomeProcessing:
		// Queued already: the first receipt's message will do it, unless it was lost.
		return time.Since(d.UpdatedAt) > staleProcessing
	case d.Outcome == OutcomeInvalidInput, d.Outcome == OutcomeHeld, finalLifecycle[d.Outcome]:
		return false
	case d.Outcome == OutcomeIssued:
		return !EmailDelivered(d.EmailStatus)
	}
	return true // awaiting_payment, unmapped, over_quota, error: try again
}

// Delivery reads one delivery.
func (s *Store) Delivery(ctx context.Context, tenant string, id int32) (*Delivery, error) {
	return scanDelivery(s.pool.QueryRow(ctx, `SELECT `+deliveryCols+` FROM deliveries WHERE tenant_id = $1 AND id = $2`, tenant, id))
}

// DeliveryFilter narrows the deliveries list; "" matches every value.
type DeliveryFilter struct {
	Outcome, CheckoutSessionID, Customer string
}

// Deliveries lists a tenant's deliveries newest first, those f matches, with the total
// count.
func (s *Store) Deliveries(ctx context.Context, tenant string, f DeliveryFilter, limit, offset int) ([]*Delivery, int, error) {
	const where = `tenant_id = $1 AND ($2 = '' OR outcome = $2) AND ($3 = '' OR checkout_session_id = $3)
		AND ($4 = '' OR customer = $4)`
	var total int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM deliveries WHERE `+where,
		tenant, f.Outcome, f.CheckoutSessionID, f.Customer).Scan(&total); err != nil {
		return nil, 0, err
	}
	rows, err := s.pool.Query(ctx, `SELECT `+deliveryCols+` FROM deliveries WHERE `+where+`
		ORDER BY id DESC LIMIT $5 OFFSET $6`, tenant, f.Outcome, f.CheckoutSessionID, f.Customer, limit, offset)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	out := []*Delivery{}
	for rows.Next() {
		d, err := scanDelivery(rows)
		if err != nil {
			return nil, 0, err
		}
		out = append(out, d)
	}
	return out, total, rows.Err()
}

// Fulfillment is the per-checkout-session record.
type Fulfillment struct {
	TenantID, CheckoutSessionID string
	Request                     []byte
	LicenseKey, EmailStatus     *string
	Terms                       Terms
}

// Session is one checkout session held under its lock: a worker that has it is the only
// one acting on that session, on any replica, until Unlock. Writes through it commit at
// once, so what is done is recorded before the next step starts (a crash between two
// steps resumes from the last recorded one).
type Session struct {
	conn    *pgxpool.Conn
	spine   *events.Spine
	tenant  string
	session string
}

// LockSession waits for the session's lock (a Postgres advisory lock held by one pooled
// connection; a crash releases it with the connection) and returns it.
func (s *Store) LockSession(ctx context.Context, tenant, session string) (*Session, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(hashtextextended('storefront-session:' || $1 || ':' || $2, 0))`,
		tenant, session); err != nil {
		// The lock may have been granted after ctx ended: never hand this conn back.
		_ = conn.Conn().Close(context.Background())
		conn.Release()
		return nil, fmt.Errorf("lock checkout session: %w", err)
	}
	return &Session{conn: conn, spine: s.spine, tenant: tenant, session: session}, nil
}

// Unlock releases the lock and the connection.
func (x *Session) Unlock() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := x.conn.Exec(ctx, `SELECT pg_advisory_unlock(hashtextextended('storefront-session:' || $1 || ':' || $2, 0))`,
		x.tenant, x.session); err != nil {
		_ = x.conn.Conn().Close(ctx)
	}
	x.conn.Release()
}

// Fulfillment reads (creating when absent) the session's record.
func (x *Session) Fulfillment(ctx context.Context) (*Fulfillment, error) {
	f := Fulfillment{TenantID: x.tenant, CheckoutSessionID: x.session}
	// One round trip: the no-op update makes RETURNING yield an existing row too.
	err := x.conn.QueryRow(ctx, `INSERT INTO fulfillments (tenant_id, checkout_session_id) VALUES ($1, $2)
		ON CONFLICT (tenant_id, checkout_session_id) DO UPDATE SET tenant_id = EXCLUDED.tenant_id
		RETURNING request, license_key, email_status, `+termsCols, x.tenant, x.session).Scan(
		append([]any{&f.Request, &f.LicenseKey, &f.EmailStatus}, f.Terms.scanTerms()...)...)
	return &f, err
}

// SetRequest fixes the IssueLicense request of the session.
func (x *Session) SetRequest(ctx context.Context, req []byte) error {
	_, err := x.conn.Exec(ctx, `UPDATE fulfillments SET request = $3, updated_at = now()
		WHERE tenant_id = $1 AND checkout_session_id = $2`, x.tenant, x.session, req)
	return err
}

// Issued records the license and marks the delivery and the session's deliveries that
// were waiting for payment issued, email pending.
func (x *Session) Issued(ctx context.Context, deliveryID int32, key string) error {
	return x.inTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE fulfillments SET license_key = $3, updated_at = now()
			WHERE tenant_id = $1 AND checkout_session_id = $2`, x.tenant, x.session, key); err != nil {
			return err
		}
		return setOutcomes(ctx, tx, `outcome = 'issued', license_key = $4, email_status = 'pending', error = NULL`,
			`checkout_session_id = $2 AND (id = $3 OR outcome = 'awaiting_payment')`, x.tenant, x.session, deliveryID, key)
	})
}

// inTx runs fn in a transaction on the session's connection, with the spine's post-commit
// path after it.
func (x *Session) inTx(ctx context.Context, fn func(ctx context.Context, tx pgx.Tx) error) error {
	ctx, done := x.spine.Track(ctx)
	err := pgx.BeginFunc(ctx, x.conn, func(tx pgx.Tx) error { return fn(ctx, tx) })
	done(err)
	return err
}

// setOutcomes updates the tenant's ($1) deliveries matching where with set, and emits
// storefront.delivery for each whose outcome moved to anything but processing.
func setOutcomes(ctx context.Context, tx pgx.Tx, set, where string, args ...any) error {
	rows, err := tx.Query(ctx, `WITH target AS (
			SELECT id, outcome AS before FROM deliveries WHERE tenant_id = $1 AND `+where+` FOR UPDATE)
		UPDATE deliveries d SET `+set+`, updated_at = now() FROM target
		WHERE d.tenant_id = $1 AND d.id = target.id
		RETURNING d.id, d.tenant_id, d.checkout_session_id, d.outcome, d.license_key, target.before`, args...)
	if err != nil {
		return err
	}
	type moved struct {
		d      Delivery
		before string
	}
	changed, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (moved, error) {
		var m moved
		err := row.Scan(&m.d.ID, &m.d.TenantID, &m.d.CheckoutSessionID, &m.d.Outcome, &m.d.LicenseKey, &m.before)
		return m, err
	})
	if err != nil {
		return err
	}
	slices.SortFunc(changed, func(a, b moved) int { return cmp.Compare(a.d.ID, b.d.ID) })
	for _, m := range changed {
		if m.d.Outcome != m.before && m.d.Outcome != OutcomeProcessing {
			if err := emitDelivery(ctx, tx, &m.d); err != nil {
				return err
			}
		}
	}
	return nil
}

// emitDelivery is storefront.delivery for d as it now stands.
func emitDelivery(ctx context.Context, tx pgx.Tx, d *Delivery) error {
	return events.Emit(ctx, tx, events.StorefrontDelivery(d.TenantID, strconv.Itoa(int(d.ID)), d.CheckoutSessionID, d.Outcome, d.LicenseKey))
}

// EmailDone records that the session's email went out (status sent or logged), on the
// session and on each of its deliveries that carries the license.
func (x *Session) EmailDone(ctx context.Context, status string) error {
	return pgx.BeginFunc(ctx, x.conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE fulfillments SET email_status = $3, updated_at = now()
			WHERE tenant_id = $1 AND checkout_session_id = $2`, x.tenant, x.session, status); err != nil {
			return err
		}
		// The checkout's deliveries: those of later events (renewals, refunds) send no email.
		_, err := tx.Exec(ctx, `UPDATE deliveries SET email_status = $3, error = NULL, updated_at = now()
			WHERE tenant_id = $1 AND checkout_session_id = $2 AND license_key IS NOT NULL
			AND event_type LIKE 'checkout.session.%'`, x.tenant, x.session, status)
		return err
	})
}

// SetOutcome records a delivery's outcome (and, for issued, its key and email status).
func (x *Session) SetOutcome(ctx context.Context, deliveryID int32, outcome string, key, emailStatus, errText *string) error {
	return x.inTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		return setOutcomes(ctx, tx, `outcome = $3, license_key = $4, email_status = $5, error = $6`, `id = $2`,
			x.tenant, deliveryID, outcome, key, emailStatus, errText)
	})
}

// CloseAwaiting settles the session's deliveries still waiting for payment with outcome
// and error (a failed delayed payment).
func (x *Session) CloseAwaiting(ctx context.Context, outcome, errText string) error {
	return x.inTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		return setOutcomes(ctx, tx, `outcome = $3, error = $4`, `checkout_session_id = $2 AND outcome = 'awaiting_payment'`,
			x.tenant, x.session, outcome, errText)
	})
}

// Match is MatchMapping on the session's connection.
func (x *Session) Match(ctx context.Context, paymentLink, serviceRef *string) (*Mapping, error) {
	return scanMapping(x.conn.QueryRow(ctx, `SELECT `+mappingCols+` FROM mappings
		WHERE tenant_id = $1 AND (payment_link = $2 OR service_ref = $3)
		ORDER BY (payment_link IS NULL), id LIMIT 1`, x.tenant, paymentLink, serviceRef))
}

// Delivery reads a delivery on the session's connection.
func (x *Session) Delivery(ctx context.Context, id int32) (*Delivery, error) {
	return scanDelivery(x.conn.QueryRow(ctx, `SELECT `+deliveryCols+` FROM deliveries WHERE tenant_id = $1 AND id = $2`, x.tenant, id))
}

func isUniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505"
}
