package migrations_test

import (
	"context"
	"testing"

	"github.com/keyhouse/keyhouse/pkg/pgxx"
	"github.com/keyhouse/keyhouse/services/storefront/migrations"
)

// A database that kept buyer addresses (00009) keeps none after 00011 (api.md, the
// storefront callback's rule 4): the column and the resends' table are gone with what
// they held, and the purchase's record itself stays.
func TestBuyerAddressesAreErased(t *testing.T) {
	ctx := context.Background()
	pool := schemaBefore(t, "00011")
	if _, err := pool.Exec(ctx, `
		INSERT INTO fulfillments (tenant_id, checkout_session_id, license_key, email_status, buyer_email_sealed)
			VALUES ('t', 'cs_1', 'K1', 'sent', '\x0102');
		INSERT INTO email_resends (tenant_id, checkout_session_id, delivery_id, email_status)
			VALUES ('t', 'cs_1', 1, 'sent')`); err != nil {
		t.Fatal(err)
	}
	if _, err := (pgxx.Migrations{Schema: "storefront", FS: migrations.FS}).Up(ctx, pool); err != nil {
		t.Fatal(err)
	}
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM information_schema.columns
		WHERE table_schema = 'storefront' AND (column_name = 'buyer_email_sealed' OR table_name = 'email_resends')`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Fatalf("%d columns of the buyer address or the resends left", left)
	}
	var key, status string
	if err := pool.QueryRow(ctx, `SELECT license_key, email_status FROM fulfillments
		WHERE tenant_id = 't' AND checkout_session_id = 'cs_1'`).Scan(&key, &status); err != nil || key != "K1" || status != "sent" {
		t.Fatalf("the purchase after the migration: %q %q %v", key, status, err)
	}
}
