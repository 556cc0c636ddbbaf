package migrations_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/keyhouse/keyhouse/devinfra/testkit"
	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/auth"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
	"github.com/keyhouse/keyhouse/services/billing/internal/store"
	"github.com/keyhouse/keyhouse/services/billing/migrations"
)

// Sessions that do not say which admin key opened them (self-hosted sessions from before
// migration 11, or those an older billing replica opens during the upgrade) end at their
// next request, as migration 10 ended those that did not say what opened them; hosted
// sessions opened with the tenant's key go on.
func TestSelfHostedSessionsFromBeforeTheAdminKeyWasRecordedEnd(t *testing.T) {
	ctx := context.Background()
	url := testkit.DatabaseURL(t, testkit.Empty)
	if err := (pgxx.Migrations{Schema: "billing", FS: upTo(t, "00011")}).Apply(ctx, url); err != nil {
		t.Fatal(err)
	}
	db, err := pgxx.Open(ctx, url, "billing")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// What billing wrote before this release: the admin key's sessions and the hosted
	// tenant's key's sessions alike are 'key'.
	insert := `INSERT INTO console_sessions (token_hash, tenant_id, opened_with) VALUES ($1, $2, 'key')`
	selfHosted, hostedTenant := store.NewSessionToken(), store.NewSessionToken()
	if _, err := db.Exec(ctx, insert, auth.HashAPIKey(selfHosted), auth.SelfHostedTenant); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, insert, auth.HashAPIKey(hostedTenant), "t_hosted"); err != nil {
		t.Fatal(err)
	}
	if err := (pgxx.Migrations{Schema: "billing", FS: migrations.FS}).Apply(ctx, url); err != nil {
		t.Fatal(err)
	}
	// An older billing replica still writes 'key' during the upgrade, which the schema
	// allows; an admin key session without its fingerprint it does not.
	upgrading := store.NewSessionToken()
	if _, err := db.Exec(ctx, insert, auth.HashAPIKey(upgrading), auth.SelfHostedTenant); err != nil {
		t.Fatalf("an older billing's session after the migration: %v", err)
	}
	_, err = db.Exec(ctx, `INSERT INTO console_sessions (token_hash, tenant_id, opened_with) VALUES ('h', 'default', 'admin_key')`)
	if pgErr := (*pgconn.PgError)(nil); !errors.As(err, &pgErr) || pgErr.ConstraintName != "console_sessions_admin_key_named" {
		t.Fatalf("an admin key session without its fingerprint: %v", err)
	}

	s := store.New(db, nil)
	adminKey := auth.AdminKeyFingerprint("the-admin-key-0123456789abcdef0123")
	self := s.WithSessionKeys(store.SessionKeys{AdminKeys: []string{adminKey}})
	for _, token := range []string{selfHosted, upgrading} {
		if _, err := self.ResolveSession(ctx, token); !errors.Is(err, apierr.Unauthorized) {
			t.Fatalf("a self-hosted session that does not name its admin key: %v", err)
		}
		var n int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM console_sessions WHERE token_hash = $1`, auth.HashAPIKey(token)).Scan(&n); err != nil || n != 0 {
			t.Fatalf("the ended session's row: %d, %v", n, err)
		}
	}
	hosted := s.WithSessionKeys(store.SessionKeys{MultiTenant: true, AdminKeys: []string{adminKey}})
	if tenant, err := hosted.ResolveSession(ctx, hostedTenant); err != nil || tenant != "t_hosted" {
		t.Fatalf("a hosted session opened with the tenant's key: %q, %v", tenant, err)
	}
}
