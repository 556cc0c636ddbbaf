// Package store is the releases schema's SQL. Every method takes the tenant explicitly
// and every query is scoped by it.
package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/keyhouse/keyhouse/pkg/events"
	"github.com/keyhouse/keyhouse/pkg/idempotency"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
)

// Store reads and writes the releases schema. A registration is release.published and
// an unpublication release.unpublished, emitted in its transaction (pkg/events); the
// spine's post-commit path announces both to the caches of check-update's answers.
type Store struct {
	db    *pgxpool.Pool
	spine *events.Spine
	// latest caches Latest's answers (nil: none; WithLatestCache).
	latest *LatestCache
}

// New returns a Store on db (search_path = releases); spine may be nil (no post-commit
// path: the events are written all the same).
func New(db *pgxpool.Pool, spine *events.Spine) *Store { return &Store{db: db, spine: spine} }

var (
	// ErrNotFound: no such release in the tenant.
	ErrNotFound = errors.New("release not found")
	// ErrDuplicate: a published release with the same product, version, channel and
	// platform exists.
	ErrDuplicate = errors.New("duplicate published release")
	// ErrLimit: the product/channel/platform already has the maximum of published releases.
	ErrLimit = errors.New("published release limit reached")
)

// Release is one row.
type Release struct {
	ID           int32
	ProductID    string
	Version      string
	Channel      string
	Platform     string
	ArtifactURL  string
	Checksum     string
	ReleaseNotes string
	Status       string
	Signature    string
	CreatedAt    time.Time
}

// NewRelease is what Register inserts.
type NewRelease struct {
	Release
	// ProductKey is ProductID as check-update compares it (trimmed, lower-cased).
	ProductKey string
	// Precedence is semver.KeyOf(Version).
	Precedence []byte
}

const columns = `id, product_id, version, channel, platform, artifact_url, checksum, release_notes, status, signature, created_at`

func scan(row pgx.Row) (*Release, error) {
	var r Release
	err := row.Scan(&r.ID, &r.ProductID, &r.Version, &r.Channel, &r.Platform, &r.ArtifactURL, &r.Checksum,
		&r.ReleaseNotes, &r.Status, &r.Signature, &r.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	return &r, err
}

// lockChannel serializes, across every replica, the registrations into one
// product/channel/platform, so the duplicate check and the count of published releases
// hold until the insert commits. Advisory locks are database-wide: the class id keeps
// this apart from the other services' two-int locks. A hash collision between two
// channels only makes them wait for each other.
func lockChannel(ctx context.Context, tx pgx.Tx, tenant, productKey, channel, platform string) error {
	_, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(7497068, hashtext($1 || E'\x1f' || $2 || E'\x1f' || $3 || E'\x1f' || $4))`,
		tenant, productKey, channel, platform)
	return err
}

// Register inserts r as a published release of tenant and returns its id, unless a
// published release with the same product, version, channel and platform exists
// (ErrDuplicate) or limit releases of that product/channel/platform are published
// (ErrLimit). Under an Idempotency-Key (idemKey non-empty) a repeated request returns the
// first id and inserts nothing (pkg/idempotency). beforeCommit, if not nil, runs last in
// the release's transaction, once every check passed and the release is inserted; its
// error rolls the release back.
func (s *Store) Register(ctx context.Context, tenant, idemKey string, requestHash []byte, r *NewRelease, limit int,
	beforeCommit func(context.Context) error) (int32, error) {
	ctx, done := s.spine.Track(ctx)
	resp, _, err := idempotency.Do(ctx, s.db, tenant, idemKey, requestHash, func(tx pgx.Tx) ([]byte, error) {
		if err := lockChannel(ctx, tx, tenant, r.ProductKey, r.Channel, r.Platform); err != nil {
			return nil, err
		}
		var dup bool
		var n int
		err := tx.QueryRow(ctx, `SELECT
			EXISTS (SELECT 1 FROM releases WHERE tenant_id = $1 AND product_key = $2 AND channel = $3
				AND platform = $4 AND version = $5 AND status = 'published'),
			(SELECT count(*) FROM releases WHERE tenant_id = $1 AND product_key = $2 AND channel = $3
				AND platform = $4 AND status = 'published')`,
			tenant, r.ProductKey, r.Channel, r.Platform, r.Version).Scan(&dup, &n)
		switch {
		case err != nil:
			return nil, err
		case dup:
			return nil, ErrDuplicate
		case n >= limit:
			return nil, ErrLimit
		}
		var id int32
		err = tx.QueryRow(ctx, `INSERT INTO releases (tenant_id, product_id, product_key, version, channel, platform,
			artifact_url, checksum, release_notes, signature, precedence)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING id`,
			tenant, r.ProductID, r.ProductKey, r.Version, r.Channel, r.Platform, r.ArtifactURL, r.Checksum,
			r.ReleaseNotes, r.Signature, r.Precedence).Scan(&id)
		if err != nil {
			return nil, err
		}
		if err := events.Emit(ctx, tx, events.ReleasePublished(tenant, id, r.ProductID, r.Version, r.Channel, r.Platform)); err != nil {
			return nil, err
		}
		if beforeCommit != nil {
			if err := beforeCommit(ctx); err != nil {
				return nil, err
			}
		}
		return []byte(strconv.Itoa(int(id))), nil
	})
	done(err)
	if pgxx.IsUniqueViolation(err, "releases_published_once") {
		// Unreachable while every writer takes the lock; the index is the last word.
		return 0, ErrDuplicate
	}
	if err != nil {
		return 0, err
	}
	id, err := strconv.ParseInt(string(resp), 10, 32)
	return int32(id), err
}

// Get returns the tenant's release id.
func (s *Store) Get(ctx context.Context, tenant string, id int32) (*Release, error) {
	return scan(s.db.QueryRow(ctx, `SELECT `+columns+` FROM releases WHERE tenant_id = $1 AND id = $2`, tenant, id))
}

// Unpublish marks the tenant's release id unpublished (release.unpublished); it stays so,
// and nothing is emitted, if it already was.
func (s *Store) Unpublish(ctx context.Context, tenant string, id int32) error {
	return s.spine.InTx(ctx, s.db, func(ctx context.Context, tx pgx.Tx) error {
		r, err := scan(tx.QueryRow(ctx, `UPDATE releases SET status = 'unpublished', unpublished_at = now()
			WHERE tenant_id = $1 AND id = $2 AND status = 'published' RETURNING `+columns, tenant, id))
		if errors.Is(err, ErrNotFound) {
			var exists bool
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM releases WHERE tenant_id = $1 AND id = $2)`, tenant, id).Scan(&exists); err != nil {
				return err
			}
			if exists {
				return nil
			}
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		return events.Emit(ctx, tx, events.ReleaseUnpublished(tenant, r.ID, r.ProductID, r.Version, r.Channel, r.Platform))
	})
}

// Filter selects releases for list-releases; empty fields do not filter.
type Filter struct {
	ProductKey, Channel, Platform, Status string
	Limit, Offset                         int
}

// List returns one page of the tenant's releases, newest first, and the total matching.
func (s *Store) List(ctx context.Context, tenant string, f Filter) ([]*Release, int, error) {
	where := "tenant_id = $1"
	args := []any{tenant}
	for _, c := range []struct{ col, v string }{
		{"product_key", f.ProductKey}, {"channel", f.Channel}, {"platform", f.Platform}, {"status", f.Status},
	} {
		if c.v != "" {
			args = append(args, c.v)
			where += fmt.Sprintf(" AND %s = $%d", c.col, len(args))
		}
	}
	var total int
	if err := s.db.QueryRow(ctx, `SELECT count(*) FROM releases WHERE `+where, args...).Scan(&total); err != nil {
		return nil, 0, err
	}
	n := len(args)
	rows, err := s.db.Query(ctx, fmt.Sprintf(`SELECT `+columns+` FROM releases WHERE `+where+`
		ORDER BY id DESC LIMIT $%d OFFSET $%d`, n+1, n+2), append(args, f.Limit, f.Offset)...)
	if err != nil {
		return nil, 0, err
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*Release, error) { return scan(row) })
	return out, total, err
}
