// Package store is the events schema's SQL: the event log. Every read is scoped by the
// tenant; a row is written once (by event id) and deleted only by the retention sweep.
package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
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

// InsertAll stores in tx, in one statement, those of evs whose id is not stored yet, and
// returns the ids it stored (the others were redeliveries, and nothing changed).
func InsertAll(ctx context.Context, tx pgx.Tx, evs []Event) (map[string]bool, error) {
	ids := make([]string, len(evs))
	tenants := make([]string, len(evs))
	types := make([]string, len(evs))
	keys := make([]string, len(evs))
	ats := make([]time.Time, len(evs))
	bodies := make([][]byte, len(evs))
	for i, ev := range evs {
		ids[i], tenants[i], types[i], keys[i], ats[i], bodies[i] = ev.ID, ev.TenantID, ev.Type, ev.LicenseKey, ev.CreatedAt, ev.Body
	}
	rows, err := tx.Query(ctx, `INSERT INTO events (id, tenant_id, type, license_key, created_at, body)
		SELECT id, tenant_id, type, NULLIF(license_key, ''), created_at, body
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::timestamptz[], $6::bytea[])
			AS e(id, tenant_id, type, license_key, created_at, body)
		ON CONFLICT (id) DO NOTHING RETURNING id`,
		ids, tenants, types, keys, ats, bodies)
	if err != nil {
		return nil, err
	}
	return collectSet(rows)
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

// List returns up to f.Limit of the tenant's events matching f, newest first (by
// created_at, then id), and whether more follow.
func (s *Store) List(ctx context.Context, tenant string, f Filter) ([]Event, bool, error) {
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
		add("created_at >= $%d", f.Since)
	}
	if !f.Until.IsZero() {
		add("created_at <= $%d", f.Until)
	}
	if f.StartingAfter != "" {
		var at time.Time
		err := s.db.QueryRow(ctx, `SELECT created_at FROM events WHERE id = $1 AND tenant_id = $2`, f.StartingAfter, tenant).Scan(&at)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, false, ErrUnknownCursor
		}
		if err != nil {
			return nil, false, err
		}
		args = append(args, at, f.StartingAfter)
		where = append(where, fmt.Sprintf("(created_at, id) < ($%d, $%d)", len(args)-1, len(args)))
	}
	args = append(args, f.Limit+1)
	rows, err := s.db.Query(ctx, `SELECT `+columns+` FROM events WHERE `+strings.Join(where, " AND ")+
		fmt.Sprintf(` ORDER BY created_at DESC, id DESC LIMIT $%d`, len(args)), args...)
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

// InTx runs fn in a transaction of the events schema.
func (s *Store) InTx(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgxx.InTx(ctx, s.db, fn)
}
