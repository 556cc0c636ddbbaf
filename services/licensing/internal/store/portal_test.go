package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/keyhouse/keyhouse/services/licensing/internal/store"
)

// derive stands for the server's HMAC derivation: a token from the nonce.
func derive(nonce []byte) string { return fmt.Sprintf("token-%x-0123456789", nonce) }

func portalLicense(t *testing.T, s *store.Store, tenant, key string) {
	t.Helper()
	if err := s.InTx(context.Background(), func(tx store.Tx) error {
		return tx.Insert(context.Background(), &store.License{TenantID: tenant, Key: key, Tier: "pro", ProductID: "p", IssuedTo: "x", Limits: map[string]float64{}})
	}); err != nil {
		t.Fatal(err)
	}
}

// A license has one link: concurrent first views agree on it, a reset replaces it, the
// token finds its license, and the link goes with the license.
func TestPortalLinkIsOnePerLicenseAndGoesWithIt(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	portalLicense(t, s, "t1", "KEY-1")

	nonces := make([][]byte, 8)
	var wg sync.WaitGroup
	for i := range nonces {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := s.PortalLink(ctx, "t1", "KEY-1", false, derive)
			if err != nil {
				t.Error(err)
			}
			nonces[i] = n
		}()
	}
	wg.Wait()
	for _, n := range nonces[1:] {
		if derive(n) != derive(nonces[0]) {
			t.Fatalf("concurrent first views made different links: %x, %x", n, nonces[0])
		}
	}
	token := derive(nonces[0])
	l, enabled, err := s.LicenseByPortalToken(ctx, token)
	if err != nil || l.Key != "KEY-1" || l.TenantID != "t1" || !enabled {
		t.Fatalf("token finds %+v, enabled %v, %v", l, enabled, err)
	}

	// Another tenant cannot make or read a link of this license.
	if _, err := s.PortalLink(ctx, "t2", "KEY-1", false, derive); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("another tenant's link: %v", err)
	}

	// The switch.
	if err := s.SetPortalEnabled(ctx, "t1", false); err != nil {
		t.Fatal(err)
	}
	if _, enabled, _ := s.LicenseByPortalToken(ctx, token); enabled {
		t.Fatal("the switch is off but the token reports it on")
	}
	_ = s.SetPortalEnabled(ctx, "t1", true)

	// A reset retires the old token.
	fresh, err := s.PortalLink(ctx, "t1", "KEY-1", true, derive)
	if err != nil || derive(fresh) == token {
		t.Fatalf("reset: %x, %v", fresh, err)
	}
	if _, _, err := s.LicenseByPortalToken(ctx, token); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("old token after reset: %v", err)
	}

	// Deleting the license deletes its link.
	if err := s.InTx(ctx, func(tx store.Tx) error { return tx.Delete(ctx, "t1", "KEY-1") }); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.LicenseByPortalToken(ctx, derive(fresh)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("token of a deleted license: %v", err)
	}
}
