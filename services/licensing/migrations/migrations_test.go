package migrations_test

import (
	"testing"

	"github.com/keyhouse/keyhouse/pkg/idempotency"
	"github.com/keyhouse/keyhouse/pkg/natsx"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
	"github.com/keyhouse/keyhouse/services/licensing/migrations"
)

// Issue-license's Idempotency-Key and license.deleted's outbox run pkg code on tables
// this schema holds: they must be the packages' tables, verbatim.
func TestMigrationsHoldTheSharedIdempotencyAndOutboxTables(t *testing.T) {
	if err := pgxx.CheckSharedDDL(migrations.FS, idempotency.TableSQL, natsx.OutboxTableSQL); err != nil {
		t.Fatal(err)
	}
}
