package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/auth"
	"github.com/keyhouse/keyhouse/pkg/events"
)

// MaxAPIKeys bounds a tenant's extra API keys (the rotated key is not one of them).
const MaxAPIKeys = 20

// APIKey scopes.
const (
	ScopeFull = "full"
	ScopeRead = "read"
)

// usedEvery keeps a busy key from writing its row on every call: last_used_at moves
// forward at most once a minute.
const usedEvery = time.Minute

// prefixLen is how much of a key a list shows: "kh_" and 8 characters (40 of its 256 bits).
const prefixLen = 11

// APIKey is an extra API key as listed: never the key itself.
type APIKey struct {
	ID, Name, Prefix, Scope string
	CreatedAt               time.Time
	LastUsedAt, ExpiresAt   *time.Time
}

// ErrAPIKeyNotFound answers a delete of an unknown key, or of another tenant's.
var ErrAPIKeyNotFound = apierr.NotFound("API key not found")

// ErrTooManyAPIKeys answers a create beyond MaxAPIKeys.
var ErrTooManyAPIKeys = apierr.Invalid("A tenant may have at most %d API keys: delete one first", MaxAPIKeys)

// CreateAPIKey stores a new key for tenant; answer turns it and the key itself (shown
// once) into the call's answer. The count and the insert run under a per-tenant advisory
// lock, so concurrent creates cannot pass MaxAPIKeys; api_key.created is emitted in the
// transaction. Under an Idempotency-Key the answer is stored sealed with the key
// (Idempotency), and a repeated request gets it back and creates nothing.
func (s *Store) CreateAPIKey(ctx context.Context, idem Idempotency, tenant, name, scope string, expiresAt *time.Time,
	answer func(APIKey, string) ([]byte, error)) ([]byte, error) {
	return s.idempotent(ctx, idem, tenant, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
		key := NewAPIKey()
		k := APIKey{ID: "ak_" + lower(random(16)), Name: name, Prefix: key[:prefixLen], Scope: scope, ExpiresAt: expiresAt}
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('billing.api_keys:' || $1, 0))`, tenant); err != nil {
			return nil, err
		}
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM api_keys WHERE tenant_id = $1`, tenant).Scan(&n); err != nil {
			return nil, err
		}
		if n >= MaxAPIKeys {
			return nil, ErrTooManyAPIKeys
		}
		if err := tx.QueryRow(ctx,
			`INSERT INTO api_keys (id, tenant_id, name, prefix, scope, key_hash, expires_at)
			 VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING created_at`,
			k.ID, tenant, name, k.Prefix, scope, auth.HashAPIKey(key), expiresAt).Scan(&k.CreatedAt); err != nil {
			return nil, err
		}
		if err := events.Emit(ctx, tx, events.APIKeyCreated(tenant, k.ID, name, scope)); err != nil {
			return nil, err
		}
		return answer(k, key)
	})
}

// ListAPIKeys returns the tenant's extra keys, oldest first, expired ones included (they
// no longer work; the list says until when they did).
func (s *Store) ListAPIKeys(ctx context.Context, tenant string) ([]APIKey, error) {
	rows, err := s.db.Query(ctx,
		`SELECT id, name, prefix, scope, created_at, last_used_at, expires_at
		 FROM api_keys WHERE tenant_id = $1 ORDER BY created_at, id`, tenant)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (APIKey, error) {
		var k APIKey
		err := r.Scan(&k.ID, &k.Name, &k.Prefix, &k.Scope, &k.CreatedAt, &k.LastUsedAt, &k.ExpiresAt)
		return k, err
	})
}

// DeleteAPIKey deletes one of the tenant's keys; the next call of any service with it is
// refused, as every service resolves keys here with no cache. The console sessions it
// opened go with it, in the same transaction (console_sessions.api_key_id cascades).
func (s *Store) DeleteAPIKey(ctx context.Context, tenant, id string) error {
	return s.spine.InTx(ctx, s.db, func(ctx context.Context, tx pgx.Tx) error {
		var name, scope string
		err := tx.QueryRow(ctx, `DELETE FROM api_keys WHERE tenant_id = $1 AND id = $2 RETURNING name, scope`, tenant, id).Scan(&name, &scope)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrAPIKeyNotFound
		}
		if err != nil {
			return err
		}
		return events.Emit(ctx, tx, events.APIKeyDeleted(tenant, id, name, scope))
	})
}

// resolveExtraKey finds a live (not expired) extra key by its hash (and its id), and moves its
// last_used_at forward when that is more than usedEvery old: one round trip, and a write
// at most once a minute per key. The tenant's suspension comes along (no tenants row:
// the self-hosted implicit tenant, never suspended).
func (s *Store) resolveExtraKey(ctx context.Context, hash string) (auth.Credential, string, bool, error) {
	var (
		cred      auth.Credential
		id, scope string
		suspended bool
	)
	err := s.db.QueryRow(ctx, `
		WITH k AS (
			SELECT id, tenant_id, scope, last_used_at FROM api_keys
			WHERE key_hash = $1 AND (expires_at IS NULL OR expires_at > now())
		), touched AS (
			UPDATE api_keys SET last_used_at = now() FROM k
			WHERE api_keys.id = k.id AND (k.last_used_at IS NULL OR k.last_used_at < now() - make_interval(secs => $2))
		)
		SELECT k.id, k.tenant_id, k.scope, t.suspended_at IS NOT NULL
		FROM k LEFT JOIN tenants t ON t.tenant_id = k.tenant_id`, hash, usedEvery.Seconds()).
		Scan(&id, &cred.TenantID, &scope, &suspended)
	if errors.Is(err, pgx.ErrNoRows) {
		return auth.Credential{}, "", false, nil
	}
	if err != nil {
		return auth.Credential{}, "", false, err
	}
	if suspended {
		return auth.Credential{}, "", false, auth.ErrTenantSuspended
	}
	cred.ReadOnly = scope == ScopeRead
	return cred, id, true, nil
}
