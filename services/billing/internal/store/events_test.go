package store_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/keyhouse/keyhouse/devinfra/testkit"
	"github.com/keyhouse/keyhouse/pkg/events"
	"github.com/keyhouse/keyhouse/pkg/events/eventstest"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
	"github.com/keyhouse/keyhouse/services/billing/internal/store"
)

func newStoreDB(t *testing.T) (*store.Store, *pgxpool.Pool) {
	t.Helper()
	db, err := pgxx.Open(context.Background(), testkit.DatabaseURL(t, schema), "billing")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	return store.New(db, nil), db
}

// Every writing method of the store that makes a change of addendum §11 emits its event
// in its transaction, and only when the plan moved; every other method is listed as
// emitting nothing, so a new method cannot go undecided.
func TestEveryWriteEmitsItsEvent(t *testing.T) {
	ctx := context.Background()
	s, db := newStoreDB(t)
	ten, key, err := createTenant(s, "Acme", "billing@example.com")
	if err != nil {
		t.Fatal(err)
	}
	out := eventstest.Watch(t, db)
	checkout := newEvent(t, "checkout.session.completed", time.Now(), map[string]any{"mode": "subscription", "status": "complete",
		"payment_status": "paid", "client_reference_id": ten.ID, "customer": "cus_ev", "subscription": "sub_ev"})
	failed := newEvent(t, "invoice.payment_failed", time.Now().Add(time.Second), map[string]any{"customer": "cus_ev", "subscription": "sub_ev"})
	writes := []struct {
		method string
		run    func() error
		want   []string
	}{
		{"Record checkout", func() error { _, err := s.Record(ctx, checkout.raw, checkout.change, time.Now()); return err }, []string{events.TypeBillingPlanChanged}},
		{"Record the same event again", func() error { _, err := s.Record(ctx, checkout.raw, checkout.change, time.Now()); return err }, nil},
		{"Record payment failed", func() error { _, err := s.Record(ctx, failed.raw, failed.change, time.Now()); return err }, []string{events.TypeBillingPlanChanged}},
		{"RotateAPIKey", func() error { _, err := s.RotateAPIKey(ctx, ten.ID, key); return err }, []string{events.TypeAPIKeyRotated}},
		{"CreateAPIKey", func() error { _, _, err := createAPIKey(s, ten.ID, "ci", store.ScopeRead, nil); return err }, []string{events.TypeAPIKeyCreated}},
		{"DeleteAPIKey", func() error {
			keys, err := s.ListAPIKeys(ctx, ten.ID)
			if err != nil || len(keys) != 1 {
				t.Fatalf("keys %v, %v", keys, err)
			}
			return s.DeleteAPIKey(ctx, ten.ID, keys[0].ID)
		}, []string{events.TypeAPIKeyDeleted}},
		{"DeleteAPIKey of an unknown key", func() error {
			if err := s.DeleteAPIKey(ctx, ten.ID, "ak_nope"); err != store.ErrAPIKeyNotFound {
				t.Errorf("unknown key: %v", err)
			}
			return nil
		}, nil},
		{"RotateAPIKey with a dead key", func() error {
			if _, err := s.RotateAPIKey(ctx, ten.ID, key); err == nil {
				t.Error("a rotated key rotated again")
			}
			return nil
		}, nil},
		{"DeleteTenant", func() error {
			other, _, err := createTenant(s, "Gone", "gone@example.com")
			if err != nil {
				return err
			}
			if _, _, err := createAPIKey(s, other.ID, "k", store.ScopeFull, nil); err != nil {
				return err
			}
			out.Next(t) // its api_key.created
			if err := s.DeleteTenant(ctx, other.ID, nil); err != nil {
				return err
			}
			// Its own rows are gone in the same transaction; the outbox keeps the event.
			var left int
			err = db.QueryRow(ctx, `SELECT (SELECT count(*) FROM tenants WHERE tenant_id = $1) + (SELECT count(*) FROM api_keys WHERE tenant_id = $1)`, other.ID).Scan(&left)
			if err != nil || left != 0 {
				t.Errorf("rows left after DeleteTenant: %d, %v", left, err)
			}
			ten.ID = other.ID // the event's tenant, checked below
			return nil
		}, []string{events.TypeTenantDeleted}},
		{"DeleteTenant of an unknown tenant", func() error {
			if err := s.DeleteTenant(ctx, "t_nope", nil); err != store.ErrTenantNotFound {
				t.Errorf("unknown tenant: %v", err)
			}
			return nil
		}, nil},
	}
	var statuses []string
	for _, w := range writes {
		if err := w.run(); err != nil {
			t.Fatalf("%s: %v", w.method, err)
		}
		got := out.Next(t)
		if !slices.Equal(eventstest.Types(got), w.want) {
			t.Errorf("%s emitted %v, want %v", w.method, eventstest.Types(got), w.want)
		}
		for _, ev := range got {
			if ev.GetTenantId() != ten.ID {
				t.Errorf("%s: event of tenant %q", w.method, ev.GetTenantId())
			}
			if d := ev.GetBillingPlanChanged(); d != nil {
				statuses = append(statuses, d.GetPlan().GetValue()+"/"+d.GetStatus())
			}
		}
	}
	if want := []string{"pro/active", "pro/past_due"}; !slices.Equal(statuses, want) {
		t.Errorf("plan changes %v, want %v", statuses, want)
	}
	eventstest.RequireListed(t, s, []string{"Record", "RotateAPIKey", "CreateAPIKey", "DeleteAPIKey", "DeleteTenant"},
		// Not changes of addendum §11: a new tenant, console sign-in and passwords, the
		// operator's suspension.
		[]string{"CreateTenant", "CreateSession", "DeleteSession", "SetPasswordHash", "SetSuspended"},
		[]string{"WithSessionKeys", "Plan", "Customer", "TenantEmail", "TenantContact", "ResolveAPIKey", "ResolveOpener", "ResolveSession", "GetTenant", "PasswordCandidates", "WatermarkID",
			"ListAPIKeys", "ListTenants", "OperatorTenantByID", "LiveSubscriptions"})
}
