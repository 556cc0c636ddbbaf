package store_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/devinfra/testkit"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
	"github.com/keyhouse/keyhouse/pkg/signing"
	"github.com/keyhouse/keyhouse/services/licensing/internal/store"
	"github.com/keyhouse/keyhouse/services/licensing/migrations"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// schema is the licensing schema as the production migrations make it.
var schema = testkit.Template{Name: "licensing", Migrate: pgxx.Migrations{Schema: "licensing", FS: migrations.FS}.Apply}

// newStore is a store on a database of the test's own.
func newStore(t *testing.T) *store.Store {
	t.Helper()
	db, err := pgxx.Open(context.Background(), testkit.DatabaseURL(t, schema), "licensing")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	return store.New(db, nil)
}

// Replicas starting together on an empty database each generate a keyring; exactly one is
// kept and every replica signs with it (invariant 7).
func TestKeyringReplicasStartingTogetherAgree(t *testing.T) {
	s := newStore(t)
	const replicas = 6
	docs := make([][]byte, replicas)
	var wg sync.WaitGroup
	for i := range docs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			doc, err := s.Keyring(context.Background(), func() ([]byte, error) {
				k, err := signing.NewKeyring()
				if err != nil {
					return nil, err
				}
				return signing.MarshalKeyring(k)
			})
			if err != nil {
				t.Error(err)
			}
			docs[i] = doc
		}()
	}
	wg.Wait()
	first, err := signing.ParseKeyring(docs[0])
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range docs {
		k, err := signing.ParseKeyring(d)
		if err != nil || k.KeyID() != first.KeyID() {
			t.Fatalf("replica %d has keyring %v (%v), replica 0 %v", i, k, err, first)
		}
	}
	// A later start reads the stored one and generates nothing.
	again, err := s.Keyring(context.Background(), func() ([]byte, error) { return nil, errors.New("must not generate") })
	if err != nil || string(again) != string(docs[0]) {
		t.Fatalf("restart: %v", err)
	}
}

// ProductOwner reads the owner, whatever the spelling, and claims nothing.
func TestProductOwnerClaimsNothing(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	if owner, err := s.ProductOwner(ctx, "free-app"); owner != "" || err != nil {
		t.Fatalf("owner %q err %v", owner, err)
	}
	if err := s.ClaimProduct(ctx, "t2", "free-app"); err != nil {
		t.Fatalf("the product was taken by a read: %v", err)
	}
	if owner, err := s.ProductOwner(ctx, " FREE-APP\t"); owner != "t2" || err != nil {
		t.Fatalf("owner %q err %v", owner, err)
	}
}

// Two tenants claiming one product at once: one owner, whatever the spelling.
func TestClaimProductOneOwner(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	for round := 0; round < 20; round++ {
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				base := fmt.Sprintf("app-%d", round)
				spelling := []string{base, " " + base + " ", strings.ToUpper(base), "\t" + base}[i]
				errs[i] = s.ClaimProduct(ctx, fmt.Sprintf("t%d", i), spelling)
			}()
		}
		wg.Wait()
		owners := 0
		for _, err := range errs {
			switch {
			case err == nil:
				owners++
			case !errors.Is(err, store.ErrProductOwned):
				t.Fatal(err)
			}
		}
		if owners != 1 {
			t.Fatalf("round %d: %d owners (%v)", round, owners, errs)
		}
	}
}

// Tx.ClaimProduct commits with the transaction's license or not at all: a transaction
// that fails after its claim leaves the product free, and of tenants whose transactions
// claim a new product and insert a license at once, one owns it and only its license is
// stored.
func TestClaimProductInATransactionCommitsWithTheLicense(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	refused := errors.New("refused after the claim")
	err := s.InTx(ctx, func(tx store.Tx) error {
		if err := tx.ClaimProduct(ctx, "t0", "rolled-back"); err != nil {
			return err
		}
		return refused
	})
	if !errors.Is(err, refused) {
		t.Fatal(err)
	}
	if owner, err := s.ProductOwner(ctx, "rolled-back"); owner != "" || err != nil {
		t.Fatalf("a rolled-back claim left owner %q (err %v)", owner, err)
	}
	for round := 0; round < 20; round++ {
		product := fmt.Sprintf("tx-app-%d", round)
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tenant := fmt.Sprintf("t%d", i)
				errs[i] = s.InTx(ctx, func(tx store.Tx) error {
					if err := tx.ClaimProduct(ctx, tenant, product); err != nil {
						return err
					}
					return tx.Insert(ctx, &store.License{TenantID: tenant, Key: fmt.Sprintf("K-%d-%d", round, i), Tier: "pro",
						ProductID: product, IssuedTo: "x", Limits: map[string]float64{}})
				})
			}()
		}
		wg.Wait()
		winner := ""
		for i, err := range errs {
			tenant := fmt.Sprintf("t%d", i)
			_, getErr := s.Get(ctx, tenant, fmt.Sprintf("K-%d-%d", round, i))
			switch {
			case err == nil && winner == "" && getErr == nil:
				winner = tenant
			case err == nil:
				t.Fatalf("round %d: %s won too (winner %s, license err %v)", round, tenant, winner, getErr)
			case !errors.Is(err, store.ErrProductOwned):
				t.Fatal(err)
			case !errors.Is(getErr, store.ErrNotFound):
				t.Fatalf("round %d: %s lost the claim but its license is stored (%v)", round, tenant, getErr)
			}
		}
		if owner, err := s.ProductOwner(ctx, product); winner == "" || owner != winner || err != nil {
			t.Fatalf("round %d: winner %q, owner %q (err %v)", round, winner, owner, err)
		}
	}
}

// A deletion is remembered for license.EventRetention, per tenant, and a failed delete
// (no such license) remembers nothing.
func TestDeletedKeysRememberTheTenantsDeletions(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	insert := func(tenant, key string) {
		t.Helper()
		if err := s.InTx(ctx, func(tx store.Tx) error {
			return tx.Insert(ctx, &store.License{TenantID: tenant, Key: key, Tier: "pro", ProductID: "p", IssuedTo: "x", Limits: map[string]float64{}})
		}); err != nil {
			t.Fatal(err)
		}
	}
	del := func(tenant, key string) error {
		return s.InTx(ctx, func(tx store.Tx) error { return tx.Delete(ctx, tenant, key) })
	}
	insert("t1", "K1")
	insert("t1", "K2")
	insert("t2", "K3")
	for _, k := range []string{"K1", "K2"} {
		if err := del("t1", k); err != nil {
			t.Fatal(err)
		}
	}
	if err := del("t1", "K3"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("deleting another tenant's license: %v", err)
	}
	keys, err := s.DeletedKeys(ctx, "t1")
	slices.Sort(keys)
	if err != nil || strings.Join(keys, ",") != "K1,K2" {
		t.Fatalf("t1 deleted %v, %v", keys, err)
	}
	if keys, err := s.DeletedKeys(ctx, "t2"); err != nil || len(keys) != 0 {
		t.Fatalf("t2 deleted %v, %v", keys, err)
	}
}

// A tenant that deleted more licenses than MaxDeletedKeys within the retention gets the
// newest ones: the list stays small enough for one gRPC message.
func TestDeletedKeysAreTheNewestAndBounded(t *testing.T) {
	ctx := context.Background()
	db, err := pgxx.Open(ctx, testkit.DatabaseURL(t, schema), "licensing")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	s := store.New(db, nil)
	tenant := fmt.Sprintf("t-bulk-%d", time.Now().UnixNano())
	// Older deletions first: key B-00001 is the oldest, B-<n> the newest.
	n := store.MaxDeletedKeys + 5
	if _, err := db.Exec(ctx, `INSERT INTO deleted_licenses (tenant_id, key, deleted_at)
		SELECT $1, 'B-' || lpad(i::text, 5, '0'), now() - interval '1 hour' + i * interval '1 millisecond'
		FROM generate_series(1, $2) AS i`, tenant, n); err != nil {
		t.Fatal(err)
	}
	keys, err := s.DeletedKeys(ctx, tenant)
	if err != nil || len(keys) != store.MaxDeletedKeys {
		t.Fatalf("%d keys, %v; want %d", len(keys), err, store.MaxDeletedKeys)
	}
	if keys[0] != fmt.Sprintf("B-%05d", n) || keys[len(keys)-1] != "B-00006" {
		t.Fatalf("keys run from %s to %s, want the newest (B-%05d) to B-00006", keys[0], keys[len(keys)-1], n)
	}
}

// A deletion is remembered for good for imports (DeletedAmong), beyond the retention
// DeletedKeys reads: a later deletion prunes nothing, and another tenant's is not it.
func TestDeletedAmongRemembersEveryDeletionOfTheTenant(t *testing.T) {
	ctx := context.Background()
	s, db := newStoreDB(t)
	tenant := fmt.Sprintf("t-gone-%d", time.Now().UnixNano())
	if err := s.InTx(ctx, func(tx store.Tx) error {
		return tx.Insert(ctx, &store.License{TenantID: tenant, Key: "NEW-KEY-1", Tier: "pro", ProductID: "p", IssuedTo: "x", Limits: map[string]float64{}})
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `INSERT INTO deleted_licenses (tenant_id, key, deleted_at) VALUES ($1, 'OLD-KEY-1', now() - interval '400 days')`, tenant); err != nil {
		t.Fatal(err)
	}
	if err := s.InTx(ctx, func(tx store.Tx) error { return tx.Delete(ctx, tenant, "NEW-KEY-1") }); err != nil {
		t.Fatal(err)
	}
	var got, other map[string]bool
	if err := s.InTx(ctx, func(tx store.Tx) error {
		var err error
		if got, err = tx.DeletedAmong(ctx, tenant, []string{"OLD-KEY-1", "NEW-KEY-1", "LIVE-KEY-1"}); err != nil {
			return err
		}
		other, err = tx.DeletedAmong(ctx, tenant+"-other", []string{"OLD-KEY-1", "NEW-KEY-1"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !got["OLD-KEY-1"] || !got["NEW-KEY-1"] || len(other) != 0 {
		t.Fatalf("deleted %v, another tenant's %v", got, other)
	}
}
