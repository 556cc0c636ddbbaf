package server

import (
	"testing"
	"time"

	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	"google.golang.org/protobuf/types/known/structpb"
)

func importedItem(key, product string) *licensingv1.ImportedLicense {
	return &licensingv1.ImportedLicense{Key: key, ProductId: product, Tier: "pro", IssuedTo: "a@example.com"}
}

// A key another tenant holds is named as such, skipped or failing the call, and never
// worded as the tenant's own license with other terms (docs/import.md, hosted tenants).
func TestImportNamesAKeyHeldByAnotherTenant(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, true)
	if _, err := fx.srv.ImportLicenses(as("t2"), &licensingv1.ImportLicensesRequest{Licenses: []*licensingv1.ImportedLicense{importedItem("LIC-000001", "theirs")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := fx.srv.ImportLicenses(as("t1"), &licensingv1.ImportLicensesRequest{Licenses: []*licensingv1.ImportedLicense{importedItem("LIC-000002", "mine")}}); err != nil {
		t.Fatal(err)
	}
	resp, err := fx.srv.ImportLicenses(as("t1"), &licensingv1.ImportLicensesRequest{OnConflict: "skip", Licenses: []*licensingv1.ImportedLicense{
		importedItem("LIC-000001", "mine"), func() *licensingv1.ImportedLicense { l := importedItem("LIC-000002", "mine"); l.Tier = "ent"; return l }()}})
	if err != nil {
		t.Fatal(err)
	}
	if r := resp.GetResults(); r[0].GetResult() != "skipped" || r[0].GetError() != "key is held by another tenant" ||
		r[1].GetResult() != "skipped" || r[1].GetError() != "key already exists with other terms" {
		t.Fatalf("results %v", r)
	}
	_, err = fx.srv.ImportLicenses(as("t1"), &licensingv1.ImportLicensesRequest{Licenses: []*licensingv1.ImportedLicense{importedItem("LIC-000003", "mine"), importedItem("LIC-000001", "mine")}})
	wantErr(t, err, `licenses[1].key is held by another tenant; on_conflict is "fail", so nothing was imported`)
}

// A key the tenant deleted is refused, naming the key, whether it was deleted by a day or
// by a year; another tenant may still import it (activations remembers a deletion per
// tenant).
func TestImportRefusesAKeyTheTenantDeleted(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, false)
	key := fx.seed("t1")
	if _, err := fx.srv.DeleteLicense(as("t1"), &licensingv1.DeleteLicenseRequest{Key: key}); err != nil {
		t.Fatal(err)
	}
	fx.srv.now = func() time.Time { return clock.Add(365 * 24 * time.Hour) }
	resp, err := fx.srv.ImportLicenses(as("t1"), &licensingv1.ImportLicensesRequest{Licenses: []*licensingv1.ImportedLicense{importedItem(key, "app"), importedItem("LIC-000009", "app")}})
	if err != nil {
		t.Fatal(err)
	}
	if r := resp.GetResults()[0]; r.GetResult() != "invalid" || r.GetError() != errDeletedKey || resp.GetImported() != 1 {
		t.Fatalf("answer %v", resp)
	}
	if resp, err := fx.srv.ImportLicenses(as("t2"), &licensingv1.ImportLicensesRequest{Licenses: []*licensingv1.ImportedLicense{importedItem(key, "app2")}}); err != nil || resp.GetImported() != 1 {
		t.Fatalf("another tenant: %v, %v", resp, err)
	}
}

// An issued_at after the time of the import is invalid, naming the field.
func TestImportRefusesAnIssuedAtInTheFuture(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, false)
	future := importedItem("LIC-FUTURE-1", "app")
	future.IssuedAt = structpb.NewStringValue(clock.Add(time.Hour).Format(time.RFC3339))
	now := importedItem("LIC-NOW-0001", "app")
	now.IssuedAt = structpb.NewStringValue(clock.Format(time.RFC3339))
	resp, err := fx.srv.ImportLicenses(as("t1"), &licensingv1.ImportLicensesRequest{Licenses: []*licensingv1.ImportedLicense{future, now}})
	if err != nil {
		t.Fatal(err)
	}
	if r := resp.GetResults(); r[0].GetResult() != "invalid" || r[0].GetError() != "issued_at must not be later than the time of the import" || r[1].GetResult() != "imported" {
		t.Fatalf("results %v", r)
	}
}
