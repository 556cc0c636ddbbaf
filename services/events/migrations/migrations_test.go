package migrations_test

import (
	"testing"

	"github.com/keyhouse/keyhouse/pkg/idempotency"
	"github.com/keyhouse/keyhouse/pkg/natsx"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
	"github.com/keyhouse/keyhouse/pkg/tenantpurge"
	"github.com/keyhouse/keyhouse/services/events/migrations"
)

// The events this service emits itself go through pkg/natsx's outbox and relay, and its
// creates' Idempotency-Keys pkg/idempotency, on tables this schema holds: they must be the
// packages' tables, verbatim.
func TestMigrationsHoldTheSharedOutboxTable(t *testing.T) {
	if err := pgxx.CheckSharedTables(migrations.FS, pgxx.SharedTable{Create: idempotency.TableSQL}, natsx.OutboxTable); err != nil {
		t.Fatal(err)
	}
}

// The purge of a deleted tenant leaves its tombstone in the shared table.
func TestMigrationsHoldTheSharedTombstoneTable(t *testing.T) {
	if err := pgxx.CheckSharedDDL(migrations.FS, tenantpurge.TombstoneTableSQL); err != nil {
		t.Fatal(err)
	}
}
