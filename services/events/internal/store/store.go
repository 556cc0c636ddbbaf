// Package store is the events schema's SQL: the event log. Every read is scoped by the
// tenant; a row is written once (by event id) and deleted only by the retention sweep;
// only Redact changes one (its personal data, never its id, type, time or key).
package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/keyhouse/keyhouse/pkg/events"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
)

// ErrNotFound: no such event in the tenant's log.
var ErrNotFound = errors.New("event not found")

// Store reads and writes the events schema.
type Store struct{ db *pgxpool.Pool }

// New returns a Store on db (search_path = events).
func New(db *pgxpool.Pool) *Store { return &Store{db: db} }

// DB is the pool, for the transactions that store an event (ingest).
func (s *Store) DB() *pgxpool.Pool { return s.db }

// Event is one row of the log.
type Event struct {
	ID, TenantID, Type string
	// LicenseKey: "" when the event is about no license.
	LicenseKey string
	CreatedAt  time.Time
	// Body is the event's JSON as listed and delivered.
	Body []byte
}

// appendLock is the advisory lock that serializes the log's appends: InsertAll takes it
// before its rows take their seq, and the transaction keeps it until it has committed or
// rolled back (migration 00050). A transaction that lists an event therefore sees every
// event of lower seq, and no event stored later takes a lower seq than a listed one: the
// order GET /v1/events pages in is the order events became visible.
const appendLock = `pg_advisory_xact_lock(hashtextextended('events.log.append', 0))`

// lateAfter: an event whose seq is more than this past its created_at (in microseconds)
// is late, stored after events created more than this after it (migration 00050).
const lateAfter = time.Second

// InsertAll stores in tx, in one statement, those of evs whose id is not stored yet, and
// returns the ids it stored (the others were redeliveries, and nothing changed). It takes
// the log's append lock (appendLock), held until tx ends: call it last in tx but for
// what must commit with the events (the fan-out).
//
// Each event's seq is its created_at in microseconds, or one more than the seq before it
// when that is higher (the last seq given, kept in the sequence events_seq, then the
// event before it in this call), so seq only grows and is never below created_at. The
// events of one call take their seqs in created_at order (then id): the events of one
// change, stamped in order, are listed in order whichever order the stream brought them
// in.
func InsertAll(ctx context.Context, tx pgx.Tx, evs []Event) (map[string]bool, error) {
	if len(evs) == 0 {
		return map[string]bool{}, nil
	}
	evs = slices.Clone(evs)
	slices.SortStableFunc(evs, func(a, b Event) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), strings.Compare(a.ID, b.ID))
	})
	ids := make([]string, len(evs))
	tenants := make([]string, len(evs))
	types := make([]string, len(evs))
	keys := make([]string, len(evs))
	ats := make([]time.Time, len(evs))
	micros := make([]int64, len(evs))
	bodies := make([][]byte, len(evs))
	for i, ev := range evs {
		at := ev.CreatedAt.Truncate(time.Microsecond) // what Postgres keeps
		ids[i], tenants[i], types[i], keys[i], ats[i], micros[i], bodies[i] = ev.ID, ev.TenantID, ev.Type, ev.LicenseKey, at, at.UnixMicro(), ev.Body
	}
	// One round trip: the lock, then the rows. Row n (from 1) of the call takes
	// seq = n + max(last, max over m <= n of (us_m - m)), the closed form of
	// seq_n = max(seq_(n-1) + 1, us_n) from seq_0 = last; events_seq moves to the highest.
	var batch pgx.Batch
	batch.Queue(`SELECT ` + appendLock)
	batch.Queue(`WITH e AS (
			SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::timestamptz[], $6::bigint[], $7::bytea[])
				WITH ORDINALITY AS e(id, tenant_id, type, license_key, created_at, us, body, n)),
		s AS (
			SELECT e.*, n + GREATEST(c.last, max(us - n) OVER (ORDER BY n)) AS seq
			FROM e, (SELECT CASE WHEN is_called THEN last_value ELSE 0 END AS last FROM events_seq) AS c),
		clock AS (SELECT setval('events_seq', max(seq)) FROM s)
		INSERT INTO events (id, tenant_id, type, license_key, created_at, body, seq, late)
		SELECT id, tenant_id, type, NULLIF(license_key, ''), created_at, body, seq, seq - us > $8
		FROM s, clock
		ORDER BY n
		ON CONFLICT (id) DO NOTHING RETURNING id`,
		ids, tenants, types, keys, ats, micros, bodies, lateAfter.Microseconds())
	results := tx.SendBatch(ctx, &batch)
	defer results.Close()
	if _, err := results.Exec(); err != nil {
		return nil, err
	}
	rows, err := results.Query()
	if err != nil {
		return nil, err
	}
	stored, err := collectSet(rows)
	if err != nil {
		return nil, err
	}
	return stored, results.Close()
}

// collectSet reads rows of one text column into a set.
func collectSet(rows pgx.Rows) (map[string]bool, error) {
	list, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	set := make(map[string]bool, len(list))
	for _, v := range list {
		set[v] = true
	}
	return set, nil
}

// Get returns the tenant's event id (ErrNotFound).
func (s *Store) Get(ctx context.Context, tenant, id string) (Event, error) {
	return scan(s.db.QueryRow(ctx, `SELECT `+columns+` FROM events WHERE id = $1 AND tenant_id = $2`, id, tenant))
}

// Filter selects events for the log route. Zero values select everything.
type Filter struct {
	// Type is an exact type, or a prefix when it ends in ".".
	Type       string
	LicenseKey string
	// Since and Until bound created_at (inclusive); zero: no bound.
	Since, Until time.Time
	// StartingAfter is an event id of the tenant: the page holds the events older than it.
	StartingAfter string
	Limit         int
}

// ErrUnknownCursor: StartingAfter names no event of the tenant.
var ErrUnknownCursor = errors.New("unknown starting_after")

const columns = `id, tenant_id, type, COALESCE(license_key, ''), created_at, body`

func scan(row pgx.Row) (Event, error) {
	var e Event
	err := row.Scan(&e.ID, &e.TenantID, &e.Type, &e.LicenseKey, &e.CreatedAt, &e.Body)
	if errors.Is(err, pgx.ErrNoRows) {
		return Event{}, ErrNotFound
	}
	return e, err
}

// List returns up to f.Limit of the tenant's events matching f, newest first, and
// whether more follow. Newest is the order events reached the log (seq, InsertAll), not
// created_at: a reader that pages down with StartingAfter to the newest event it saw the
// time before sees every event once (docs/events.md, "Following the log").
func (s *Store) List(ctx context.Context, tenant string, f Filter) ([]Event, bool, error) {
	query, args, err := s.listQuery(ctx, tenant, f)
	if err != nil {
		return nil, false, err
	}
	rows, err := s.db.Query(ctx, query, args...)
	if err != nil {
		return nil, false, err
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Event, error) { return scan(row) })
	if err != nil {
		return nil, false, err
	}
	if len(out) > f.Limit {
		return out[:f.Limit], true, nil
	}
	return out, false, nil
}

// listQuery is List's statement and its arguments: one more row than f.Limit, so that
// List knows whether more follow. Every event has seq >= its created_at (in
// microseconds), so since bounds seq from below too; an event that is not late has seq at
// most lateAfter past its created_at, so until bounds the seq of those from above, and the
// late ones are read from their own index: each part reads its index from where its page
// starts, never the events above until or below since.
func (s *Store) listQuery(ctx context.Context, tenant string, f Filter) (string, []any, error) {
	where := []string{"tenant_id = $1"}
	args := []any{tenant}
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, fmt.Sprintf(cond, len(args)))
	}
	switch {
	case f.Type == "":
	case strings.HasSuffix(f.Type, "."):
		add("starts_with(type, $%d)", f.Type)
	default:
		add("type = $%d", f.Type)
	}
	if f.LicenseKey != "" {
		add("license_key = $%d", f.LicenseKey)
	}
	if !f.Since.IsZero() {
		// created_at holds microseconds and Postgres is sent Since truncated to them, so a
		// Since inside a microsecond starts at the next one, or the event at the microsecond
		// before would pass. (Until truncated bounds the same events as Until.)
		since := f.Since.Truncate(time.Microsecond)
		if since.Before(f.Since) {
			since = since.Add(time.Microsecond)
		}
		add("created_at >= $%d", since)
		add("seq >= $%d", since.UnixMicro())
	}
	if !f.Until.IsZero() {
		add("created_at <= $%d", f.Until)
	}
	if f.StartingAfter != "" {
		var seq int64
		err := s.db.QueryRow(ctx, `SELECT seq FROM events WHERE id = $1 AND tenant_id = $2`, f.StartingAfter, tenant).Scan(&seq)
		if errors.Is(err, pgx.ErrNoRows) {
			return "", nil, ErrUnknownCursor
		}
		if err != nil {
			return "", nil, err
		}
		add("seq < $%d", seq)
	}
	args = append(args, f.Limit+1)
	limit := fmt.Sprintf(` ORDER BY seq DESC LIMIT $%d`, len(args))
	cond := strings.Join(where, " AND ")
	if f.Until.IsZero() {
		return `SELECT ` + columns + ` FROM events WHERE ` + cond + limit, args, nil
	}
	args = append(args, f.Until.UnixMicro()+lateAfter.Microseconds())
	const part = `SELECT id, tenant_id, type, license_key, created_at, body, seq FROM events WHERE `
	return `SELECT ` + columns + ` FROM ((` + part + cond + fmt.Sprintf(` AND NOT late AND seq <= $%d`, len(args)) + limit +
		`) UNION ALL (` + part + cond + ` AND late` + limit + `)) AS u` + limit, args, nil
}

// DeleteBefore deletes the events created before cutoff, in chunks so no statement holds
// many locks, and returns how many went.
func (s *Store) DeleteBefore(ctx context.Context, cutoff time.Time) (int64, error) {
	var total int64
	for {
		tag, err := s.db.Exec(ctx, `DELETE FROM events WHERE id IN (
			SELECT id FROM events WHERE created_at < $1 ORDER BY created_at LIMIT 1000)`, cutoff)
		if err != nil {
			return total, err
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < 1000 {
			return total, nil
		}
	}
}

// Redacted is what Redact changed.
type Redacted struct{ Events, Deliveries int }

// Redact replaces the personal data (events.PersonalFields) of the tenant's events about
// license key (canonical, as stored) with null, in the log and in every stored webhook
// delivery of them, in one transaction, and counts the rows it changed: an event or a
// delivery redacted before is not changed again, so concurrent calls for one key add up
// to the rows there were. The deliveries are those of the key's events in the log, and
// those whose event is no longer in it (a pending one outlives its event for its retries:
// webhooks.Store.DeleteDeliveriesBefore), found by the key in their body. Rows are locked
// in one order (the events, then the deliveries, each by id), so concurrent calls wait for
// one another and never deadlock. Only the tenant's rows are read: another tenant's
// license with the same key is not touched.
func (s *Store) Redact(ctx context.Context, tenant, key string) (Redacted, error) {
	var n Redacted
	types := events.PersonalTypes()
	err := s.InTx(ctx, func(tx pgx.Tx) error {
		var err error
		n.Events, err = redactRows(ctx, tx, "events", `
			SELECT id, body FROM events WHERE tenant_id = $1 AND license_key = $2 AND type = ANY($3)
			ORDER BY id FOR UPDATE`, tenant, key, types)
		if err != nil {
			return err
		}
		n.Deliveries, err = redactRows(ctx, tx, "webhook_deliveries", `
			SELECT id, body FROM webhook_deliveries d WHERE tenant_id = $1 AND event_type = ANY($3) AND (
				event_id IN (SELECT id FROM events WHERE tenant_id = $1 AND license_key = $2)
				OR (NOT EXISTS (SELECT FROM events e WHERE e.tenant_id = d.tenant_id AND e.id = d.event_id)
					AND convert_from(body, 'UTF8')::jsonb #>> '{data,key}' = $2))
			ORDER BY id FOR UPDATE`, tenant, key, types)
		return err
	})
	return n, err
}

// redactRows redacts the bodies of the rows of table (tenant_id $1) that query selects
// (id, body, locked) and returns how many it changed.
func redactRows(ctx context.Context, tx pgx.Tx, table, query string, args ...any) (int, error) {
	rows, err := tx.Query(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	type row struct {
		ID   string
		Body []byte
	}
	all, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	if err != nil {
		return 0, err
	}
	var ids []string
	var bodies [][]byte
	for _, r := range all {
		body, changed, err := events.Redact(r.Body)
		if err != nil {
			return 0, fmt.Errorf("%s %s: %w", table, r.ID, err)
		}
		if changed {
			ids, bodies = append(ids, r.ID), append(bodies, body)
		}
	}
	if len(ids) == 0 {
		return 0, nil
	}
	_, err = tx.Exec(ctx, `UPDATE `+table+` t SET body = r.body FROM unnest($2::text[], $3::bytea[]) AS r(id, body)
		WHERE t.tenant_id = $1 AND t.id = r.id`, args[0], ids, bodies)
	return len(ids), err
}

// InTx runs fn in a transaction of the events schema.
func (s *Store) InTx(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgxx.InTx(ctx, s.db, fn)
}
