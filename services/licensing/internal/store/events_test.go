package store_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/keyhouse/keyhouse/devinfra/testkit"
	"github.com/keyhouse/keyhouse/pkg/events"
	"github.com/keyhouse/keyhouse/pkg/events/eventstest"
	"github.com/keyhouse/keyhouse/pkg/license"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
	"github.com/keyhouse/keyhouse/services/licensing/internal/store"
)

func newStoreDB(t *testing.T) (*store.Store, *pgxpool.Pool) {
	t.Helper()
	db, err := pgxx.Open(context.Background(), testkit.DatabaseURL(t, schema), "licensing")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	return store.New(db, nil), db
}

func issue(t *testing.T, s *store.Store, tenant, key string) {
	t.Helper()
	if err := s.InTx(context.Background(), func(tx store.Tx) error {
		return tx.Insert(context.Background(), &store.License{TenantID: tenant, Key: key, Tier: "pro", ProductID: "app", IssuedTo: "a@b.c", Limits: map[string]float64{"api_calls": 10}})
	}); err != nil {
		t.Fatal(err)
	}
}

// Every writing method of the store emits its event of addendum §11, in its transaction;
// the table lists each with what it must emit, and every other method is listed as
// emitting nothing, so a new method cannot be added without deciding.
func TestEveryWriteEmitsItsEvent(t *testing.T) {
	ctx := context.Background()
	expires := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	seats := int32(3)
	writes := []struct {
		method string
		run    func(t *testing.T, s *store.Store)
		want   []string
	}{
		{"Tx.Insert (InTx)", func(t *testing.T, s *store.Store) { issue(t, s, "t1", "K-NEW") }, []string{events.TypeLicenseIssued}},
		{"Tx.Insert (Idempotent)", func(t *testing.T, s *store.Store) {
			if _, _, err := s.Idempotent(ctx, "t1", "idem-1", []byte("h"), func(tx store.Tx) ([]byte, error) {
				return []byte("ok"), tx.Insert(ctx, &store.License{TenantID: "t1", Key: "K-IDEM", Tier: "pro", ProductID: "app", IssuedTo: "x", Limits: map[string]float64{}})
			}); err != nil {
				t.Fatal(err)
			}
		}, []string{events.TypeLicenseIssued}},
		{"Issue", func(t *testing.T, s *store.Store) {
			if err := s.Issue(ctx, &store.License{TenantID: "t1", Key: "K-ONE-TRIP", Tier: "pro", ProductID: "app", IssuedTo: "x", Limits: map[string]float64{}}); err != nil {
				t.Fatal(err)
			}
		}, []string{events.TypeLicenseIssued}},
		{"Tx.InsertImported", func(t *testing.T, s *store.Store) {
			issued := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
			if err := s.InTx(ctx, func(tx store.Tx) error {
				return tx.InsertImported(ctx, []*store.License{
					{TenantID: "t1", Key: "IMPORTED-1", Tier: "pro", ProductID: "app", IssuedTo: "x", IssuedAt: issued, Status: license.StatusActive, Limits: map[string]float64{}},
					{TenantID: "t1", Key: "IMPORTED-2", Tier: "pro", ProductID: "app", IssuedTo: "y", IssuedAt: issued, Status: license.StatusActive, Limits: map[string]float64{}},
				})
			}); err != nil {
				t.Fatal(err)
			}
		}, []string{events.TypeLicenseIssued, events.TypeLicenseIssued}},
		{"Tx.InsertImported revoked (issued, then revoked: the events reach its state)", func(t *testing.T, s *store.Store) {
			if err := s.InTx(ctx, func(tx store.Tx) error {
				return tx.InsertImported(ctx, []*store.License{
					{TenantID: "t1", Key: "IMPORTED-3", Tier: "pro", ProductID: "app", IssuedTo: "x", IssuedAt: time.Now(), Status: license.StatusRevoked, Limits: map[string]float64{}},
					{TenantID: "t1", Key: "IMPORTED-4", Tier: "pro", ProductID: "app", IssuedTo: "y", IssuedAt: time.Now(), Status: license.StatusActive, Limits: map[string]float64{}},
				})
			}); err != nil {
				t.Fatal(err)
			}
		}, []string{events.TypeLicenseIssued, events.TypeLicenseRevoked, events.TypeLicenseIssued}},
		{"Tx.SetStatus revoked", func(t *testing.T, s *store.Store) {
			if err := s.InTx(ctx, func(tx store.Tx) error { return tx.SetStatus(ctx, "t1", "K-1", license.StatusRevoked) }); err != nil {
				t.Fatal(err)
			}
		}, []string{events.TypeLicenseRevoked}},
		{"Tx.SetStatus active", func(t *testing.T, s *store.Store) {
			if err := s.InTx(ctx, func(tx store.Tx) error { return tx.SetStatus(ctx, "t1", "K-1", license.StatusActive) }); err != nil {
				t.Fatal(err)
			}
		}, []string{events.TypeLicenseReactivated}},
		{"Tx.UpdateTerms", func(t *testing.T, s *store.Store) {
			if err := s.InTx(ctx, func(tx store.Tx) error {
				locked, err := tx.GetForUpdate(ctx, "t1", "K-1")
				if err != nil {
					return err
				}
				_, err = tx.UpdateTerms(ctx, locked, store.Terms{Limits: map[string]float64{"seats": 2}})
				return err
			}); err != nil {
				t.Fatal(err)
			}
		}, []string{events.TypeLicenseTermsUpdated}},
		{"UpdateTerms", func(t *testing.T, s *store.Store) {
			if _, err := s.UpdateTerms(ctx, "t1", "K-1", store.Terms{SetExpiry: true, ExpiresAt: &expires, SetMaxActivations: true, MaxActivations: &seats}); err != nil {
				t.Fatal(err)
			}
		}, []string{events.TypeLicenseTermsUpdated}},
		{"UpdateTerms to the terms it has (nothing changes)", func(t *testing.T, s *store.Store) {
			// The limits Tx.UpdateTerms set above, the cap and expiry UpdateTerms set.
			l, err := s.UpdateTerms(ctx, "t1", "K-1", store.Terms{SetMaxActivations: true, MaxActivations: &seats, Limits: map[string]float64{"seats": 2}})
			if err != nil || l.MaxActivations == nil || *l.MaxActivations != seats || l.ExpiresAt == nil || !l.ExpiresAt.Equal(expires) {
				t.Fatalf("%+v %v", l, err)
			}
		}, nil},
		{"UpdateNotes", func(t *testing.T, s *store.Store) {
			if _, err := s.UpdateNotes(ctx, "t1", "K-1", "a note"); err != nil {
				t.Fatal(err)
			}
		}, []string{events.TypeLicenseNotesUpdated}},
		{"UpdateNotes to the notes it has (nothing changes)", func(t *testing.T, s *store.Store) {
			if l, err := s.UpdateNotes(ctx, "t1", "K-1", "a note"); err != nil || l.Notes == nil || *l.Notes != "a note" {
				t.Fatalf("%+v %v", l, err)
			}
		}, nil},
		{"Tx.Delete", func(t *testing.T, s *store.Store) {
			if err := s.InTx(ctx, func(tx store.Tx) error { return tx.Delete(ctx, "t1", "K-1") }); err != nil {
				t.Fatal(err)
			}
		}, []string{events.TypeLicenseDeleted}},
		{"PortalLink", func(t *testing.T, s *store.Store) {
			if _, err := s.PortalLink(ctx, "t1", "K-NEW", true, func([]byte) string { return "tok" }); err != nil {
				t.Fatal(err)
			}
		}, nil},
		{"ClaimProduct", func(t *testing.T, s *store.Store) {
			if err := s.ClaimProduct(ctx, "t1", "other-app"); err != nil {
				t.Fatal(err)
			}
		}, nil},
		{"Tx.ClaimProduct", func(t *testing.T, s *store.Store) {
			if err := s.InTx(ctx, func(tx store.Tx) error { return tx.ClaimProduct(ctx, "t1", "third-app") }); err != nil {
				t.Fatal(err)
			}
		}, nil},
	}
	s, db := newStoreDB(t)
	issue(t, s, "t1", "K-1")
	out := eventstest.Watch(t, db)
	for _, w := range writes {
		w.run(t, s)
		got := out.Next(t)
		if !slices.Equal(eventstest.Types(got), w.want) {
			t.Errorf("%s emitted %v, want %v", w.method, eventstest.Types(got), w.want)
		}
		for _, ev := range got {
			if ev.GetTenantId() != "t1" || !events.IsID(ev.GetId()) || ev.GetActor().GetType() != events.ActorClient {
				t.Errorf("%s: envelope %v", w.method, ev)
			}
		}
	}
	eventstest.RequireListed(t, (*store.Tx)(nil), []string{"Insert", "InsertImported", "SetStatus", "UpdateTerms", "Delete"},
		// Reads and locks, and a product claim (outside §11, as the store's).
		[]string{"GetForUpdate", "LockQuota", "CountActive", "Existing", "DeletedAmong", "ClaimProduct"})
	eventstest.RequireListed(t, s,
		[]string{"InTx", "Idempotent", "Issue", "UpdateTerms", "UpdateNotes"},
		// Writes outside §11: a product claim, the keyring, portal links (credentials), the
		// portal switch and the folding of the license counts (no count changes).
		[]string{"ClaimProduct", "Keyring", "PortalLink", "SetPortalEnabled", "FoldCounts"},
		[]string{"WithCache", "Get", "GetMany", "GetLive", "CountActive", "DeletedKeys", "List", "Counts", "LicenseByPortalToken", "PortalEnabled", "ProductOwner"})
}

// The event's data is the change's: the terms after an update, the license's product.
func TestEventDataIsTheChange(t *testing.T) {
	ctx := context.Background()
	s, db := newStoreDB(t)
	issue(t, s, "t1", "K-1")
	out := eventstest.Watch(t, db)
	expires := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	if _, err := s.UpdateTerms(ctx, "t1", "K-1", store.Terms{SetExpiry: true, ExpiresAt: &expires, Limits: map[string]float64{"seats": 4}}); err != nil {
		t.Fatal(err)
	}
	evs := out.Next(t)
	if len(evs) != 1 {
		t.Fatalf("%d events", len(evs))
	}
	body, err := events.JSON(evs[0])
	if err != nil {
		t.Fatal(err)
	}
	want := `"data":{"expires_at":"2030-01-02T03:04:05Z","key":"K-1","limits":{"seats":4},"max_activations":null,"product_id":"app"}}`
	if got := string(body); len(got) < len(want) || got[len(got)-len(want):] != want {
		t.Fatalf("event %s\nwant it to end with %s", got, want)
	}
}

// A change whose transaction fails after the write leaves no event, and an event that
// cannot be written takes its change with it.
func TestNoEventWithoutItsChangeAndNoChangeWithoutItsEvent(t *testing.T) {
	ctx := context.Background()
	s, db := newStoreDB(t)
	issue(t, s, "t1", "K-1")
	out := eventstest.Watch(t, db)
	boom := errors.New("forced failure after the write")
	if err := s.InTx(ctx, func(tx store.Tx) error {
		if err := tx.SetStatus(ctx, "t1", "K-1", license.StatusRevoked); err != nil {
			return err
		}
		return boom
	}); !errors.Is(err, boom) {
		t.Fatal(err)
	}
	if evs := out.Next(t); len(evs) != 0 {
		t.Fatalf("a rolled back revoke left events %v", eventstest.Types(evs))
	}
	if l, err := s.GetLive(ctx, "t1", "K-1"); err != nil || l.Status != license.StatusActive {
		t.Fatalf("%+v %v", l, err)
	}
	// The outbox refuses the event (a trigger stands in for any failure of its insert):
	// the update that came before it in the transaction does not commit either.
	if _, err := db.Exec(ctx, `CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'outbox refused'; END $$;
		CREATE TRIGGER refuse BEFORE INSERT ON outbox FOR EACH ROW EXECUTE FUNCTION refuse()`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateNotes(ctx, "t1", "K-1", "lost"); err == nil {
		t.Fatal("notes updated without their event")
	}
	// The same for an issuance sent as one pipeline: the license is not stored either, and
	// the connection goes back to the pool outside the failed transaction.
	if err := s.Issue(ctx, &store.License{TenantID: "t1", Key: "K-LOST", Tier: "pro", ProductID: "app", IssuedTo: "x", Limits: map[string]float64{}}); err == nil {
		t.Fatal("a license issued without its event")
	}
	if _, err := s.GetLive(ctx, "t1", "K-LOST"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the license whose event failed: %v, want not found", err)
	}
	if l, err := s.GetLive(ctx, "t1", "K-1"); err != nil || l.Notes != nil {
		t.Fatalf("notes %v, %v: the change committed without its event", l.Notes, err)
	}
}
