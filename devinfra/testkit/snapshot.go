package testkit

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

// HoldSnapshot opens a REPEATABLE READ transaction on db and takes its snapshot, as a
// long transaction elsewhere in the database would: until release, Postgres keeps every
// row version deleted or updated after it and cannot mark their index entries dead (the
// dead front the outbox relay's and the webhook lanes' cursors skip). Call release before
// closing db's pool, which waits for the transaction's connection.
func HoldSnapshot(tb testing.TB, db interface {
	Begin(context.Context) (pgx.Tx, error)
}) (release func()) {
	tb.Helper()
	ctx := context.Background()
	tx, err := db.Begin(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	for _, q := range []string{`SET TRANSACTION ISOLATION LEVEL REPEATABLE READ`, `SELECT 1`} {
		if _, err := tx.Exec(ctx, q); err != nil {
			_ = tx.Rollback(ctx)
			tb.Fatal(err)
		}
	}
	return func() { _ = tx.Rollback(ctx) } // read only: nothing to keep
}
