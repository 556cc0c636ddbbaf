package store_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/auth"
	"github.com/keyhouse/keyhouse/services/billing/internal/store"
)

// Self-hosted, a console session opened with the admin key lives while the billing
// process resolving it accepts that key: through a rotation's bridge (the old key as
// ADMIN_API_KEY_PREVIOUS), not after it. During a rolling restart replicas disagree on
// the key; one that refuses the session, however often and at the same time as the
// others, does not end it for a replica that still accepts its key.
func TestAnAdminKeySessionLivesWhileItsKeyIsAccepted(t *testing.T) {
	ctx := context.Background()
	s, _ := newStoreDB(t)
	oldKey, newKey := auth.AdminKeyFingerprint("old-admin-key-0123456789abcdef0123"), auth.AdminKeyFingerprint("new-admin-key-0123456789abcdef0123")
	onOld := s.WithSessionKeys(store.SessionKeys{AdminKeys: []string{oldKey}})
	bridging := s.WithSessionKeys(store.SessionKeys{AdminKeys: []string{newKey, oldKey}})
	onNew := s.WithSessionKeys(store.SessionKeys{AdminKeys: []string{newKey}})

	token, err := onOld.CreateSession(ctx, auth.SelfHostedTenant, store.Opener{Kind: store.OpenedByAdminKey, AdminKeyFingerprint: oldKey})
	if err != nil {
		t.Fatal(err)
	}
	for name, st := range map[string]*store.Store{"the old key": onOld, "the new key and the old one as the previous": bridging} {
		if tenant, err := st.ResolveSession(ctx, token); err != nil || tenant != auth.SelfHostedTenant {
			t.Fatalf("on a replica with %s: %q, %v", name, tenant, err)
		}
	}

	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for range 16 {
		wg.Go(func() {
			if _, err := onNew.ResolveSession(ctx, token); !errors.Is(err, apierr.Unauthorized) {
				errs <- errors.New("a replica on the new key alone resolved the old key's session")
			}
		})
		wg.Go(func() {
			if _, err := onOld.ResolveSession(ctx, token); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("replicas on different keys at once: %v", err)
	}
	if _, err := onOld.ResolveSession(ctx, token); err != nil {
		t.Fatalf("on the old key after the new key's replicas refused it: %v", err)
	}

	// A session opened with the new key is the new key's, whichever keys the replica that
	// opened it also accepted.
	fresh, err := bridging.CreateSession(ctx, auth.SelfHostedTenant, store.Opener{Kind: store.OpenedByAdminKey, AdminKeyFingerprint: newKey})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := onNew.ResolveSession(ctx, fresh); err != nil {
		t.Fatalf("the new key's session on the new key: %v", err)
	}
	if _, err := onOld.ResolveSession(ctx, fresh); !errors.Is(err, apierr.Unauthorized) {
		t.Fatalf("the new key's session on a replica with the old key alone: %v", err)
	}

	// Hosted, the admin key is never a tenant credential: its session ends.
	hosted := s.WithSessionKeys(store.SessionKeys{MultiTenant: true, AdminKeys: []string{oldKey}})
	if _, err := hosted.ResolveSession(ctx, token); !errors.Is(err, apierr.Unauthorized) {
		t.Fatalf("an admin key session, hosted: %v", err)
	}
	if _, err := onOld.ResolveSession(ctx, token); !errors.Is(err, apierr.Unauthorized) {
		t.Fatalf("an admin key session after a hosted billing refused it: %v", err)
	}
}
