package tenantpurge_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/keyhouse/keyhouse/devinfra/testkit"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
	"github.com/keyhouse/keyhouse/pkg/tenantpurge"
)

// Writers of a tenant (Forgotten, then the insert) on many connections (replicas, to the database) race its purge:
// once the purge committed and the writers stopped, no row of the tenant is left, every
// write after the purge was refused with "Tenant not found", and another tenant's writes
// all went through.
func TestAPurgeRacingWritersLeavesNoRowAndRefusesTheWritesAfterIt(t *testing.T) {
	ctx := context.Background()
	db, err := pgxx.Open(ctx, testkit.DatabaseURL(t, testkit.Empty), "svc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	if _, err := db.Exec(ctx, `CREATE SCHEMA svc; CREATE TABLE svc.seats (tenant_id text NOT NULL, n int NOT NULL);`+
		tenantpurge.TombstoneTableSQL); err != nil {
		t.Fatal(err)
	}
	write := func(tenant string, n int) error {
		return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			gone, err := tenantpurge.Forgotten(ctx, tx, []string{tenant})
			if err != nil {
				return err
			}
			if gone[tenant] {
				return tenantpurge.ErrTenantNotFound
			}
			_, err = tx.Exec(ctx, `INSERT INTO seats VALUES ($1, $2)`, tenant, n)
			return err
		})
	}
	for round := range 5 {
		gone, kept := fmt.Sprint("t-gone-", round), fmt.Sprint("t-kept-", round)
		var stop atomic.Bool
		var refused, keptWrites atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		for w := range 8 {
			wg.Go(func() {
				for i := 0; !stop.Load() || i < 20; i++ {
					err := write(gone, w*100000+i)
					if errors.Is(err, tenantpurge.ErrTenantNotFound) {
						refused.Add(1)
						if stop.Load() {
							return
						}
						continue
					}
					if err != nil {
						errs <- err
						return
					}
					if err := write(kept, i); err != nil {
						errs <- err
						return
					}
					keptWrites.Add(1)
				}
			})
		}
		if err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error { return tenantpurge.ForgetInTx(ctx, tx, gone) }); err != nil {
			t.Fatal(err)
		}
		stop.Store(true)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		var left, keptRows int64
		if err := db.QueryRow(ctx, `SELECT count(*) FILTER (WHERE tenant_id = $1), count(*) FILTER (WHERE tenant_id = $2) FROM seats`, gone, kept).Scan(&left, &keptRows); err != nil {
			t.Fatal(err)
		}
		if left != 0 {
			t.Fatalf("round %d: %d rows of the purged tenant left", round, left)
		}
		if keptRows != keptWrites.Load() {
			t.Fatalf("round %d: the other tenant has %d rows, %d writes succeeded", round, keptRows, keptWrites.Load())
		}
		if refused.Load() == 0 {
			t.Fatalf("round %d: no write after the purge was refused", round)
		}
		if err := write(gone, -1); !errors.Is(err, tenantpurge.ErrTenantNotFound) {
			t.Fatalf("round %d: a write after the purge: %v, want Tenant not found", round, err)
		}
	}
}
