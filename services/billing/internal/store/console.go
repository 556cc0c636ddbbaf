package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/auth"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
)

// SessionIdle is how long a console session lives without use (addendum §9).
const SessionIdle = 12 * time.Hour

// touchEvery keeps a busy session from writing its row on every call: last_seen_at is
// moved forward at most once a minute, which shifts the idle expiry by at most that.
const touchEvery = time.Minute

// NewSessionToken returns a fresh console session token: the prefix and 256 random bits.
func NewSessionToken() string { return auth.SessionPrefix + random(32) }

// What opened a console session (console_sessions.opened_with): the session ends with it.
const (
	// OpenedByKey: the tenant's key (self-hosted, the admin key); rotating it ends every
	// session of the tenant.
	OpenedByKey = "key"
	// OpenedByAPIKey: an extra API key (Opener.APIKeyID); the session ends when the key is
	// deleted or expires.
	OpenedByAPIKey = "api_key"
	// OpenedByPassword: the console password; setting a new one ends the session.
	OpenedByPassword = "password"
)

// Opener is the credential that opened a console session.
type Opener struct {
	// Kind is OpenedByKey, OpenedByAPIKey or OpenedByPassword.
	Kind string
	// APIKeyID is the extra key's id when Kind is OpenedByAPIKey.
	APIKeyID string
}

// CreateSession stores a session for tenant, opened with opener, and returns its token.
func (s *Store) CreateSession(ctx context.Context, tenant string, opener Opener) (string, error) {
	token := NewSessionToken()
	var keyID *string
	if opener.Kind == OpenedByAPIKey {
		keyID = &opener.APIKeyID
	}
	_, err := s.db.Exec(ctx, `INSERT INTO console_sessions (token_hash, tenant_id, opened_with, api_key_id) VALUES ($1, $2, $3, $4)`,
		auth.HashAPIKey(token), tenant, opener.Kind, keyID)
	if pgxx.IsForeignKeyViolation(err, "") {
		// The extra key was deleted between its check and this insert.
		return "", apierr.Unauthorized
	}
	if err != nil {
		return "", err
	}
	// Expired rows are swept on the way, so the table holds only live sessions.
	_, _ = s.db.Exec(ctx, `DELETE FROM console_sessions WHERE last_seen_at < now() - make_interval(secs => $1)`, SessionIdle.Seconds())
	return token, nil
}

// ResolveSession returns the tenant of a live session and keeps it alive. A session is
// live while it has been used within SessionIdle and the credential that opened it still
// works: an extra key's session ends when the key expires (deleting the key deletes the
// session). A session that does not say what opened it (from before migration 10) is not
// live.
func (s *Store) ResolveSession(ctx context.Context, token string) (string, error) {
	var (
		tenant      string
		seen        time.Time
		now         time.Time
		openerWorks bool
	)
	hash := auth.HashAPIKey(token)
	err := s.db.QueryRow(ctx, `
		SELECT s.tenant_id, s.last_seen_at, now(),
			s.opened_with IS NOT NULL AND (s.api_key_id IS NULL OR (k.id IS NOT NULL AND (k.expires_at IS NULL OR k.expires_at > now())))
		FROM console_sessions s LEFT JOIN api_keys k ON k.id = s.api_key_id
		WHERE s.token_hash = $1`, hash).
		Scan(&tenant, &seen, &now, &openerWorks)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", apierr.Unauthorized
	}
	if err != nil {
		return "", err
	}
	if !openerWorks || now.Sub(seen) > SessionIdle {
		_, _ = s.db.Exec(ctx, `DELETE FROM console_sessions WHERE token_hash = $1`, hash)
		return "", apierr.Unauthorized
	}
	if now.Sub(seen) > touchEvery {
		if _, err := s.db.Exec(ctx, `UPDATE console_sessions SET last_seen_at = now() WHERE token_hash = $1`, hash); err != nil {
			return "", err
		}
	}
	return tenant, nil
}

// DeleteSession ends one session.
func (s *Store) DeleteSession(ctx context.Context, token string) error {
	_, err := s.db.Exec(ctx, `DELETE FROM console_sessions WHERE token_hash = $1`, auth.HashAPIKey(token))
	return err
}

// GetTenant returns a hosted tenant and whether it has a console password.
func (s *Store) GetTenant(ctx context.Context, tenant string) (Tenant, bool, error) {
	var (
		t    = Tenant{ID: tenant}
		hash *string
	)
	err := s.db.QueryRow(ctx, `SELECT name, email, created_at, password_hash FROM tenants WHERE tenant_id = $1`, tenant).
		Scan(&t.Name, &t.Email, &t.CreatedAt, &hash)
	if errors.Is(err, pgx.ErrNoRows) {
		return t, false, apierr.Unauthorized
	}
	return t, hash != nil, err
}

// SetPasswordHash stores the tenant's console password hash and, in the same
// transaction, ends every session opened with the password it replaces, except the
// caller's (caller: the calling credential, a session token or a key).
func (s *Store) SetPasswordHash(ctx context.Context, tenant, hash, caller string) error {
	return pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE tenants SET password_hash = $2 WHERE tenant_id = $1`, tenant, hash); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `DELETE FROM console_sessions WHERE tenant_id = $1 AND opened_with = $2 AND token_hash <> $3`,
			tenant, OpenedByPassword, auth.HashAPIKey(caller))
		return err
	})
}

// PasswordCandidate is a tenant that may sign in with an email.
type PasswordCandidate struct {
	TenantID, Hash string
}

// PasswordCandidates returns the tenants with that email (case-insensitive) and a password.
func (s *Store) PasswordCandidates(ctx context.Context, email string) ([]PasswordCandidate, error) {
	rows, err := s.db.Query(ctx,
		`SELECT tenant_id, password_hash FROM tenants WHERE lower(email) = lower($1) AND password_hash IS NOT NULL ORDER BY created_at LIMIT 10`, email)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[PasswordCandidate])
}
