package migrations_test

import (
	"testing"

	"github.com/keyhouse/keyhouse/pkg/idempotency"
	"github.com/keyhouse/keyhouse/pkg/natsx"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
	"github.com/keyhouse/keyhouse/pkg/tenantpurge"
	"github.com/keyhouse/keyhouse/services/releases/migrations"
)

// Register-release's Idempotency-Key runs pkg/idempotency on a table this schema holds:
// it must be the package's table, verbatim.
func TestMigrationsHoldTheSharedIdempotencyTable(t *testing.T) {
	if err := pgxx.CheckSharedDDL(migrations.FS, idempotency.TableSQL); err != nil {
		t.Fatal(err)
	}
}

// The purge of a deleted tenant leaves its tombstone in the shared table.
func TestMigrationsHoldTheSharedTombstoneTable(t *testing.T) {
	if err := pgxx.CheckSharedDDL(migrations.FS, tenantpurge.TombstoneTableSQL); err != nil {
		t.Fatal(err)
	}
}

// The events this service emits (pkg/events) go through pkg/natsx's outbox and relay on a
// table this schema holds: it must be the package's table, verbatim.
func TestMigrationsHoldTheSharedOutboxTable(t *testing.T) {
	if err := pgxx.CheckSharedTables(migrations.FS, natsx.OutboxTable); err != nil {
		t.Fatal(err)
	}
}
