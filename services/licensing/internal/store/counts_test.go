package store_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/keyhouse/keyhouse/pkg/tenantpurge"
	"github.com/keyhouse/keyhouse/services/licensing/internal/store"
)

// countsIn reads, in one snapshot, a tenant's license counts as the store keeps them and
// as counting the licenses finds them.
func countsIn(ctx context.Context, tx pgx.Tx, tenant string) (kept, counted store.Counts, err error) {
	err = tx.QueryRow(ctx, `SELECT COALESCE(sum(active), 0)::bigint, COALESCE(sum(revoked), 0)::bigint
		FROM license_counts WHERE tenant_id = $1`, tenant).Scan(&kept.Active, &kept.Revoked)
	if err != nil {
		return
	}
	err = tx.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'active'), count(*) FILTER (WHERE status = 'revoked')
		FROM licenses WHERE tenant_id = $1`, tenant).Scan(&counted.Active, &counted.Revoked)
	return
}

// The kept license counts are the licenses' counts in every snapshot, while two replicas
// issue, import, revoke and delete licenses of two tenants and both fold the counts at
// once; folded, a tenant's counts are one row, and a purged tenant has none.
func TestLicenseCountsAreExactInEverySnapshotWhileReplicasWriteAndFold(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, db := newStoreDB(t)
	b := store.New(db, nil)
	tenants := []string{"counts-a", "counts-b"}
	issue := func(s *store.Store, tenant, key string) error {
		return s.InTx(ctx, func(tx store.Tx) error {
			return tx.Insert(ctx, &store.License{TenantID: tenant, Key: key, Tier: "pro", ProductID: "app", IssuedTo: "x", Limits: map[string]float64{}})
		})
	}
	const writers, rounds = 4, 40
	var writes, folds sync.WaitGroup
	errs := make(chan error, writers+8)
	for w := range writers {
		s := []*store.Store{a, b}[w%2]
		tenant := tenants[w%2]
		writes.Go(func() {
			for i := range rounds {
				key := fmt.Sprintf("%s-W%d-%03d", tenant, w, i)
				if err := issue(s, tenant, key); err != nil {
					errs <- err
					return
				}
				var err error
				switch i % 4 {
				case 1: // revoked
					err = s.InTx(ctx, func(tx store.Tx) error { return tx.SetStatus(ctx, tenant, key, "revoked") })
				case 2: // deleted
					err = s.InTx(ctx, func(tx store.Tx) error { return tx.Delete(ctx, tenant, key) })
				case 3: // imported, a batch in one statement, one of them revoked
					now := time.Now()
					batch := []*store.License{
						{TenantID: tenant, Key: key + "-I1", Tier: "pro", ProductID: "app", IssuedTo: "x", Limits: map[string]float64{}, IssuedAt: now, Status: "active"},
						{TenantID: tenant, Key: key + "-I2", Tier: "pro", ProductID: "app", IssuedTo: "x", Limits: map[string]float64{}, IssuedAt: now, Status: "revoked", RevokedAt: &now},
					}
					err = s.InTx(ctx, func(tx store.Tx) error { return tx.InsertImported(ctx, batch) })
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	done := make(chan struct{})
	for _, s := range []*store.Store{a, b} {
		folds.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				if err := s.FoldCounts(ctx); err != nil {
					errs <- fmt.Errorf("fold: %w", err)
					return
				}
			}
		})
	}
	folds.Go(func() {
		for checked := 0; ; checked++ {
			select {
			case <-done:
				if checked == 0 {
					errs <- fmt.Errorf("no snapshot was checked")
				}
				return
			default:
			}
			err := pgx.BeginTxFunc(ctx, db, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
				for _, tenant := range tenants {
					kept, counted, err := countsIn(ctx, tx, tenant)
					if err != nil {
						return err
					}
					if kept != counted {
						return fmt.Errorf("%s: kept counts %+v, the licenses' %+v in the same snapshot", tenant, kept, counted)
					}
				}
				return nil
			})
			if err != nil {
				errs <- err
				return
			}
		}
	})
	writes.Wait()
	close(done)
	folds.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	if err := a.FoldCounts(ctx); err != nil {
		t.Fatal(err)
	}
	// Per tenant and writer: 40 issued, of which 10 revoked and 10 deleted, and 10 imports
	// of one active and one revoked license.
	want := store.Counts{Total: writers / 2 * 50, Active: writers / 2 * 30, Revoked: writers / 2 * 20}
	for _, tenant := range tenants {
		c, err := b.Counts(ctx, tenant)
		if err != nil || c != want {
			t.Errorf("%s: counts %+v, %v; want %+v", tenant, c, err, want)
		}
		var rows int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM license_counts WHERE tenant_id = $1`, tenant).Scan(&rows); err != nil || rows != 1 {
			t.Errorf("%s: %d rows of counts after a fold (%v), want 1", tenant, rows, err)
		}
	}
	rows, total, err := a.List(ctx, tenants[0], store.Filter{Status: "revoked", Limit: 1000})
	if err != nil || total != want.Revoked || len(rows) != total {
		t.Errorf("list-licenses status=revoked: %d rows, total %d, %v; want %d", len(rows), total, err, want.Revoked)
	}

	if err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error { _, err := tenantpurge.Purge(ctx, tx, tenants[1]); return err }); err != nil {
		t.Fatal(err)
	}
	var left int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM license_counts WHERE tenant_id = $1`, tenants[1]).Scan(&left); err != nil || left != 0 {
		t.Errorf("a purged tenant keeps %d rows of counts (%v)", left, err)
	}
	if c, err := a.Counts(ctx, tenants[0]); err != nil || c != want {
		t.Errorf("the other tenant's counts after the purge: %+v, %v; want %+v", c, err, want)
	}
}
