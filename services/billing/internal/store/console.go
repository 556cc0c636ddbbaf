package store

import (
	"context"
	"errors"
	"slices"
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
	// OpenedByKey: the hosted tenant's key; rotating it ends every session of the tenant.
	OpenedByKey = "key"
	// OpenedByAdminKey: self-hosted, the admin key (Opener.AdminKeyFingerprint); the
	// session ends once the admin keys in force (SessionKeys.AdminKeys) no longer include
	// it.
	OpenedByAdminKey = "admin_key"
	// OpenedByAPIKey: an extra API key (Opener.APIKeyID); the session ends when the key is
	// deleted or expires.
	OpenedByAPIKey = "api_key"
	// OpenedByPassword: the console password; setting a new one ends the session.
	OpenedByPassword = "password"
)

// Opener is the credential that opened a console session.
type Opener struct {
	// Kind is OpenedByKey, OpenedByAdminKey, OpenedByAPIKey or OpenedByPassword.
	Kind string
	// APIKeyID is the extra key's id when Kind is OpenedByAPIKey.
	APIKeyID string
	// AdminKeyFingerprint is auth.AdminKeyFingerprint of the admin key when Kind is
	// OpenedByAdminKey: never the key itself.
	AdminKeyFingerprint string
}

// SessionKeys is what the process knows, beside the database, of the credentials that
// open console sessions: its mode and the admin keys it accepts.
type SessionKeys struct {
	// MultiTenant is MULTI_TENANT. Hosted, sessions are opened with tenant credentials;
	// self-hosted, with the admin key, and there is no tenant key.
	MultiTenant bool
	// AdminKeys are the auth.AdminKeyFingerprint of each admin key this process accepts:
	// ADMIN_API_KEY and, during a rotation, ADMIN_API_KEY_PREVIOUS.
	AdminKeys []string
}

// WithSessionKeys returns the store resolving console sessions with k. Without it, the
// store is self-hosted with no admin key: no session opened with the admin key is live.
func (s *Store) WithSessionKeys(k SessionKeys) *Store {
	c := *s
	c.sessionKeys = k
	return &c
}

// CreateSession stores a session for tenant, opened with opener, and returns its token.
func (s *Store) CreateSession(ctx context.Context, tenant string, opener Opener) (string, error) {
	token := NewSessionToken()
	var keyID, fingerprint *string
	switch opener.Kind {
	case OpenedByAPIKey:
		keyID = &opener.APIKeyID
	case OpenedByAdminKey:
		fingerprint = &opener.AdminKeyFingerprint
	}
	_, err := s.db.Exec(ctx, `INSERT INTO console_sessions (token_hash, tenant_id, opened_with, api_key_id, admin_key_fingerprint) VALUES ($1, $2, $3, $4, $5)`,
		auth.HashAPIKey(token), tenant, opener.Kind, keyID, fingerprint)
	if pgxx.IsForeignKeyViolation(err, "") {
		// The extra key was deleted between its check and this insert.
		return "", apierr.Unauthorized
	}
	if err != nil {
		return "", err
	}
	// Expired rows are swept on the way, so the table holds only live sessions (and those
	// of an admin key no longer in force, until they are idle: see ResolveSession).
	_, _ = s.db.Exec(ctx, `DELETE FROM console_sessions WHERE last_seen_at < now() - make_interval(secs => $1)`, SessionIdle.Seconds())
	return token, nil
}

// ResolveSession returns the tenant of a live session and keeps it alive. A session is
// live while it has been used within SessionIdle and the credential that opened it still
// works (openerWorks). A session that is not live is deleted, except one whose admin key
// this process does not accept: another billing replica may (a rolling restart onto a new
// ADMIN_API_KEY), and the session is live there while it is; it is swept once idle.
func (s *Store) ResolveSession(ctx context.Context, token string) (string, error) {
	var (
		tenant      string
		seen        time.Time
		now         time.Time
		openedWith  string
		fingerprint string
		apiKeyLive  bool
	)
	hash := auth.HashAPIKey(token)
	err := s.db.QueryRow(ctx, `
		SELECT s.tenant_id, s.last_seen_at, now(), coalesce(s.opened_with, ''), coalesce(s.admin_key_fingerprint, ''),
			k.id IS NOT NULL AND (k.expires_at IS NULL OR k.expires_at > now())
		FROM console_sessions s LEFT JOIN api_keys k ON k.id = s.api_key_id
		WHERE s.token_hash = $1`, hash).
		Scan(&tenant, &seen, &now, &openedWith, &fingerprint, &apiKeyLive)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", apierr.Unauthorized
	}
	if err != nil {
		return "", err
	}
	idle := now.Sub(seen) > SessionIdle
	works, maybeElsewhere := s.openerWorks(openedWith, fingerprint, apiKeyLive)
	if idle || !works {
		if idle || !maybeElsewhere {
			_, _ = s.db.Exec(ctx, `DELETE FROM console_sessions WHERE token_hash = $1`, hash)
		}
		return "", apierr.Unauthorized
	}
	if now.Sub(seen) > touchEvery {
		if _, err := s.db.Exec(ctx, `UPDATE console_sessions SET last_seen_at = now() WHERE token_hash = $1`, hash); err != nil {
			return "", err
		}
	}
	return tenant, nil
}

// openerWorks says whether the credential that opened a session (its opened_with, its
// admin key's fingerprint, and whether its extra key exists and has not expired) still
// works, and, when it does not, whether it may still work on another billing replica.
func (s *Store) openerWorks(openedWith, fingerprint string, apiKeyLive bool) (works, maybeElsewhere bool) {
	switch openedWith {
	case OpenedByAdminKey:
		if s.sessionKeys.MultiTenant {
			// Hosted, the admin key is never a tenant credential.
			return false, false
		}
		return slices.Contains(s.sessionKeys.AdminKeys, fingerprint), true
	case OpenedByKey:
		// Hosted, rotating the tenant's key deletes its sessions. Self-hosted there is no
		// tenant key: the session was opened with the admin key without recording which
		// (before migration 11, or by an older billing replica during the upgrade), and
		// its holder signs in again.
		return s.sessionKeys.MultiTenant, false
	case OpenedByAPIKey:
		// Deleting the key deletes the session; an expired key ends it here.
		return apiKeyLive, false
	case OpenedByPassword:
		return true, false
	default:
		// Opened before migration 10, which records what opens a session.
		return false, false
	}
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
