package migrations_test

import (
	"testing"

	"github.com/keyhouse/keyhouse/pkg/natsx"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
	"github.com/keyhouse/keyhouse/pkg/tenantpurge"
	"github.com/keyhouse/keyhouse/services/events/migrations"
)

// The events this service emits itself go through pkg/natsx's outbox and relay on a
// table this schema holds: it must be the package's table, verbatim.
func TestMigrationsHoldTheSharedOutboxTable(t *testing.T) {
	if err := pgxx.CheckSharedTables(migrations.FS, natsx.OutboxTable); err != nil {
		t.Fatal(err)
	}
}

// The purge of a deleted tenant leaves its tombstone in the shared table.
func TestMigrationsHoldTheSharedTombstoneTable(t *testing.T) {
	if err := pgxx.CheckSharedDDL(migrations.FS, tenantpurge.TombstoneTableSQL); err != nil {
		t.Fatal(err)
	}
}
