package webhooks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/keyhouse/keyhouse/pkg/pgxx"
	"github.com/keyhouse/keyhouse/pkg/webhook"
)

// Due is a claimed delivery with what its attempt needs.
type Due struct {
	TenantID   string
	ID         string
	EndpointID string
	EventID    string
	EventType  string
	Body       []byte
	// Traceparent is what caused the delivery (NewEvent.Traceparent, Enqueue): the
	// attempt's span links to it. "" for none.
	Traceparent string
	CreatedAt   time.Time
	URL         string
	Secret      []byte // sealed
	// OldSecrets are the superseded secrets still signing (sealed), each until the end
	// its roll promised; none when no roll overlaps.
	OldSecrets [][]byte
	// At is the delivery's place in its endpoint's due order when it was claimed: the
	// lane's cursor (ClaimNext).
	At Cursor
	// Version is where the claim left the row (its ctid): the attempt's result finds it
	// there, by a plan no table statistics can change (planEachTime).
	Version pgtype.TID
	// Tries is how many attempts the delivery had when it was claimed; while the row is
	// at Version, it still has.
	Tries int
}

// Cursor is a place in an endpoint's due deliveries, ordered by (next_attempt_at, seq):
// the index webhook_deliveries_due_seq's order. seq makes it name one delivery, though
// the deliveries of one fan-out batch share their due time. The zero Cursor is the front.
type Cursor struct {
	DueAt time.Time
	Seq   int64
}

// dueColumns is what a claim returns of a delivery (d) and its endpoint (e), $1 being the
// claim's now; scanDue reads it. The old secrets still signing are the endpoint's rows of
// webhook_endpoint_old_secrets and its old_secret, which a roll by a process of the
// release before writes (RollSecret); UNION drops the one both hold.
const dueColumns = `d.tenant_id, d.id, d.endpoint_id, d.event_id, d.event_type, d.body, coalesce(d.traceparent, ''), d.created_at, e.url, e.secret,
	ARRAY(SELECT s.secret FROM (
		SELECT o.secret, o.expires_at FROM webhook_endpoint_old_secrets o
		WHERE o.tenant_id = e.tenant_id AND o.endpoint_id = e.id AND o.expires_at > $1
		UNION
		SELECT e.old_secret, e.old_secret_expires_at WHERE e.old_secret_expires_at > $1
	) s ORDER BY s.expires_at DESC), d.next_attempt_at, d.seq, d.ctid,
	jsonb_array_length(d.attempts)`

func scanDue(row pgx.Row, d *Due) error {
	return row.Scan(&d.TenantID, &d.ID, &d.EndpointID, &d.EventID, &d.EventType, &d.Body, &d.Traceparent, &d.CreatedAt, &d.URL, &d.Secret, &d.OldSecrets, &d.At.DueAt, &d.At.Seq, &d.Version, &d.Tries)
}

// A pending delivery is due when its next attempt's time has come and no claim's lease
// runs ($1 being the claim's now). The lease is in leased_until, which no index names, so
// a claim is a HOT update: it writes a version of the row on the same page and no index
// entry (moving next_attempt_at wrote the row, body included, into every index again).
// The claimed row keeps its entry in the due index, where the claims after it skip it.
const dueWhere = `d.status = 'pending' AND d.next_attempt_at <= $1 AND (d.leased_until IS NULL OR d.leased_until <= $1)`

// Bounds are what a claim may take for this process.
type Bounds struct {
	// Total is how many deliveries the claim may take: the process's free slots.
	Total int
	// PerEndpoint and PerTenant bound the attempts the process runs at once to one
	// endpoint and for one tenant, those already in flight (InFlight) included.
	PerEndpoint, PerTenant int
}

// InFlight counts the attempts a process is running: per endpoint id and per tenant id.
type InFlight struct {
	Endpoints, Tenants map[string]int
}

// claimSQL is Claim's statement. $1 is the claim's now, $2 Bounds.Total, $3
// Bounds.PerEndpoint, $4 Bounds.PerTenant, $5-$8 InFlight, $9 the lease.
//
// candidates are each enabled endpoint's oldest due deliveries, as many as its bound and
// its tenant's leave room for, read without a lock. Each tenant's candidates take turns
// round robin over its endpoints (each endpoint's oldest first, then each one's second,
// ...), a tenant's first turn being its attempts in flight plus one: the claim goes down
// the turns of every tenant at once, oldest due first within a turn, so a tenant with
// nothing in flight comes before any other tenant's second attempt, and a tenant with a
// backlog cannot keep the others waiting; past PerTenant a tenant gets no turn. Only then
// are the deliveries locked, in turn order, until Total are (SKIP LOCKED: a delivery
// another replica is claiming at the same moment is passed over for the next turn). Locked
// while read, every candidate of every endpoint would be locked before the turns are
// known, where only Total of them are taken.
//
// The lock finds a candidate again by its version (ctid), a TID scan, the plan no table
// statistics can change (see planEachTime); a version that changed since the read is
// followed to the newest, where the due test is applied again.
const claimSQL = `
	WITH busy_endpoints AS (SELECT * FROM unnest($5::text[], $6::int[]) AS b(endpoint_id, n)),
	busy_tenants AS (SELECT * FROM unnest($7::text[], $8::int[]) AS b(tenant_id, n)),
	candidates AS (
		SELECT d.tenant_id, d.id, d.ctid, d.next_attempt_at, d.seq, coalesce(bt.n, 0) AS tenant_busy,
			row_number() OVER (PARTITION BY d.tenant_id, d.endpoint_id ORDER BY d.next_attempt_at, d.seq) AS endpoint_turn
		FROM webhook_endpoints e
		LEFT JOIN busy_endpoints be ON be.endpoint_id = e.id
		LEFT JOIN busy_tenants bt ON bt.tenant_id = e.tenant_id
		CROSS JOIN LATERAL (
			SELECT d.tenant_id, d.id, d.ctid, d.endpoint_id, d.next_attempt_at, d.seq FROM webhook_deliveries d
			WHERE d.tenant_id = e.tenant_id AND d.endpoint_id = e.id AND ` + dueWhere + `
			ORDER BY d.next_attempt_at, d.seq
			LIMIT greatest(least($3 - coalesce(be.n, 0), $4 - coalesce(bt.n, 0)), 0)
		) d
		WHERE e.enabled
	),
	turns AS MATERIALIZED (
		SELECT * FROM (
			SELECT tenant_id, id, ctid, next_attempt_at, seq,
				tenant_busy + row_number() OVER (PARTITION BY tenant_id ORDER BY endpoint_turn, next_attempt_at, seq) AS turn
			FROM candidates
		) t
		WHERE turn <= $4
		ORDER BY turn, next_attempt_at, seq
	),
	picked AS (
		SELECT d.tenant_id, d.id, d.ctid
		FROM turns t
		CROSS JOIN LATERAL (
			SELECT d.tenant_id, d.id, d.ctid FROM webhook_deliveries d
			WHERE d.ctid = t.ctid AND d.tenant_id = t.tenant_id AND d.id = t.id AND ` + dueWhere + `
			FOR UPDATE OF d SKIP LOCKED
		) d
		LIMIT $2
	)
	UPDATE webhook_deliveries d SET leased_until = $1::timestamptz + $9::interval
	FROM picked p, webhook_endpoints e
	WHERE d.ctid = p.ctid AND d.tenant_id = p.tenant_id AND d.id = p.id AND e.tenant_id = d.tenant_id AND e.id = d.endpoint_id
	RETURNING ` + dueColumns

// Claim takes due deliveries of enabled endpoints for this process, within b: at most
// b.Total in all, and, counting what this process already has in flight (busy), at most
// b.PerEndpoint at once to one endpoint and b.PerTenant for one tenant, so one slow
// endpoint, or one tenant's many, never hold every worker. The slots are shared fairly
// between tenants (claimSQL). A claimed delivery is leased for lease: if the process dies
// before recording the attempt, the delivery is due again when the lease runs out (at
// least once).
func (s *Store) Claim(ctx context.Context, now time.Time, lease time.Duration, b Bounds, busy InFlight) ([]Due, error) {
	endpointIDs, endpointN := counts(busy.Endpoints)
	tenantIDs, tenantN := counts(busy.Tenants)
	var out []Due
	err := pgxx.InTx(ctx, s.db, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, claimSQL, now, b.Total, b.PerEndpoint, b.PerTenant, endpointIDs, endpointN, tenantIDs, tenantN, lease)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var d Due
			if err := scanDue(rows, &d); err != nil {
				return err
			}
			out = append(out, d)
		}
		return rows.Err()
	})
	return out, err
}

// counts is a map of counts as the two arrays a statement unnests.
func counts(m map[string]int) ([]string, []int32) {
	ids := make([]string, 0, len(m))
	n := make([]int32, 0, len(m))
	for id, c := range m {
		ids = append(ids, id)
		n = append(n, int32(c))
	}
	return ids, n
}

// claimNextSQL is ClaimNext's statement: the first due delivery after the cursor ($5,
// $6) and, only when there is none, the first from the front (the NOT EXISTS is a
// one-time filter, so the second scan runs only then). One statement, one round trip.
const claimNextSQL = `
	WITH after_cursor AS (
		SELECT d.tenant_id, d.id, d.ctid FROM webhook_deliveries d
		WHERE d.tenant_id = $3 AND d.endpoint_id = $4 AND ` + dueWhere + `
		  AND (d.next_attempt_at, d.seq) > ($5::timestamptz, $6::bigint)
		ORDER BY d.next_attempt_at, d.seq
		LIMIT 1
		FOR UPDATE OF d SKIP LOCKED
	), from_front AS (
		SELECT d.tenant_id, d.id, d.ctid FROM webhook_deliveries d
		WHERE NOT EXISTS (SELECT FROM after_cursor)
		  AND d.tenant_id = $3 AND d.endpoint_id = $4 AND ` + dueWhere + `
		ORDER BY d.next_attempt_at, d.seq
		LIMIT 1
		FOR UPDATE OF d SKIP LOCKED
	), picked AS (
		SELECT * FROM after_cursor UNION ALL SELECT * FROM from_front
	)
	UPDATE webhook_deliveries d SET leased_until = $1::timestamptz + $2::interval
	FROM picked p, webhook_endpoints e
	WHERE d.ctid = p.ctid AND d.tenant_id = p.tenant_id AND d.id = p.id AND e.tenant_id = d.tenant_id AND e.id = d.endpoint_id AND e.enabled
	RETURNING ` + dueColumns

// ClaimNext takes the endpoint's next due delivery, if any, for a worker that has just
// delivered to it and keeps its slot (Worker's lanes). It is one statement, so one round
// trip: the claim of a busy endpoint's deliveries no longer waits for the worker's single
// claiming loop, one round trip per delivery. A disabled endpoint has nothing due.
//
// after is the lane's cursor (the At of the delivery it just made): the delivery after it
// in due order is taken, and the front's only when there is none after it. The
// oldest-first scan of the endpoint's due index otherwise starts at its front, where
// every delivery made since the last vacuum left an entry pointing at a dead row version
// (a success writes a new version, outside the due index); while any transaction of the
// database is older than those versions, Postgres cannot mark the entries dead, and each
// claim read them all again. With the cursor the scan starts where the lane left off. A
// delivery due before the cursor (a retry that came due, a fan-out that committed late)
// is taken when the cursor finds nothing, by the worker's own claim, or by a lane's
// claim from the front (the zero Cursor) every laneRescanEvery claims.
func (s *Store) ClaimNext(ctx context.Context, now time.Time, lease time.Duration, tenantID, endpointID string, after Cursor) (Due, bool, error) {
	var d Due
	ok, err := scanClaimed(s.db.QueryRow(ctx, claimNextSQL, claimNextArgs(now, lease, tenantID, endpointID, after)...), &d)
	return d, ok, err
}

func claimNextArgs(now time.Time, lease time.Duration, tenantID, endpointID string, after Cursor) []any {
	dueAt := after.DueAt
	if dueAt.IsZero() {
		dueAt = time.Unix(0, 0) // before any due time this service writes; seq starts at 1
	}
	return []any{now, lease, tenantID, endpointID, dueAt, after.Seq}
}

// scanClaimed reads ClaimNext's answer: the delivery claimed, or none due.
func scanClaimed(row pgx.Row, d *Due) (bool, error) {
	err := scanDue(row, d)
	if errors.Is(err, pgx.ErrNoRows) {
		*d = Due{}
		return false, nil
	}
	return err == nil, err
}

// SucceedThenClaimNext is a lane's hot path in one round trip: it records d's successful
// attempt (res), as Record does, and claims the endpoint's next due delivery, as
// ClaimNext does, in one pipeline. The pipeline is one implicit transaction, so when it
// fails the success is then recorded on its own before the error is returned: a failed
// claim never takes the success with it.
func (s *Store) SucceedThenClaimNext(ctx context.Context, d Due, res webhook.Result, now time.Time, lease time.Duration, after Cursor) (next Due, ok bool, err error) {
	attempt, err := attemptJSON(res)
	if err != nil {
		return Due{}, false, err
	}
	var ended int
	b := &pgx.Batch{}
	b.Queue(recordSuccessSQL, d.TenantID, d.ID, attempt, d.Version).QueryRow(func(row pgx.Row) error { return row.Scan(&ended) })
	b.Queue(claimNextSQL, claimNextArgs(now, lease, d.TenantID, d.EndpointID, after)...).QueryRow(func(row pgx.Row) (err error) {
		ok, err = scanClaimed(row, &next)
		return err
	})
	if batchErr := s.db.SendBatch(ctx, b).Close(); batchErr != nil {
		if err := s.recordSuccess(ctx, d, attempt); err != nil {
			return Due{}, false, err
		}
		return Due{}, false, batchErr
	}
	if ended == 0 {
		return next, ok, s.recordSuccessByKey(ctx, d, attempt)
	}
	return next, ok, nil
}

// A prepared statement keeps the generic plan its connection chose after five runs until
// the table is next analyzed. Chosen while webhook_deliveries was a page or two (a new
// deployment's first deliveries), where every index that starts with tenant_id costs
// the same as the primary key, the plan of a lookup by (tenant_id, id) could take
// webhook_deliveries_by_event and read every delivery of the tenant per success and per
// lane claim until autovacuum's first ANALYZE: 30-60 ms statements holding row locks the
// other lanes waited on, a minute or more of a backlog that only grew. So the hot
// statements find a claimed row by its version (ctid): the claims join their locked
// rows by it, and a success updates the version its claim left. A TID scan is the
// cheapest plan at any table size, so no statistics can change it, and the statements
// stay prepared (planning ClaimNext each time cost 0.4 ms, twice its execution).
//
// planEachTime runs the rarer lookups by key unprepared (pgx's unnamed statement, its
// description cached: still one round trip), so Postgres plans them for their
// arguments every time instead of settling on a generic plan.
const planEachTime = pgx.QueryExecModeCacheDescribe

// recordSuccessSQL ends a delivery ($1, $2) at the version its claim left ($4) with its
// attempt ($3) and its endpoint's failure streak, in one statement (one round trip:
// successes are most attempts), and counts the delivery it ended. A delivery no longer
// pending (its endpoint deleted, or another attempt recorded first) is left alone: the
// UPDATE rechecks the status under the row's lock. A row that moved since its claim (a
// lease that ran out and another claim) is not at $4 any more, nor is it when a
// concurrent change commits first (Postgres rechecks the TID on the newest version):
// recordSuccessByKeySQL then finds it by key.
//
// The pending test is written as "neither succeeded nor failed" (the same, by the
// table's CHECK), not status = 'pending': that would match the due index's predicate,
// and on a table whose statistics lag behind its churn the planner took the due index and
// read every pending delivery of the tenant to find this one.
var recordSuccessSQL = recordSuccessWhere("ctid = $4 AND tenant_id = $1 AND id = $2")

// recordSuccessByKeySQL is recordSuccessSQL for a row found by its key (planEachTime).
var recordSuccessByKeySQL = recordSuccessWhere("tenant_id = $1 AND id = $2")

// recordSuccessWhere is the success statement for the delivery that find names.
func recordSuccessWhere(find string) string {
	return `
	WITH done AS (
		UPDATE webhook_deliveries SET status = 'succeeded', next_attempt_at = NULL, leased_until = NULL, attempts = attempts || $3
		WHERE ` + find + ` AND status <> 'succeeded' AND status <> 'failed'
		RETURNING tenant_id, endpoint_id),
	streak AS (
		UPDATE webhook_endpoints e SET failing_since = NULL
		FROM done WHERE e.tenant_id = done.tenant_id AND e.id = done.endpoint_id AND e.failing_since IS NOT NULL)
	SELECT count(*) FROM done`
}

// recordSuccess ends a delivery (recordSuccessSQL).
func (s *Store) recordSuccess(ctx context.Context, d Due, attempt []byte) error {
	var ended int
	if err := s.db.QueryRow(ctx, recordSuccessSQL, d.TenantID, d.ID, attempt, d.Version).Scan(&ended); err != nil || ended == 1 {
		return err
	}
	return s.recordSuccessByKey(ctx, d, attempt)
}

// recordSuccessByKey is recordSuccess for a row that moved since its claim.
func (s *Store) recordSuccessByKey(ctx context.Context, d Due, attempt []byte) error {
	var ended int
	return s.db.QueryRow(ctx, recordSuccessByKeySQL, planEachTime, d.TenantID, d.ID, attempt).Scan(&ended)
}

// DisabledReason is the disabled_reason of an endpoint the worker disabled.
const DisabledReason = "Every delivery failed for 72 hours"

// OnDisable runs in the transaction that disables an endpoint (to record its
// webhook_endpoint.disabled event with the change).
type OnDisable func(ctx context.Context, tx pgx.Tx, ep *Endpoint) error

// attemptJSON is an attempt's result as appended to its delivery's attempts.
func attemptJSON(res webhook.Result) ([]byte, error) {
	// To the microsecond, as every other time of the API (Postgres keeps no finer): an
	// attempt's at had nine fractional digits beside its delivery's six.
	a := Attempt{At: res.At.UTC().Truncate(time.Microsecond), DurationMS: res.Duration.Milliseconds()}
	if res.StatusCode != 0 {
		a.StatusCode = &res.StatusCode
	}
	if res.Error != "" {
		a.Error = &res.Error
	}
	return json.Marshal([]Attempt{a})
}

// Record writes an attempt's result: success ends the delivery and the endpoint's failure
// streak; a failure schedules the next attempt, or fails the delivery when the schedule's
// window is over, and disables the endpoint once every delivery has failed for the
// window (disableAfter). It returns the endpoint when this attempt disabled it.
func (s *Store) Record(ctx context.Context, d Due, res webhook.Result, sched webhook.Schedule, disableAfter time.Duration, onDisable OnDisable) (*Endpoint, error) {
	attempt, err := attemptJSON(res)
	if err != nil {
		return nil, err
	}
	if res.Succeeded() {
		return nil, s.recordSuccess(ctx, d, attempt)
	}
	// The claim's version and tries, or, for a row that moved since its claim (a lease
	// that ran out and another claim), where it is now and how many tries it has: the
	// statement writes only at the version its tries were read at, so it is recorded once,
	// with the schedule's next attempt for that count.
	version, tries := d.Version, d.Tries
	for range recordFailureRounds {
		status, next := StatusFailed, (*time.Time)(nil)
		if t, ok := sched.Next(tries+1, d.CreatedAt, res.At); ok {
			status, next = StatusPending, &t
		}
		var ended int
		var since *time.Time
		var enabled *bool
		if err := s.db.QueryRow(ctx, recordFailureSQL, d.TenantID, d.ID, attempt, version, status, next, res.At).Scan(&ended, &since, &enabled); err != nil {
			return nil, err
		}
		if ended == 1 {
			if since == nil || enabled == nil || !*enabled || res.At.Sub(*since) < disableAfter {
				return nil, nil // the streak goes on (or the endpoint is gone, or disabled)
			}
			var disabled *Endpoint
			err := pgxx.InTx(ctx, s.db, func(tx pgx.Tx) (err error) {
				disabled, err = disable(ctx, tx, d.TenantID, d.EndpointID, res.At.Add(-disableAfter), onDisable)
				return err
			})
			return disabled, err
		}
		var pending bool
		err := s.db.QueryRow(ctx, `SELECT ctid, jsonb_array_length(attempts), status = 'pending' FROM webhook_deliveries WHERE tenant_id = $1 AND id = $2`,
			planEachTime, d.TenantID, d.ID).Scan(&version, &tries, &pending)
		if errors.Is(err, pgx.ErrNoRows) || (err == nil && !pending) {
			return nil, nil // its endpoint was deleted meanwhile, or another attempt ended it
		}
		if err != nil {
			return nil, err
		}
	}
	return nil, fmt.Errorf("webhooks: delivery %s changed %d times while its failed attempt was recorded", d.ID, recordFailureRounds)
}

// recordFailureRounds bounds how often a failed attempt's record follows its row to a new
// version (each round is a change of the row by another writer since the last).
const recordFailureRounds = 5

// recordFailureSQL records a failed attempt ($3) of a delivery ($1, $2) at the version its
// claim left ($4): its new status and next attempt ($5, $6, computed from the tries the
// claim read, exact while the row is at $4), and the start of its endpoint's failure
// streak ($7 unless one runs), in one statement. It answers how many deliveries it
// ended (0: the row moved or is no longer pending, and nothing was written), and the
// endpoint's streak start and enabled flag (null: the endpoint is gone).
const recordFailureSQL = `
	WITH done AS (
		UPDATE webhook_deliveries SET status = $5, next_attempt_at = $6, leased_until = NULL, attempts = attempts || $3
		WHERE ctid = $4 AND tenant_id = $1 AND id = $2 AND status <> 'succeeded' AND status <> 'failed'
		RETURNING tenant_id, endpoint_id),
	streak AS (
		UPDATE webhook_endpoints e SET failing_since = coalesce(e.failing_since, $7)
		FROM done WHERE e.tenant_id = done.tenant_id AND e.id = done.endpoint_id
		RETURNING e.failing_since, e.enabled)
	SELECT (SELECT count(*) FROM done), (SELECT failing_since FROM streak), (SELECT enabled FROM streak)`

// disable disables an endpoint whose failure streak began at or before cutoff and that is
// still enabled, in tx with its onDisable; nil when it no longer qualifies (a success
// ended the streak, or another attempt disabled it first).
func disable(ctx context.Context, tx pgx.Tx, tenantID, endpointID string, cutoff time.Time, onDisable OnDisable) (*Endpoint, error) {
	disabled, err := scanEndpoint(tx.QueryRow(ctx, `
		UPDATE webhook_endpoints SET enabled = false, disabled_reason = $3
		WHERE tenant_id = $1 AND id = $2 AND enabled AND failing_since <= $4 RETURNING `+endpointColumns,
		tenantID, endpointID, DisabledReason, cutoff))
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if onDisable != nil {
		if err := onDisable(ctx, tx, disabled); err != nil {
			return nil, err
		}
	}
	return disabled, nil
}
