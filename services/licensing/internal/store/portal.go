package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
)

// PortalLink is a license's portal nonce; the token is derived from it (server.Portal).
type PortalLink struct {
	Nonce     []byte
	TokenHash []byte
}

// TokenHash is how a portal token is looked up.
func TokenHash(token string) []byte {
	sum := sha256.Sum256([]byte(token))
	return sum[:]
}

// PortalLink returns the license's link, creating it with a fresh nonce when it has none
// (or reset is true). derive turns a nonce into the token. ErrNotFound when the tenant has
// no such license.
func (s *Store) PortalLink(ctx context.Context, tenant, key string, reset bool, derive func(nonce []byte) string) ([]byte, error) {
	var nonce []byte
	// The license row is locked (and must exist) while its link changes; the row itself
	// does not change, so nothing leaves the license cache.
	err := pgxx.InTx(ctx, s.db, func(tx pgx.Tx) error {
		if _, err := get(ctx, tx, tenant, key, true); err != nil {
			return err
		}
		if !reset {
			err := tx.QueryRow(ctx, `SELECT nonce FROM portal_links WHERE key_hash = $1`, KeyHash(key)).Scan(&nonce)
			if err == nil {
				// Re-derived each time: a changed HMAC secret moves the stored hash along.
				_, err = tx.Exec(ctx, `UPDATE portal_links SET token_hash = $2 WHERE key_hash = $1 AND token_hash <> $2`,
					KeyHash(key), TokenHash(derive(nonce)))
				return err
			}
			if !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
		}
		nonce = make([]byte, 16)
		if _, err := rand.Read(nonce); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO portal_links (key_hash, tenant_id, nonce, token_hash) VALUES ($1, $2, $3, $4)
			ON CONFLICT (key_hash) DO UPDATE SET nonce = EXCLUDED.nonce, token_hash = EXCLUDED.token_hash, created_at = now()`,
			KeyHash(key), tenant, nonce, TokenHash(derive(nonce)))
		return err
	})
	return nonce, err
}

// LicenseByPortalToken returns the license a portal token belongs to, and whether its
// tenant has the portal switched on. ErrNotFound for an unknown token.
func (s *Store) LicenseByPortalToken(ctx context.Context, token string) (*License, bool, error) {
	var enabled bool
	var l License
	err := s.db.QueryRow(ctx, `SELECT l.tenant_id, l.key, l.tier, l.product_id, l.issued_to, l.issued_at, l.expires_at,
			l.status, l.limits, l.max_activations, l.revoked_at, l.notes, COALESCE(ps.enabled, true)
		FROM portal_links p JOIN licenses l ON l.key_hash = p.key_hash
		LEFT JOIN portal_settings ps ON ps.tenant_id = l.tenant_id
		WHERE p.token_hash = $1`, TokenHash(token)).
		Scan(&l.TenantID, &l.Key, &l.Tier, &l.ProductID, &l.IssuedTo, &l.IssuedAt, &l.ExpiresAt,
			&l.Status, &l.Limits, &l.MaxActivations, &l.RevokedAt, &l.Notes, &enabled)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, ErrNotFound
	}
	if err != nil {
		return nil, false, err
	}
	if l.Limits == nil {
		l.Limits = map[string]float64{}
	}
	return &l, enabled, nil
}

// PortalEnabled reports the tenant's portal switch (default on).
func (s *Store) PortalEnabled(ctx context.Context, tenant string) (bool, error) {
	var enabled bool
	err := s.db.QueryRow(ctx, `SELECT enabled FROM portal_settings WHERE tenant_id = $1`, tenant).Scan(&enabled)
	if errors.Is(err, pgx.ErrNoRows) {
		return true, nil
	}
	return enabled, err
}

// SetPortalEnabled sets the tenant's portal switch.
func (s *Store) SetPortalEnabled(ctx context.Context, tenant string, enabled bool) error {
	_, err := s.db.Exec(ctx, `INSERT INTO portal_settings (tenant_id, enabled) VALUES ($1, $2)
		ON CONFLICT (tenant_id) DO UPDATE SET enabled = EXCLUDED.enabled, updated_at = now()`, tenant, enabled)
	return err
}
