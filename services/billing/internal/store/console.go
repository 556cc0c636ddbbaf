package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/auth"
)

// SessionIdle is how long a console session lives without use (addendum §9).
const SessionIdle = 12 * time.Hour

// touchEvery keeps a busy session from writing its row on every call: last_seen_at is
// moved forward at most once a minute, which shifts the idle expiry by at most that.
const touchEvery = time.Minute

// NewSessionToken returns a fresh console session token: the prefix and 256 random bits.
func NewSessionToken() string { return auth.SessionPrefix + random(32) }

// CreateSession stores a session for tenant and returns its token.
func (s *Store) CreateSession(ctx context.Context, tenant string) (string, error) {
	token := NewSessionToken()
	_, err := s.db.Exec(ctx, `INSERT INTO console_sessions (token_hash, tenant_id) VALUES ($1, $2)`,
		auth.HashAPIKey(token), tenant)
	if err != nil {
		return "", err
	}
	// Expired rows are swept on the way, so the table holds only live sessions.
	_, _ = s.db.Exec(ctx, `DELETE FROM console_sessions WHERE last_seen_at < now() - make_interval(secs => $1)`, SessionIdle.Seconds())
	return token, nil
}

// ResolveSession returns the tenant of a live session and keeps it alive.
func (s *Store) ResolveSession(ctx context.Context, token string) (string, error) {
	var (
		tenant string
		seen   time.Time
		now    time.Time
	)
	hash := auth.HashAPIKey(token)
	err := s.db.QueryRow(ctx, `SELECT tenant_id, last_seen_at, now() FROM console_sessions WHERE token_hash = $1`, hash).
		Scan(&tenant, &seen, &now)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", apierr.Unauthorized
	}
	if err != nil {
		return "", err
	}
	if now.Sub(seen) > SessionIdle {
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

// SetPasswordHash stores the tenant's console password hash.
func (s *Store) SetPasswordHash(ctx context.Context, tenant, hash string) error {
	_, err := s.db.Exec(ctx, `UPDATE tenants SET password_hash = $2 WHERE tenant_id = $1`, tenant, hash)
	return err
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
