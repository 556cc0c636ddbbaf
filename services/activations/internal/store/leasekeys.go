package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/events"
	"github.com/keyhouse/keyhouse/pkg/idempotency"
)

// LeaseKey is one Ed25519 key that signs a tenant's leases.
type LeaseKey struct {
	Kid       string
	PublicKey []byte
	// SealedPrivate is the private key sealed with the installation's AES key.
	SealedPrivate []byte
	// Status is "active" or "retiring".
	Status   string
	RetireAt *time.Time
}

const leaseKeyColumns = `kid, public_key, sealed_private, status, retire_at`

func scanLeaseKey(row pgx.CollectableRow) (LeaseKey, error) {
	var k LeaseKey
	err := row.Scan(&k.Kid, &k.PublicKey, &k.SealedPrivate, &k.Status, &k.RetireAt)
	return k, err
}

// ActiveLeaseKey is the key that signs the tenant's new leases (nil: none yet).
func (s *Store) ActiveLeaseKey(ctx context.Context, tenant string) (*LeaseKey, error) {
	rows, err := s.db.Query(ctx, `SELECT `+leaseKeyColumns+` FROM lease_keys WHERE tenant_id = $1 AND status = 'active'`, tenant)
	if err != nil {
		return nil, err
	}
	k, err := pgx.CollectExactlyOneRow(rows, scanLeaseKey)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return &k, err
}

// AddFirstLeaseKey stores k as the tenant's active key unless it has one, and returns the
// active key: two replicas making a tenant's first key at once agree on one (the unique
// index on the active key).
func (s *Store) AddFirstLeaseKey(ctx context.Context, tenant string, k LeaseKey) (*LeaseKey, error) {
	_, err := s.db.Exec(ctx, `INSERT INTO lease_keys (tenant_id, kid, public_key, sealed_private, status)
		VALUES ($1, $2, $3, $4, 'active') ON CONFLICT DO NOTHING`, tenant, k.Kid, k.PublicKey, k.SealedPrivate)
	if err != nil {
		return nil, err
	}
	return s.ActiveLeaseKey(ctx, tenant)
}

// LeaseKeys lists the keys of the tenant that verify now: the active one first, then the
// retiring ones whose retire_at has not passed, newest first.
func (s *Store) LeaseKeys(ctx context.Context, tenant string) ([]LeaseKey, error) {
	rows, err := s.db.Query(ctx, `SELECT `+leaseKeyColumns+` FROM lease_keys
		WHERE tenant_id = $1 AND (retire_at IS NULL OR retire_at > now())
		ORDER BY status = 'retiring', created_at DESC, kid`, tenant)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanLeaseKey)
}

// MaxRetiringLeaseKeys bounds the retiring keys of one key set that still verify: each is
// listed by the public JWKS until its retire_at (up to 100 days), so rotations without a
// bound would grow what every app fetches without limit.
const MaxRetiringLeaseKeys = 10

// ErrTooManyRetiringLeaseKeys answers a rotation that would keep one retiring key more
// than MaxRetiringLeaseKeys. It drops none: each may still verify leases apps hold.
var ErrTooManyRetiringLeaseKeys = apierr.Invalid("Too many lease keys still retiring (at most %d): rotate with retire_after_seconds 0, or after one retires", MaxRetiringLeaseKeys)

// RotateLeaseKey makes next the tenant's active key and the active one before it retiring
// until now + retireAfter; answer turns the key retired (nil when there was none) into
// the call's answer. A rotation that would leave more than MaxRetiringLeaseKeys retiring
// keys verifying is ErrTooManyRetiringLeaseKeys and changes nothing (retireAfter 0 adds
// none: the key it retires stops verifying at once). Under an Idempotency-Key (idemKey
// non-empty; pkg/idempotency) the answer is stored with the rotation, and a retry with
// the same key and requestHash gets it back and rotates nothing.
func (s *Store) RotateLeaseKey(ctx context.Context, idemKey string, requestHash []byte, tenant string, next LeaseKey, retireAfter time.Duration,
	answer func(retired *LeaseKey) ([]byte, error)) ([]byte, error) {
	ctx, done := s.spine.Track(ctx)
	resp, _, err := idempotency.Do(ctx, s.db, tenant, idemKey, requestHash, func(tx pgx.Tx) ([]byte, error) {
		if err := lockLeaseKeys(ctx, tx, tenant); err != nil {
			return nil, err
		}
		if retireAfter > 0 {
			var retiring int
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM lease_keys
				WHERE tenant_id = $1 AND status = 'retiring' AND retire_at > now()`, tenant).Scan(&retiring); err != nil {
				return nil, err
			}
			if retiring >= MaxRetiringLeaseKeys {
				return nil, ErrTooManyRetiringLeaseKeys
			}
		}
		retired, _, err := rotateLeaseKey(ctx, tx, tenant, "", next, retireAfter)
		if err != nil {
			return nil, err
		}
		return answer(retired)
	})
	done(err)
	return resp, err
}

// ReplaceLeaseKey is RotateLeaseKey made only while kid is still the tenant's active key:
// the activations service replaces a key whose private half no longer opens (the
// installation keyring was replaced), and replicas that find it so at the same moment
// replace it once. The UPDATE of the one that comes second finds the row retiring
// and changes nothing: replaced is false, and nothing is written. It is not bounded by
// MaxRetiringLeaseKeys: no client asks for it, it happens once per keyring replacement,
// and refusing it would leave the tenant with no key that signs.
func (s *Store) ReplaceLeaseKey(ctx context.Context, tenant, kid string, next LeaseKey, retireAfter time.Duration) (replaced bool, err error) {
	err = s.spine.InTx(ctx, s.db, func(ctx context.Context, tx pgx.Tx) error {
		if err := lockLeaseKeys(ctx, tx, tenant); err != nil {
			return err
		}
		_, replaced, err = rotateLeaseKey(ctx, tx, tenant, kid, next, retireAfter)
		return err
	})
	return replaced, err
}

// lockLeaseKeys makes the changes of one tenant's key set take turns until tx ends. Each
// statement after it reads what the one before committed (READ COMMITTED), so the count
// of retiring keys cannot be passed by rotations on two replicas at once, and a rotation
// finds the active key the one before it made rather than none (which, on the unique
// index of the active key, failed the second of two concurrent rotations).
func lockLeaseKeys(ctx context.Context, tx pgx.Tx, tenant string) error {
	_, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('activations.lease_keys:' || $1, 0))`, tenant)
	return err
}

// rotateLeaseKey is a rotation in tx (under lockLeaseKeys): the active key (when onlyKid is set, only if it is
// that one) retiring until now + retireAfter, next active, and lease_key.rotated. done is
// false when onlyKid was not the active key; then nothing was written.
func rotateLeaseKey(ctx context.Context, tx pgx.Tx, tenant, onlyKid string, next LeaseKey, retireAfter time.Duration) (retired *LeaseKey, done bool, err error) {
	rows, err := tx.Query(ctx, `UPDATE lease_keys SET status = 'retiring', retire_at = now() + make_interval(secs => $2)
		WHERE tenant_id = $1 AND status = 'active' AND ($3 = '' OR kid = $3) RETURNING `+leaseKeyColumns, tenant, retireAfter.Seconds(), onlyKid)
	if err != nil {
		return nil, false, err
	}
	old, err := pgx.CollectRows(rows, scanLeaseKey)
	if err != nil {
		return nil, false, err
	}
	if onlyKid != "" && len(old) == 0 {
		return nil, false, nil
	}
	if _, err := tx.Exec(ctx, `INSERT INTO lease_keys (tenant_id, kid, public_key, sealed_private, status)
		VALUES ($1, $2, $3, $4, 'active')`, tenant, next.Kid, next.PublicKey, next.SealedPrivate); err != nil {
		return nil, false, err
	}
	if len(old) > 0 {
		retired = &old[0]
	}
	return retired, true, leaseKeyRotated(ctx, tx, tenant, next.Kid, retired)
}

// RemoveRetiredLeaseKeys deletes the keys whose retire_at has passed (they are no longer
// listed from that moment on; this only drops the rows).
func (s *Store) RemoveRetiredLeaseKeys(ctx context.Context) error {
	_, err := s.db.Exec(ctx, `DELETE FROM lease_keys WHERE status = 'retiring' AND retire_at <= now()`)
	return err
}

// leaseKeyRotated announces a rotation as lease_key.rotated (the new kid and the retiring
// one, if any), in the rotation's transaction.
func leaseKeyRotated(ctx context.Context, tx pgx.Tx, tenant, kid string, retiring *LeaseKey) error {
	var retiringKid *string
	if retiring != nil {
		retiringKid = &retiring.Kid
	}
	return events.Emit(ctx, tx, events.LeaseKeyRotated(tenant, kid, retiringKid))
}
