package migrations_test

import (
	"testing"

	"github.com/keyhouse/keyhouse/pkg/natsx"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
	"github.com/keyhouse/keyhouse/services/billing/migrations"
)

// The events this service emits (pkg/events) go through pkg/natsx's outbox and relay on a
// table this schema holds: it must be the package's table, verbatim.
func TestMigrationsHoldTheSharedOutboxTable(t *testing.T) {
	if err := pgxx.CheckSharedTables(migrations.FS, natsx.OutboxTable); err != nil {
		t.Fatal(err)
	}
}
