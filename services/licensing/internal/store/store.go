// Package store is the licensing schema's SQL: licenses, product ownership, the signing
// keyring (and, through pkg/idempotency and pkg/natsx, idempotency records and the outbox). Every method that touches tenant data takes
// the tenant explicitly and every such query is scoped by it.
package store

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/keyhouse/keyhouse/pkg/events"
	"github.com/keyhouse/keyhouse/pkg/idempotency"
	"github.com/keyhouse/keyhouse/pkg/license"
	"github.com/keyhouse/keyhouse/pkg/licensecache"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
	eventsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/events/v1"
)

// Store reads and writes the licensing schema. Every committed change of a license emits
// its event (pkg/events) in its own transaction, and leaves through the spine's one
// post-commit path, which also drops the license from the caches.
type Store struct {
	db *pgxpool.Pool
	// cache serves Get (nil: every Get reads the row); the spine drops what changed.
	cache *licensecache.Cache[*License]
	spine *events.Spine
}

// New returns a Store on db (search_path = licensing); spine may be nil (no post-commit
// path: the events are written all the same).
func New(db *pgxpool.Pool, spine *events.Spine) *Store { return &Store{db: db, spine: spine} }

// WithCache serves Get from cache. The cache must follow the spine: the process's spine
// drops every changed key from it (events.WithLocal with events.ChangedLicense) before the
// change is answered, and the fast path drops it everywhere else.
func (s *Store) WithCache(cache *licensecache.Cache[*License]) *Store {
	s.cache = cache
	return s
}

var (
	// ErrNotFound: no such license for the tenant.
	ErrNotFound = errors.New("license not found")
	// ErrProductOwned: another tenant owns the product_id.
	ErrProductOwned = errors.New("product owned by another tenant")
)

// License is one row of the licenses table.
type License struct {
	TenantID  string
	Key       string
	Tier      string
	ProductID string
	IssuedTo  string
	IssuedAt  time.Time
	// nil: perpetual.
	ExpiresAt *time.Time
	Status    string
	Limits    map[string]float64
	// nil: unlimited.
	MaxActivations *int32
	RevokedAt      *time.Time
	Notes          *string
}

// KeyHash is how a key is looked up (see the migration).
func KeyHash(key string) []byte {
	sum := sha256.Sum256([]byte(key))
	return sum[:]
}

const licenseColumns = `tenant_id, key, tier, product_id, issued_to, issued_at, expires_at, status, limits, max_activations, revoked_at, notes`

// scanLicense reads licenseColumns, after the columns first (when the query selects
// others before them).
func scanLicense(row pgx.Row, first ...any) (*License, error) {
	var l License
	err := row.Scan(append(first, &l.TenantID, &l.Key, &l.Tier, &l.ProductID, &l.IssuedTo, &l.IssuedAt, &l.ExpiresAt,
		&l.Status, &l.Limits, &l.MaxActivations, &l.RevokedAt, &l.Notes)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	if l.Limits == nil {
		l.Limits = map[string]float64{}
	}
	return &l, nil
}

// Get returns the license with key; tenant "" finds it in any tenant (public routes),
// otherwise another tenant's key is ErrNotFound. The row may come from the cache (see
// WithCache): callers must not modify it.
func (s *Store) Get(ctx context.Context, tenant, key string) (*License, error) {
	if s.cache == nil {
		return get(ctx, s.db, tenant, key, false)
	}
	// Keys are unique across tenants, so one entry serves every tenant's lookup.
	l, err := s.cache.Get(key, func() (*License, error) { return get(ctx, s.db, "", key, false) })
	if err != nil {
		return nil, err
	}
	if tenant != "" && l.TenantID != tenant {
		return nil, ErrNotFound
	}
	return l, nil
}

// GetLive is Get past the cache: the row as the database has it now. verify-license-file
// promises a live check (api.md), so a replica must not answer it from a row another
// replica has just revoked.
func (s *Store) GetLive(ctx context.Context, tenant, key string) (*License, error) {
	return get(ctx, s.db, tenant, key, false)
}

func get(ctx context.Context, q pgxx.Querier, tenant, key string, forUpdate bool) (*License, error) {
	sql := `SELECT ` + licenseColumns + ` FROM licenses WHERE key_hash = $1 AND ($2 = '' OR tenant_id = $2)`
	if forUpdate {
		sql += ` FOR UPDATE`
	}
	return scanLicense(q.QueryRow(ctx, sql, KeyHash(key), tenant))
}

// Tx is one transaction of the licensing schema: what the handlers may do inside it.
// It is an interface so the handlers' unit tests can run them on a fake. Each change
// emits its event itself (license.issued, .revoked, .reactivated, .deleted).
type Tx interface {
	// GetForUpdate reads and row-locks a license of the tenant (ErrNotFound).
	GetForUpdate(ctx context.Context, tenant, key string) (*License, error)
	// LockQuota serializes the transactions that can raise the tenant's active count.
	LockQuota(ctx context.Context, tenant string) error
	// CountActive counts the tenant's licenses that hold quota: active and not expired.
	CountActive(ctx context.Context, tenant string) (int, error)
	// Insert stores a new license and writes IssuedAt and Status back.
	Insert(ctx context.Context, l *License) error
	// SetStatus revokes or reactivates a license.
	SetStatus(ctx context.Context, tenant, key, status string) error
	// UpdateTerms changes the terms of locked, a license as GetForUpdate returned it, and
	// returns it as updated.
	UpdateTerms(ctx context.Context, locked *License, t Terms) (*License, error)
	// Delete removes a license (ErrNotFound) and remembers the deletion (DeletedKeys).
	Delete(ctx context.Context, tenant, key string) error
	// Existing row-locks and returns the licenses of keys, of any tenant, by key.
	Existing(ctx context.Context, keys []string) (map[string]*License, error)
	// DeletedAmong returns which of keys the tenant has ever deleted.
	DeletedAmong(ctx context.Context, tenant string, keys []string) (map[string]bool, error)
	// InsertImported stores imported licenses as given (ErrImportRaced).
	InsertImported(ctx context.Context, ls []*License) error
	// ClaimProduct binds a product no tenant owns yet to tenant, as part of this
	// transaction (ErrProductOwned).
	ClaimProduct(ctx context.Context, tenant, productID string) error
}

// pgTx is Tx on Postgres.
type pgTx struct {
	tx pgx.Tx
	// spineCtx is the context of the spine's transaction: events emitted with it take the
	// post-commit path.
	spineCtx context.Context
}

// InTx runs fn in a transaction, and the spine's post-commit path after it.
func (s *Store) InTx(ctx context.Context, fn func(Tx) error) error {
	return s.spine.InTx(ctx, s.db, func(ctx context.Context, tx pgx.Tx) error {
		return fn(&pgTx{tx: tx, spineCtx: ctx})
	})
}

// emit writes the events of the transaction's change (one statement for a batch's).
func (t *pgTx) emit(evs ...*eventsv1.Event) error { return events.EmitAll(t.spineCtx, t.tx, evs...) }

// GetForUpdate reads and row-locks a license of the tenant.
func (t *pgTx) GetForUpdate(ctx context.Context, tenant, key string) (*License, error) {
	return get(ctx, t.tx, tenant, key, true)
}

// LockQuota serializes, across every replica, the transactions that can raise a tenant's
// count of active licenses (issuance and reactivation), so a count checked against the
// quota is still true at commit. The class id keeps the key space apart from other
// advisory-lock users.
func (t *pgTx) LockQuota(ctx context.Context, tenant string) error {
	_, err := t.tx.Exec(ctx, `SELECT pg_advisory_xact_lock(7317001, hashtext($1))`, tenant)
	return err
}

// CountActive counts the tenant's licenses that hold quota: active and not expired.
func (t *pgTx) CountActive(ctx context.Context, tenant string) (int, error) {
	return countActive(ctx, t.tx, tenant)
}

// CountActive is CountActive outside a transaction.
func (s *Store) CountActive(ctx context.Context, tenant string) (int, error) {
	return countActive(ctx, s.db, tenant)
}

func countActive(ctx context.Context, q pgxx.Querier, tenant string) (int, error) {
	var n int
	err := q.QueryRow(ctx, `SELECT count(*) FROM licenses WHERE tenant_id = $1 AND status = $2
		AND (expires_at IS NULL OR expires_at > now())`, tenant, license.StatusActive).Scan(&n)
	return n, err
}

// insertSQL stores a new license; the database sets issued_at and status.
const insertSQL = `INSERT INTO licenses (key_hash, key, tenant_id, tier, product_id, issued_to,
	expires_at, limits, max_activations, notes) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
	RETURNING issued_at, status`

func insertArgs(l *License) []any {
	return []any{KeyHash(l.Key), l.Key, l.TenantID, l.Tier, l.ProductID, l.IssuedTo, l.ExpiresAt, l.Limits, l.MaxActivations, l.Notes}
}

func issuedEvent(l *License) *eventsv1.Event {
	return events.LicenseIssued(l.TenantID, l.Key, l.ProductID, l.Tier, l.IssuedTo, l.ExpiresAt, l.MaxActivations, l.Limits)
}

// Insert stores a new license; IssuedAt is set by the database and written back.
func (t *pgTx) Insert(ctx context.Context, l *License) error {
	if err := t.tx.QueryRow(ctx, insertSQL, insertArgs(l)...).Scan(&l.IssuedAt, &l.Status); err != nil {
		return err
	}
	return t.emit(issuedEvent(l))
}

// Issue stores a new license with its license.issued event in one round trip: BEGIN, the
// insert, the outbox row and COMMIT in one pipeline (Tx.Insert takes four). It is for an
// issuance that reads nothing first (no Idempotency-Key, no quota to hold). IssuedAt is
// set by the database and written back.
func (s *Store) Issue(ctx context.Context, l *License) error {
	return s.spine.Pipelined(ctx, s.db, func(ctx context.Context, b *pgx.Batch) error {
		b.Queue(insertSQL, insertArgs(l)...).QueryRow(func(row pgx.Row) error { return row.Scan(&l.IssuedAt, &l.Status) })
		return events.QueueAll(ctx, b, issuedEvent(l))
	}, nil)
}

// SetStatus revokes (status "revoked", revoked_at now) or reactivates a license.
func (t *pgTx) SetStatus(ctx context.Context, tenant, key, status string) error {
	var productID string
	err := t.tx.QueryRow(ctx, `UPDATE licenses SET status = $3,
		revoked_at = CASE WHEN $3 = $4 THEN now() ELSE NULL END
		WHERE key_hash = $1 AND tenant_id = $2 RETURNING product_id`, KeyHash(key), tenant, status, license.StatusRevoked).Scan(&productID)
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	if err != nil {
		return err
	}
	if status == license.StatusRevoked {
		return t.emit(events.LicenseRevoked(tenant, key, productID))
	}
	return t.emit(events.LicenseReactivated(tenant, key, productID))
}

// Delete removes a license, reporting ErrNotFound when there was none.
func (t *pgTx) Delete(ctx context.Context, tenant, key string) error {
	var productID string
	err := t.tx.QueryRow(ctx, `DELETE FROM licenses WHERE key_hash = $1 AND tenant_id = $2 RETURNING product_id`,
		KeyHash(key), tenant).Scan(&productID)
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	if err != nil {
		return err
	}
	// license.deleted: activations purges the seats (even if it is down now), the log
	// keeps it.
	if err := t.emit(events.LicenseDeleted(tenant, key, productID)); err != nil {
		return err
	}
	// The deletion is kept for good, not only for the retention DeletedKeys reads:
	// activations keeps its own record of it for good (no seat can be taken on the key
	// again), so an import of the key must be refused however long ago it was deleted.
	_, err = t.tx.Exec(ctx, `INSERT INTO deleted_licenses (tenant_id, key) VALUES ($1, $2)
		ON CONFLICT (tenant_id, key) DO UPDATE SET deleted_at = now()`, tenant, key)
	return err
}

// DeletedAmong returns which of keys the tenant has deleted, however long ago.
func (t *pgTx) DeletedAmong(ctx context.Context, tenant string, keys []string) (map[string]bool, error) {
	rows, err := t.tx.Query(ctx, `SELECT key FROM deleted_licenses WHERE tenant_id = $1 AND key = ANY($2)`, tenant, keys)
	if err != nil {
		return nil, err
	}
	deleted, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(deleted))
	for _, k := range deleted {
		out[k] = true
	}
	return out, nil
}

// MaxDeletedKeys bounds DeletedKeys. The list travels in a gRPC message (4 MiB at most,
// about 110,000 keys) on every admin/stats and recent-activations call; activations purges
// a deletion milliseconds after it while it runs, so only the newest deletions can still
// have seats there, unless activations is more than this many deletions behind.
const MaxDeletedKeys = 10000

// DeletedKeys lists the tenant's licenses deleted within license.EventRetention, whose
// seats activations may not have purged yet: the newest MaxDeletedKeys, newest first.
func (s *Store) DeletedKeys(ctx context.Context, tenant string) ([]string, error) {
	rows, err := s.db.Query(ctx, `SELECT key FROM deleted_licenses WHERE tenant_id = $1 AND deleted_at > now() - $2::interval
		ORDER BY deleted_at DESC, key LIMIT $3`, tenant, license.EventRetention, MaxDeletedKeys)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// Terms is a change of license terms; nil fields stay unchanged.
type Terms struct {
	// SetExpiry: ExpiresAt is the new expiry (nil = perpetual).
	SetExpiry bool
	ExpiresAt *time.Time
	// SetMaxActivations: MaxActivations is the new cap (nil = unlimited).
	SetMaxActivations bool
	MaxActivations    *int32
	Limits            map[string]float64
}

// UpdateTerms applies t to the license and returns it as updated (license.terms_updated,
// unless the terms were already those).
func (s *Store) UpdateTerms(ctx context.Context, tenant, key string, t Terms) (*License, error) {
	var l *License
	err := s.InTx(ctx, func(tx Tx) error {
		locked, err := tx.GetForUpdate(ctx, tenant, key)
		if err != nil {
			return err
		}
		l, err = tx.UpdateTerms(ctx, locked, t)
		return err
	})
	if err != nil {
		return nil, err
	}
	return l, nil
}

// UpdateTerms applies terms to the locked license and returns it as updated
// (license.terms_updated, unless the terms were already those). The caller has read the
// row under its lock, so it is what the update starts from: no second read.
func (t *pgTx) UpdateTerms(ctx context.Context, before *License, terms Terms) (*License, error) {
	l, err := scanLicense(t.tx.QueryRow(ctx, `UPDATE licenses SET
		expires_at = CASE WHEN $3 THEN $4 ELSE expires_at END,
		max_activations = CASE WHEN $5 THEN $6 ELSE max_activations END,
		limits = COALESCE($7, limits)
		WHERE key_hash = $1 AND tenant_id = $2 RETURNING `+licenseColumns,
		KeyHash(before.Key), before.TenantID, terms.SetExpiry, terms.ExpiresAt, terms.SetMaxActivations, terms.MaxActivations, limitsOrNil(terms.Limits)))
	if err != nil {
		return nil, err
	}
	if sameTime(before.ExpiresAt, l.ExpiresAt) && sameCap(before.MaxActivations, l.MaxActivations) && maps.Equal(before.Limits, l.Limits) {
		// The terms it was given are the terms it had: a write that changes nothing
		// records nothing (events.md).
		return l, nil
	}
	return l, t.emit(events.LicenseTermsUpdated(l.TenantID, l.Key, l.ProductID, l.ExpiresAt, l.MaxActivations, l.Limits))
}

func limitsOrNil(m map[string]float64) any {
	if m == nil {
		return nil
	}
	return m
}

// UpdateNotes sets the notes ("" clears them to null) and returns the license
// (license.notes_updated, unless the notes were already those).
func (s *Store) UpdateNotes(ctx context.Context, tenant, key, notes string) (*License, error) {
	var l *License
	err := s.spine.InTx(ctx, s.db, func(ctx context.Context, tx pgx.Tx) error {
		before, err := get(ctx, tx, tenant, key, true)
		if err != nil {
			return err
		}
		l, err = scanLicense(tx.QueryRow(ctx, `UPDATE licenses SET notes = NULLIF($3, '')
			WHERE key_hash = $1 AND tenant_id = $2 RETURNING `+licenseColumns, KeyHash(key), tenant, notes))
		if err != nil {
			return err
		}
		if sameText(before.Notes, l.Notes) {
			return nil // the notes it had: nothing changed, nothing to record
		}
		return events.Emit(ctx, tx, events.LicenseNotesUpdated(tenant, l.Key, l.ProductID))
	})
	if err != nil {
		return nil, err
	}
	return l, nil
}

// Filter selects licenses for list-licenses.
type Filter struct {
	ProductID, Status, IssuedTo string
	// Key is a substring of the license key (support pastes a whole key or part of one).
	Key string
	// KeyAsIssued, when set, is the Keyhouse key Key spells (pkg/license.CanonicalKey,
	// any case, dashes, look-alikes): that license matches too.
	KeyAsIssued string
	// ExpiringFrom and ExpiringUntil, when set, keep the active licenses whose expiry is
	// in (ExpiringFrom, ExpiringUntil], soonest first.
	ExpiringFrom, ExpiringUntil *time.Time
	Limit, Offset               int
}

// likeEscape makes % and _ (and the escape character itself) match literally.
func likeEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(s)
}

// List returns one page of the tenant's licenses, newest first, and the total matching.
// Only the filters given become conditions, so each combination gets a plan that uses its
// index (by product, by status, the issued_to and key trigram indexes).
func (s *Store) List(ctx context.Context, tenant string, f Filter) ([]*License, int, error) {
	where := "tenant_id = $1"
	args := []any{tenant}
	add := func(cond string, v any) {
		args = append(args, v)
		where += fmt.Sprintf(" AND "+cond, len(args))
	}
	if f.ProductID != "" {
		add("product_id = $%d", f.ProductID)
	}
	if f.Status != "" {
		add("status = $%d", f.Status)
	}
	if f.IssuedTo != "" {
		add("issued_to ILIKE $%d", "%"+likeEscape(f.IssuedTo)+"%")
	}
	if f.Key != "" {
		if f.KeyAsIssued != "" {
			args = append(args, "%"+likeEscape(f.Key)+"%", f.KeyAsIssued)
			where += fmt.Sprintf(" AND (key ILIKE $%d OR key = $%d)", len(args)-1, len(args))
		} else {
			add("key ILIKE $%d", "%"+likeEscape(f.Key)+"%")
		}
	}
	order := "issued_at DESC, key"
	if f.ExpiringFrom != nil && f.ExpiringUntil != nil {
		where += " AND status = 'active'"
		add("expires_at > $%d", *f.ExpiringFrom)
		add("expires_at <= $%d", *f.ExpiringUntil)
		order = "expires_at, key"
	}
	total, err := s.total(ctx, tenant, f, where, args)
	if err != nil {
		return nil, 0, err
	}
	n := len(args)
	page := fmt.Sprintf(`SELECT `+licenseColumns+` FROM licenses WHERE `+where+`
		ORDER BY `+order+` LIMIT $%d OFFSET $%d`, n+1, n+2)
	if f.Offset > 0 {
		// A deep page skips its rows in the index alone (issued_at and key are in the
		// indexes by tenant, product and status) and fetches only its own rows from the
		// table: page 2,000 of 100,000 took 197 ms reading the 99,950 rows before it from
		// the table, 35 ms this way.
		page = fmt.Sprintf(`SELECT `+licenseColumns+` FROM licenses WHERE tenant_id = $1 AND (issued_at, key) IN (
			SELECT issued_at, key FROM licenses WHERE `+where+` ORDER BY `+order+` LIMIT $%d OFFSET $%d)
		ORDER BY `+order, n+1, n+2)
	}
	rows, err := s.db.Query(ctx, page, append(args, f.Limit, f.Offset)...)
	if err != nil {
		return nil, 0, err
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*License, error) { return scanLicense(row) })
	return out, total, err
}

// total is how many of the tenant's licenses match f (whose conditions are where, with
// args): from the kept counts when f selects by status at most, which is the console's
// list as it opens, else counted.
func (s *Store) total(ctx context.Context, tenant string, f Filter, where string, args []any) (int, error) {
	if f.ProductID == "" && f.IssuedTo == "" && f.Key == "" && f.ExpiringFrom == nil && f.ExpiringUntil == nil {
		c, err := s.Counts(ctx, tenant)
		switch f.Status {
		case "":
			return c.Total, err
		case license.StatusActive:
			return c.Active, err
		case license.StatusRevoked:
			return c.Revoked, err
		}
	}
	var n int
	err := s.db.QueryRow(ctx, `SELECT count(*) FROM licenses WHERE `+where, args...).Scan(&n)
	return n, err
}

// Counts are the license figures of admin/stats.
type Counts struct{ Total, Active, Revoked int }

// Counts reads the tenant's license counts from license_counts, which triggers on
// licenses keep (migration 00008): the sum of its rows, however many FoldCounts has not
// folded yet. A license's status is active or revoked (a check constraint), so the two
// make the total.
func (s *Store) Counts(ctx context.Context, tenant string) (Counts, error) {
	var c Counts
	err := s.db.QueryRow(ctx, `SELECT COALESCE(sum(active), 0)::bigint, COALESCE(sum(revoked), 0)::bigint
		FROM license_counts WHERE tenant_id = $1`, tenant).Scan(&c.Active, &c.Revoked)
	c.Total = c.Active + c.Revoked
	return c, err
}

// FoldCounts folds each tenant's license_counts rows into one (none when the counts are
// zero). A statement that writes licenses while it runs appends a row it does not see,
// which the next fold takes. One replica folds at a time (the others find the lock taken
// and skip the round): two folds of the same rows would wait on each other's deletes.
func (s *Store) FoldCounts(ctx context.Context) error {
	return pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		var mine bool
		if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock(`+foldCountsLock+`)`).Scan(&mine); err != nil || !mine {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT tenant_id FROM license_counts GROUP BY tenant_id HAVING count(*) > 1`)
		if err != nil {
			return err
		}
		tenants, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil || len(tenants) == 0 {
			return err
		}
		// The tenants come as an array, so the delete reads one table and has nothing to
		// join: joined to a subquery of its own table, it once ran for minutes over
		// 100,000 rows in make bench, on a plan that could not be found again.
		_, err = tx.Exec(ctx, `WITH gone AS (
				DELETE FROM license_counts WHERE tenant_id = ANY($1) RETURNING tenant_id, active, revoked)
			INSERT INTO license_counts SELECT tenant_id, sum(active), sum(revoked) FROM gone
			GROUP BY tenant_id HAVING sum(active) <> 0 OR sum(revoked) <> 0`, tenants)
		return err
	})
}

// foldCountsLock is FoldCounts' advisory lock: a two-int key whose first int no other lock
// of the database uses.
const foldCountsLock = `5286801, 0`

// CountsFoldInterval is how often the service folds the license counts: a tenant issuing
// 1,000 licenses a second one at a time leaves 5,000 rows for a read to sum.
const CountsFoldInterval = 5 * time.Second

// ClaimProduct binds productID to tenant unless another tenant owns it (ErrProductOwned).
// The primary key makes two simultaneous first claims resolve to one owner.
func (s *Store) ClaimProduct(ctx context.Context, tenant, productID string) error {
	return claimProduct(ctx, s.db, tenant, productID)
}

// ClaimProduct is the claim inside the transaction that writes the tenant's license: it
// commits with the license, or not at all. A competing first claim of another transaction
// makes this one wait for it, then lose (ErrProductOwned) if it committed.
func (t *pgTx) ClaimProduct(ctx context.Context, tenant, productID string) error {
	return claimProduct(ctx, t.tx, tenant, productID)
}

func claimProduct(ctx context.Context, q pgxx.Querier, tenant, productID string) error {
	var owner string
	err := q.QueryRow(ctx, `WITH claim AS (
			INSERT INTO products (product_key, product_id, tenant_id) VALUES ($1, $2, $3)
			ON CONFLICT (product_key) DO NOTHING RETURNING tenant_id)
		SELECT tenant_id FROM claim UNION ALL SELECT tenant_id FROM products WHERE product_key = $1`,
		license.ProductKey(productID), productID, tenant).Scan(&owner)
	if errors.Is(err, pgx.ErrNoRows) {
		// The competing claim committed between our insert's conflict check and the
		// read, which cannot see it in this statement's snapshot: read it again (under
		// read committed a new statement has a new snapshot, inside a transaction too).
		err = q.QueryRow(ctx, `SELECT tenant_id FROM products WHERE product_key = $1`, license.ProductKey(productID)).Scan(&owner)
	}
	if err != nil {
		return err
	}
	if owner != tenant {
		return ErrProductOwned
	}
	return nil
}

// ProductOwner is the tenant that owns productID, or "" when none does yet. It claims
// nothing: a read of a product must leave it free for the first tenant that writes.
func (s *Store) ProductOwner(ctx context.Context, productID string) (string, error) {
	var owner string
	err := s.db.QueryRow(ctx, `SELECT tenant_id FROM products WHERE product_key = $1`, license.ProductKey(productID)).Scan(&owner)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	return owner, err
}

// Idempotent runs create under the Idempotency-Key mechanism (pkg/idempotency), in one
// transaction with the record of its answer.
func (s *Store) Idempotent(ctx context.Context, tenant, idemKey string, requestHash []byte,
	create func(Tx) ([]byte, error)) (resp []byte, replayed bool, err error) {
	ctx, done := s.spine.Track(ctx)
	resp, replayed, err = idempotency.Do(ctx, s.db, tenant, idemKey, requestHash, func(tx pgx.Tx) ([]byte, error) {
		return create(&pgTx{tx: tx, spineCtx: ctx})
	})
	done(err)
	return resp, replayed, err
}

// Keyring returns the stored keyring document, or create's document stored now if there
// is none. Two replicas starting together both call create; one insert wins and both
// return the winner's document.
func (s *Store) Keyring(ctx context.Context, create func() ([]byte, error)) ([]byte, error) {
	var doc []byte
	err := s.db.QueryRow(ctx, `SELECT document FROM signing_keyring`).Scan(&doc)
	if err == nil {
		return doc, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, err
	}
	fresh, err := create()
	if err != nil {
		return nil, err
	}
	if _, err := s.db.Exec(ctx, `INSERT INTO signing_keyring (document) VALUES ($1) ON CONFLICT DO NOTHING`, fresh); err != nil {
		return nil, err
	}
	err = s.db.QueryRow(ctx, `SELECT document FROM signing_keyring`).Scan(&doc)
	return doc, err
}
