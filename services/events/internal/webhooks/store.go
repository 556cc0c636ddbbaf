package webhooks

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/keyhouse/keyhouse/pkg/events"
	"github.com/keyhouse/keyhouse/pkg/idempotency"
	"github.com/keyhouse/keyhouse/pkg/telemetry"
)

// MaxEndpoints is how many endpoints one tenant may have.
const MaxEndpoints = 16

// Store errors the handlers turn into answers.
var (
	ErrNotFound      = errors.New("not found")
	ErrEndpointLimit = errors.New("endpoint limit reached")
	// ErrOldSecretLimit: a roll would leave more than MaxOldSecrets old secrets signing.
	ErrOldSecretLimit = errors.New("old secret limit reached")
)

// Endpoint is a tenant's webhook endpoint as the API shows it (the secrets are never in
// it: they are read only by the worker and shown only when created or rolled).
type Endpoint struct {
	TenantID       string
	ID             string
	URL            string
	Events         []string
	Description    *string
	Enabled        bool
	DisabledReason *string
	CreatedAt      time.Time
}

// Attempt is one try of a delivery, as the delivery log shows it.
type Attempt struct {
	At         time.Time `json:"at"`
	StatusCode *int      `json:"status_code"`
	Error      *string   `json:"error"`
	DurationMS int64     `json:"duration_ms"`
}

// Delivery statuses.
const (
	StatusPending   = "pending"
	StatusSucceeded = "succeeded"
	StatusFailed    = "failed"
)

// Delivery is one event on its way to one endpoint.
type Delivery struct {
	TenantID      string
	ID            string
	EventID       string
	EventType     string
	EndpointID    string
	Status        string
	Attempts      []Attempt
	NextAttemptAt *time.Time
	CreatedAt     time.Time
}

// Store keeps endpoints and deliveries in the events schema. Every time it writes comes
// from the caller (the service's clock), so schedules can be tested with an injected one.
type Store struct {
	db *pgxpool.Pool
}

// NewStore returns a Store on the events schema's pool.
func NewStore(db *pgxpool.Pool) *Store { return &Store{db: db} }

// newID returns prefix + 24 hex digits (96 random bits).
func newID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// NewSecret returns a fresh endpoint secret: whsec_ and 256 random bits. The whole
// string is the HMAC key, as with Stripe's.
func NewSecret() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return "whsec_" + base64.RawURLEncoding.EncodeToString(b[:])
}

const endpointColumns = `tenant_id, id, url, events, description, enabled, disabled_reason, created_at`

func scanEndpoint(row pgx.Row) (*Endpoint, error) {
	var e Endpoint
	err := row.Scan(&e.TenantID, &e.ID, &e.URL, &e.Events, &e.Description, &e.Enabled, &e.DisabledReason, &e.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	e.CreatedAt = e.CreatedAt.UTC()
	return &e, nil
}

// NewEndpoint is what a create stores.
type NewEndpoint struct {
	URL          string
	Events       []string
	Description  *string
	SealedSecret []byte
}

// CreateEndpoint stores an endpoint unless the tenant has MaxEndpoints already; answer
// turns it into the call's answer. The count and the insert run under a per-tenant lock,
// so concurrent creates cannot pass the limit. Under an Idempotency-Key (idem.Key
// non-empty) the answer, which shows the signing secret, is stored sealed with the
// endpoint (idempotency.DoSealed), and a repeated request gets it back and creates nothing.
func (s *Store) CreateEndpoint(ctx context.Context, idem Idempotency, tenant string, n NewEndpoint, now time.Time,
	answer func(*Endpoint) ([]byte, error)) ([]byte, error) {
	resp, _, err := idempotency.DoSealed(ctx, s.db, idem.Keys, tenant, idem.Key, idem.RequestHash, func(tx pgx.Tx) ([]byte, error) {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('webhook_endpoints:' || $1, 0))`, tenant); err != nil {
			return nil, err
		}
		var count int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM webhook_endpoints WHERE tenant_id = $1`, tenant).Scan(&count); err != nil {
			return nil, err
		}
		if count >= MaxEndpoints {
			return nil, ErrEndpointLimit
		}
		ep, err := scanEndpoint(tx.QueryRow(ctx, `
			INSERT INTO webhook_endpoints (tenant_id, id, url, events, description, secret, created_at)
			VALUES ($1, $2, $3, $4, NULLIF($5, ''), $6, $7)
			RETURNING `+endpointColumns,
			tenant, newID("we_"), n.URL, n.Events, n.Description, n.SealedSecret, now))
		if err != nil {
			return nil, err
		}
		return answer(ep)
	})
	return resp, err
}

// Idempotency is the Idempotency-Key a create runs under (pkg/idempotency, addendum §8):
// Key "" when none was sent. Keys seals the stored answer, which shows the endpoint's
// secret once, under the installation keyring.
type Idempotency struct {
	Keys        idempotency.Keys
	Key         string
	RequestHash []byte
}

// ListEndpoints returns the tenant's endpoints, oldest first.
func (s *Store) ListEndpoints(ctx context.Context, tenant string) ([]Endpoint, error) {
	rows, err := s.db.Query(ctx, `SELECT `+endpointColumns+` FROM webhook_endpoints WHERE tenant_id = $1 ORDER BY created_at, id`, tenant)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Endpoint
	for rows.Next() {
		e, err := scanEndpoint(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, *e)
	}
	return out, rows.Err()
}

// GetEndpoint returns one of the tenant's endpoints, or ErrNotFound.
func (s *Store) GetEndpoint(ctx context.Context, tenant, id string) (*Endpoint, error) {
	return scanEndpoint(s.db.QueryRow(ctx, `SELECT `+endpointColumns+` FROM webhook_endpoints WHERE tenant_id = $1 AND id = $2`, tenant, id))
}

// EndpointUpdate holds the fields an update changes; nil leaves a field as it is. A
// Description of "" clears it (null): the REST body's null cannot be told from an absent
// field, so "" is how a description is removed, as "" removes a license's notes.
type EndpointUpdate struct {
	URL         *string
	Events      []string
	Description *string
	Enabled     *bool
}

// UpdateEndpoint changes the given fields. Enabling clears the reason it was disabled and
// its failure streak; disabling by request leaves no reason.
func (s *Store) UpdateEndpoint(ctx context.Context, tenant, id string, u EndpointUpdate) (*Endpoint, error) {
	return scanEndpoint(s.db.QueryRow(ctx, `
		UPDATE webhook_endpoints SET
			url = coalesce($3, url),
			events = coalesce($4, events),
			description = CASE WHEN $5::boolean THEN NULLIF($6, '') ELSE description END,
			enabled = coalesce($7, enabled),
			disabled_reason = CASE WHEN $7 IS NULL THEN disabled_reason ELSE NULL END,
			failing_since = CASE WHEN $7 THEN NULL ELSE failing_since END
		WHERE tenant_id = $1 AND id = $2
		RETURNING `+endpointColumns,
		tenant, id, u.URL, u.Events, u.Description != nil, u.Description, u.Enabled))
}

// MaxOldSecrets is how many superseded secrets of one endpoint may still be signing at
// once (each until the end its roll promised), besides the current one: a delivery
// carries at most MaxOldSecrets+1 signatures.
const MaxOldSecrets = 4

// RollSecret makes sealed the endpoint's secret. The current one keeps signing until
// oldExpires (none when oldExpires is not after now), and every secret an earlier roll
// kept keeps signing until its own end. ErrOldSecretLimit when keeping the current one
// would make more than MaxOldSecrets old secrets sign; a roll that keeps none is never
// refused, so a secret can always be replaced at once.
//
// The endpoint's old_secret columns, all a process of the release before reads, get the
// newest superseded secret still signing, so such a process signs with it during a
// rolling upgrade; a secret one of them left there (a roll it made) is taken into
// webhook_endpoint_old_secrets first, to keep its end too.
//
// answer turns the rolled endpoint into the call's answer. Under an Idempotency-Key
// (idem.Key non-empty) that answer, which shows the new secret, is stored sealed with the
// roll (idempotency.DoSealed), as a create's is: a repeated request gets it back and rolls
// nothing, so a retry neither loses the secret shown nor uses another old-secret slot.
func (s *Store) RollSecret(ctx context.Context, idem Idempotency, tenant, id string, sealed []byte, now, oldExpires time.Time,
	answer func(*Endpoint) ([]byte, error)) ([]byte, error) {
	resp, _, err := idempotency.DoSealed(ctx, s.db, idem.Keys, tenant, idem.Key, idem.RequestHash, func(tx pgx.Tx) ([]byte, error) {
		ep, err := s.rollSecret(ctx, tx, tenant, id, sealed, now, oldExpires)
		if err != nil {
			return nil, err
		}
		return answer(ep)
	})
	return resp, err
}

func (s *Store) rollSecret(ctx context.Context, tx pgx.Tx, tenant, id string, sealed []byte, now, oldExpires time.Time) (*Endpoint, error) {
	// The endpoint's row lock serializes its rolls, so concurrent ones cannot pass the
	// limit together.
	var exists bool
	err := tx.QueryRow(ctx, `SELECT true FROM webhook_endpoints WHERE tenant_id = $1 AND id = $2 FOR UPDATE`, tenant, id).Scan(&exists)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	if _, err := tx.Exec(ctx, `
		INSERT INTO webhook_endpoint_old_secrets (tenant_id, endpoint_id, secret, superseded_at, expires_at)
		SELECT tenant_id, id, old_secret, $3, old_secret_expires_at FROM webhook_endpoints e
		WHERE tenant_id = $1 AND id = $2 AND old_secret_expires_at > $3 AND NOT EXISTS (
			SELECT FROM webhook_endpoint_old_secrets o
			WHERE o.tenant_id = e.tenant_id AND o.endpoint_id = e.id AND o.secret = e.old_secret)`,
		tenant, id, now); err != nil {
		return nil, err
	}
	if _, err := tx.Exec(ctx, `DELETE FROM webhook_endpoint_old_secrets WHERE tenant_id = $1 AND endpoint_id = $2 AND expires_at <= $3`, tenant, id, now); err != nil {
		return nil, err
	}
	if oldExpires.After(now) {
		var live int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM webhook_endpoint_old_secrets WHERE tenant_id = $1 AND endpoint_id = $2`, tenant, id).Scan(&live); err != nil {
			return nil, err
		}
		if live >= MaxOldSecrets {
			return nil, ErrOldSecretLimit
		}
		if _, err := tx.Exec(ctx, `
			INSERT INTO webhook_endpoint_old_secrets (tenant_id, endpoint_id, secret, superseded_at, expires_at)
			SELECT tenant_id, id, secret, $3, $4 FROM webhook_endpoints WHERE tenant_id = $1 AND id = $2`,
			tenant, id, now, oldExpires); err != nil {
			return nil, err
		}
	}
	// No row left: the sub-select sets both columns to NULL.
	return scanEndpoint(tx.QueryRow(ctx, `
		UPDATE webhook_endpoints SET
			secret = $3,
			(old_secret, old_secret_expires_at) = (
				SELECT o.secret, o.expires_at FROM webhook_endpoint_old_secrets o
				WHERE o.tenant_id = $1 AND o.endpoint_id = $2
				ORDER BY o.superseded_at DESC, o.expires_at DESC LIMIT 1)
		WHERE tenant_id = $1 AND id = $2
		RETURNING `+endpointColumns,
		tenant, id, sealed))
}

// DeleteEndpoint removes an endpoint and its deliveries.
func (s *Store) DeleteEndpoint(ctx context.Context, tenant, id string) error {
	tag, err := s.db.Exec(ctx, `DELETE FROM webhook_endpoints WHERE tenant_id = $1 AND id = $2`, tenant, id)
	if err == nil && tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return err
}

// Fanout creates, in the transaction that stores a new event, one pending delivery per
// enabled endpoint of the tenant subscribed to its type, due at once. It returns how many.
func (s *Store) Fanout(ctx context.Context, tx pgx.Tx, tenant, eventID, eventType string, body []byte, now time.Time) (int, error) {
	return s.FanoutAll(ctx, tx, []NewEvent{{TenantID: tenant, ID: eventID, Type: eventType, Body: body}}, now)
}

// NewEvent is an event just stored in the log, to fan out.
type NewEvent struct {
	TenantID, ID, Type string
	Body               []byte
	// Traceparent is the one the event's message carried (natsx.HeaderTraceparent): the
	// request that caused the event. Its deliveries keep it, and each attempt's span links
	// to it; "" for none.
	Traceparent string
}

// FanoutAll is Fanout for a batch of events: one query for the endpoints of their
// tenants and one statement for all their deliveries.
func (s *Store) FanoutAll(ctx context.Context, tx pgx.Tx, evs []NewEvent, now time.Time) (int, error) {
	tenants := make([]string, 0, len(evs))
	for _, ev := range evs {
		if !slices.Contains(tenants, ev.TenantID) {
			tenants = append(tenants, ev.TenantID)
		}
	}
	rows, err := tx.Query(ctx, `SELECT tenant_id, id, events FROM webhook_endpoints WHERE tenant_id = ANY($1) AND enabled`, tenants)
	if err != nil {
		return 0, err
	}
	type endpoint struct {
		id   string
		subs []string
	}
	byTenant := map[string][]endpoint{}
	for rows.Next() {
		var tenant string
		var ep endpoint
		if err := rows.Scan(&tenant, &ep.id, &ep.subs); err != nil {
			rows.Close()
			return 0, err
		}
		byTenant[tenant] = append(byTenant[tenant], ep)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	var dTenants, dIDs, dEndpoints, dEvents, dTypes, dTraces []string
	var dBodies [][]byte
	for _, ev := range evs {
		for _, ep := range byTenant[ev.TenantID] {
			if Matches(ep.subs, ev.Type) {
				dTenants, dIDs, dEndpoints = append(dTenants, ev.TenantID), append(dIDs, newID("whd_")), append(dEndpoints, ep.id)
				dEvents, dTypes, dBodies = append(dEvents, ev.ID), append(dTypes, ev.Type), append(dBodies, ev.Body)
				dTraces = append(dTraces, ev.Traceparent)
			}
		}
	}
	if len(dIDs) == 0 {
		return 0, nil
	}
	if _, err := tx.Exec(ctx, `
		INSERT INTO webhook_deliveries (tenant_id, id, endpoint_id, event_id, event_type, body, traceparent, next_attempt_at, created_at)
		SELECT tenant_id, id, endpoint_id, event_id, event_type, body, NULLIF(traceparent, ''), $8, $8
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bytea[], $7::text[])
			AS d(tenant_id, id, endpoint_id, event_id, event_type, body, traceparent)
		ON CONFLICT (tenant_id, endpoint_id, event_id) WHERE NOT redelivery DO NOTHING`,
		dTenants, dIDs, dEndpoints, dEvents, dTypes, dBodies, dTraces, now); err != nil {
		return 0, err
	}
	return len(dIDs), nil
}

// Enqueue creates one delivery of an event to one endpoint of the tenant: a ping, or a
// redelivery. ErrNotFound when the endpoint is not the tenant's. The delivery keeps the
// traceparent of ctx's span (the request that asked for it), which its attempts' spans
// link to.
func (s *Store) Enqueue(ctx context.Context, tenant, endpointID, eventID, eventType string, body []byte, redelivery bool, now time.Time) (*Delivery, error) {
	return scanDelivery(s.db.QueryRow(ctx, `
		INSERT INTO webhook_deliveries (tenant_id, id, endpoint_id, event_id, event_type, body, redelivery, traceparent, next_attempt_at, created_at)
		SELECT tenant_id, $3, id, $4, $5, $6, $7, NULLIF($9, ''), $8, $8 FROM webhook_endpoints WHERE tenant_id = $1 AND id = $2
		RETURNING `+deliveryColumns,
		tenant, endpointID, newID("whd_"), eventID, eventType, body, redelivery, now, telemetry.Traceparent(ctx)))
}

// deliveryColumns shows a claimed delivery's next attempt as its lease's end, as when the
// claim moved next_attempt_at itself (greatest ignores a NULL).
const deliveryColumns = `tenant_id, id, event_id, event_type, endpoint_id, status, attempts, greatest(next_attempt_at, leased_until), created_at`

func scanDelivery(row pgx.Row) (*Delivery, error) {
	var d Delivery
	var attempts []byte
	err := row.Scan(&d.TenantID, &d.ID, &d.EventID, &d.EventType, &d.EndpointID, &d.Status, &attempts, &d.NextAttemptAt, &d.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(attempts, &d.Attempts); err != nil {
		return nil, err
	}
	d.CreatedAt = d.CreatedAt.UTC()
	if d.NextAttemptAt != nil {
		t := d.NextAttemptAt.UTC()
		d.NextAttemptAt = &t
	}
	for i := range d.Attempts {
		// Attempts recorded before attemptJSON cut them to the microsecond, too.
		d.Attempts[i].At = d.Attempts[i].At.UTC().Truncate(time.Microsecond)
	}
	return &d, nil
}

// DeliveryFilter selects a page of an endpoint's deliveries, newest first.
type DeliveryFilter struct {
	Status        string // "" for all
	StartingAfter string // a delivery id: the page after it
	Limit         int
}

// ListDeliveries returns a page of the endpoint's deliveries and whether more follow.
// ErrNotFound when the endpoint, or the starting_after delivery, is not the tenant's.
func (s *Store) ListDeliveries(ctx context.Context, tenant, endpointID string, f DeliveryFilter) ([]Delivery, bool, error) {
	if _, err := s.GetEndpoint(ctx, tenant, endpointID); err != nil {
		return nil, false, err
	}
	return s.listDeliveries(ctx, tenant, "endpoint_id", endpointID, f)
}

// ListEventDeliveries returns a page of one event's deliveries, to every endpoint, and
// whether more follow. ErrNotFound when the starting_after delivery is not one of them.
func (s *Store) ListEventDeliveries(ctx context.Context, tenant, eventID string, f DeliveryFilter) ([]Delivery, bool, error) {
	return s.listDeliveries(ctx, tenant, "event_id", eventID, f)
}

// listDeliveries is a page of the deliveries whose column (endpoint_id or event_id, each
// indexed with tenant_id) is value, newest first.
func (s *Store) listDeliveries(ctx context.Context, tenant, column, value string, f DeliveryFilter) ([]Delivery, bool, error) {
	after := int64(-1)
	if f.StartingAfter != "" {
		err := s.db.QueryRow(ctx, `SELECT seq FROM webhook_deliveries WHERE tenant_id = $1 AND `+column+` = $2 AND id = $3`,
			planEachTime, tenant, value, f.StartingAfter).Scan(&after)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, false, ErrNotFound
		}
		if err != nil {
			return nil, false, err
		}
	}
	rows, err := s.db.Query(ctx, `
		SELECT `+deliveryColumns+` FROM webhook_deliveries
		WHERE tenant_id = $1 AND `+column+` = $2 AND ($3 = '' OR status = $3) AND ($4 < 0 OR seq < $4)
		ORDER BY seq DESC LIMIT $5`,
		tenant, value, f.Status, after, f.Limit+1)
	if err != nil {
		return nil, false, err
	}
	out, err := collectDeliveries(rows)
	if err != nil {
		return nil, false, err
	}
	more := len(out) > f.Limit
	if more {
		out = out[:f.Limit]
	}
	return out, more, nil
}

// DeleteDeliveriesBefore deletes the deliveries whose event was created before t
// (EVENT_RETENTION, as the log's events) and reports how many. A delivery goes with its
// event, however late it was made: a redelivery's body is a copy of the event, so it must
// not outlive it; one whose event is no longer in the log (swept meanwhile) goes too. A
// ping, in no log, goes by its own created_at. A pending delivery goes only once it was
// also created before pendingBefore (the end of its retries), so a retention shorter than
// the retry window never drops a delivery webhooks.md promises to keep trying: no copy of
// an event outlives it by more than the retry window (EVENT_RETENTION + 72 h in all).
func (s *Store) DeleteDeliveriesBefore(ctx context.Context, t, pendingBefore time.Time) (int64, error) {
	tag, err := s.db.Exec(ctx, `DELETE FROM webhook_deliveries d
		WHERE (status <> $3 OR created_at < $2) AND CASE
			WHEN event_type = $4 THEN created_at < $1
			ELSE NOT EXISTS (SELECT FROM events e WHERE e.tenant_id = d.tenant_id AND e.id = d.event_id AND e.created_at >= $1)
		END`, t, pendingBefore, StatusPending, events.TypePing)
	return tag.RowsAffected(), err
}

func collectDeliveries(rows pgx.Rows) ([]Delivery, error) {
	defer rows.Close()
	var out []Delivery
	for rows.Next() {
		d, err := scanDelivery(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, *d)
	}
	return out, rows.Err()
}
