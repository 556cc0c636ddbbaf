// Package store is the billing schema's SQL.
package store

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/auth"
	"github.com/keyhouse/keyhouse/pkg/events"
	"github.com/keyhouse/keyhouse/pkg/idempotency"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
)

// Store reads and writes tenants and their keys. A key rotation is api_key.rotated and a
// move of a tenant's plan billing.plan_changed, emitted in its transaction (pkg/events).
type Store struct {
	db    *pgxpool.Pool
	spine *events.Spine
	// sessionKeys decides whether a console session's opener still works (WithSessionKeys).
	sessionKeys SessionKeys
}

// New returns a Store on db (search_path = billing); spine may be nil (no post-commit
// path: the events are written all the same).
func New(db *pgxpool.Pool, spine *events.Spine) *Store { return &Store{db: db, spine: spine} }

// Tenant is a hosted account.
type Tenant struct {
	ID, Name, Email string
	CreatedAt       time.Time
}

var b32 = base32.StdEncoding.WithPadding(base32.NoPadding)

func random(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return b32.EncodeToString(b)
}

// NewAPIKey returns a fresh key: "kh_" and 256 random bits.
func NewAPIKey() string { return "kh_" + random(32) }

// CreateTenant stores a tenant; answer turns it and its first API key (shown once) into
// the call's answer. Under an Idempotency-Key the answer is stored sealed with the tenant
// (Idempotency), and a repeated request gets it back and creates nothing. The operator
// is no tenant: its keys are kept under operatorScope.
func (s *Store) CreateTenant(ctx context.Context, idem Idempotency, name, email string,
	answer func(Tenant, string) ([]byte, error)) ([]byte, error) {
	return s.idempotent(ctx, idem, operatorScope, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
		t := Tenant{ID: "t_" + lower(random(16)), Name: name, Email: email}
		key := NewAPIKey()
		err := tx.QueryRow(ctx,
			`INSERT INTO tenants (tenant_id, name, email, api_key_hash) VALUES ($1, $2, $3, $4) RETURNING created_at`,
			t.ID, name, email, auth.HashAPIKey(key)).Scan(&t.CreatedAt)
		if pgxx.IsUniqueViolation(err, "tenants_email_unique") {
			return nil, ErrEmailTaken
		}
		if err != nil {
			return nil, err
		}
		return answer(t, key)
	})
}

// operatorScope is the tenant column of the operator's Idempotency-Keys: no tenant id is
// empty, so the operator's keys never meet a tenant's.
const operatorScope = ""

// Idempotency is the Idempotency-Key a create runs under (pkg/idempotency, addendum §8):
// Key "" when none was sent. Keys seals the stored answer, which shows a secret once (an
// API key), under the installation keyring.
type Idempotency struct {
	Keys        idempotency.Keys
	Key         string
	RequestHash []byte
}

// idempotent runs create in one transaction with the record of its answer
// (idempotency.DoSealed), with the post-commit path of the events it emits.
func (s *Store) idempotent(ctx context.Context, idem Idempotency, tenant string,
	create func(context.Context, pgx.Tx) ([]byte, error)) (resp []byte, err error) {
	ctx, done := s.spine.Track(ctx)
	resp, _, err = idempotency.DoSealed(ctx, s.db, idem.Keys, tenant, idem.Key, idem.RequestHash, func(tx pgx.Tx) ([]byte, error) {
		return create(ctx, tx)
	})
	done(err)
	return resp, err
}

// ErrEmailTaken refuses a second tenant with an email (compared case-insensitively; the
// unique index decides, so concurrent creates cannot both pass).
var ErrEmailTaken = apierr.Conflict("A tenant with this email already exists")

func lower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// ResolveAPIKey implements auth.TenantResolver: a hosted tenant's key (the one
// rotate-api-key rotates), an extra API key (either mode), or a console session. A
// suspended tenant's credential is auth.ErrTenantSuspended. Keys are found by their
// SHA-256 (an index probe on a hash of 256 random bits: nothing to time).
func (s *Store) ResolveAPIKey(ctx context.Context, apiKey string) (auth.Credential, error) {
	cred, _, err := s.ResolveOpener(ctx, apiKey)
	return cred, err
}

// ResolveOpener resolves a credential as ResolveAPIKey does and also says which key it
// is, for a console session it opens (a session token is no opener: its Opener is zero).
func (s *Store) ResolveOpener(ctx context.Context, apiKey string) (auth.Credential, Opener, error) {
	if auth.IsSessionToken(apiKey) {
		tenant, err := s.ResolveSession(ctx, apiKey)
		if err != nil {
			return auth.Credential{}, Opener{}, err
		}
		return auth.Credential{TenantID: tenant}, Opener{}, s.refuseSuspended(ctx, tenant)
	}
	hash := auth.HashAPIKey(apiKey)
	var (
		tenant    string
		suspended bool
	)
	err := s.db.QueryRow(ctx, `SELECT tenant_id, suspended_at IS NOT NULL FROM tenants WHERE api_key_hash = $1`, hash).Scan(&tenant, &suspended)
	switch {
	case err == nil && suspended:
		return auth.Credential{}, Opener{}, auth.ErrTenantSuspended
	case err == nil:
		return auth.Credential{TenantID: tenant}, Opener{Kind: OpenedByKey}, nil
	case !errors.Is(err, pgx.ErrNoRows):
		return auth.Credential{}, Opener{}, err
	}
	cred, id, ok, err := s.resolveExtraKey(ctx, hash)
	if err != nil {
		return auth.Credential{}, Opener{}, err
	}
	if !ok {
		return auth.Credential{}, Opener{}, apierr.Unauthorized
	}
	return cred, Opener{Kind: OpenedByAPIKey, APIKeyID: id}, nil
}

// refuseSuspended is auth.ErrTenantSuspended while the tenant is suspended; the
// self-hosted implicit tenant has no row and never is.
func (s *Store) refuseSuspended(ctx context.Context, tenant string) error {
	var suspended bool
	err := s.db.QueryRow(ctx, `SELECT suspended_at IS NOT NULL FROM tenants WHERE tenant_id = $1`, tenant).Scan(&suspended)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil
	case err != nil:
		return err
	case suspended:
		return auth.ErrTenantSuspended
	}
	return nil
}

// RotateAPIKey replaces the tenant's key, but only if oldKey is still the current one, so
// two concurrent rotations cannot both succeed and leave a caller with a dead key. When
// the caller is a console session (oldKey is its token), the session must still be live.
// Every console session of the tenant ends in the same transaction (addendum §9).
func (s *Store) RotateAPIKey(ctx context.Context, tenant, oldKey string) (string, error) {
	key := NewAPIKey()
	err := s.spine.InTx(ctx, s.db, func(ctx context.Context, tx pgx.Tx) error {
		guard := `api_key_hash = $2`
		if auth.IsSessionToken(oldKey) {
			guard = `EXISTS (SELECT 1 FROM console_sessions WHERE token_hash = $2 AND tenant_id = $1)`
		}
		tag, err := tx.Exec(ctx,
			`UPDATE tenants SET api_key_hash = $3, key_rotated_at = now() WHERE tenant_id = $1 AND `+guard,
			tenant, auth.HashAPIKey(oldKey), auth.HashAPIKey(key))
		if err != nil {
			return err
		}
		if tag.RowsAffected() != 1 {
			return apierr.Unauthorized
		}
		if _, err := tx.Exec(ctx, `DELETE FROM console_sessions WHERE tenant_id = $1`, tenant); err != nil {
			return err
		}
		return events.Emit(ctx, tx, events.APIKeyRotated(tenant))
	})
	if err != nil {
		return "", err
	}
	return key, nil
}

// WatermarkID is the installation's stable identifier.
func (s *Store) WatermarkID(ctx context.Context) (string, error) {
	var id string
	err := s.db.QueryRow(ctx, `SELECT watermark_id FROM installation`).Scan(&id)
	return id, err
}
