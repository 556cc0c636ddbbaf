package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/auth"
	"github.com/keyhouse/keyhouse/services/billing/internal/store"
)

// A key's last use is written at most once a minute, however busy the key; an expired
// key and a suspended tenant's keys are refused.
func TestResolvingAnExtraKey(t *testing.T) {
	ctx := context.Background()
	s, db := newStoreDB(t)
	ten := tenant(t, s)
	k, key, err := createAPIKey(s, ten, "ci", store.ScopeRead, nil)
	if err != nil {
		t.Fatal(err)
	}
	lastUsed := func() time.Time {
		t.Helper()
		var at *time.Time
		if err := db.QueryRow(ctx, `SELECT last_used_at FROM api_keys WHERE id = $1`, k.ID).Scan(&at); err != nil || at == nil {
			t.Fatalf("last_used_at %v, %v", at, err)
		}
		return *at
	}
	cred, err := s.ResolveAPIKey(ctx, key)
	if err != nil || cred != (auth.Credential{TenantID: ten, ReadOnly: true}) {
		t.Fatalf("resolved %+v, %v", cred, err)
	}
	first := lastUsed()
	for range 5 {
		if _, err := s.ResolveAPIKey(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	if got := lastUsed(); !got.Equal(first) {
		t.Fatalf("last_used_at moved within the minute: %v -> %v", first, got)
	}
	if _, err := db.Exec(ctx, `UPDATE api_keys SET last_used_at = now() - interval '2 minutes' WHERE id = $1`, k.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ResolveAPIKey(ctx, key); err != nil {
		t.Fatal(err)
	}
	if got := lastUsed(); !got.After(first) {
		t.Fatalf("last_used_at did not move after a minute: %v", got)
	}

	if _, err := s.SetSuspended(ctx, ten, true); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ResolveAPIKey(ctx, key); !errors.Is(err, auth.ErrTenantSuspended) {
		t.Fatalf("a suspended tenant's key: %v", err)
	}
	if _, err := s.SetSuspended(ctx, ten, false); err != nil {
		t.Fatal(err)
	}

	soon := time.Now().Add(time.Hour)
	_, short, err := createAPIKey(s, ten, "short", store.ScopeFull, &soon)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.ResolveAPIKey(ctx, short); err != nil {
		t.Fatalf("a live key: %v", err)
	}
	if _, err := db.Exec(ctx, `UPDATE api_keys SET expires_at = now() - interval '1 second' WHERE name = 'short'`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ResolveAPIKey(ctx, short); err != apierr.Unauthorized {
		t.Fatalf("an expired key: %v", err)
	}
}

// createAPIKey creates a key without an Idempotency-Key and returns it as stored, with the
// key itself.
func createAPIKey(s *store.Store, tenant, name, scope string, expiresAt *time.Time) (store.APIKey, string, error) {
	var (
		k   store.APIKey
		key string
	)
	_, err := s.CreateAPIKey(context.Background(), store.Idempotency{}, tenant, name, scope, expiresAt, func(created store.APIKey, shown string) ([]byte, error) {
		k, key = created, shown
		return nil, nil
	})
	return k, key, err
}

// createTenant creates a tenant without an Idempotency-Key and returns it with its key.
func createTenant(s *store.Store, name, email string) (store.Tenant, string, error) {
	var (
		t   store.Tenant
		key string
	)
	_, err := s.CreateTenant(context.Background(), store.Idempotency{}, name, email, func(created store.Tenant, shown string) ([]byte, error) {
		t, key = created, shown
		return nil, nil
	})
	return t, key, err
}
