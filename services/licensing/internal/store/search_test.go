package store_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/services/licensing/internal/store"
)

// Support pastes a license key, whole or in part and in any case, into the console's
// search: the key filter finds it, only within the tenant, with % and _ matching
// themselves.
func TestListFindsALicenseByPartOfItsKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	for _, l := range []struct{ tenant, key string }{
		{"t1", "ABCD-1234-EFGH-5678"}, {"t1", "WXYZ-1234-QRST-9999"}, {"t1", "A%_B-0000-0000-0000"},
		{"t2", "ABCD-1234-EFGH-0000"},
	} {
		if err := s.InTx(ctx, func(tx store.Tx) error {
			return tx.Insert(ctx, &store.License{TenantID: l.tenant, Key: l.key, Tier: "pro", ProductID: "p", IssuedTo: "x", Limits: map[string]float64{}})
		}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct{ search, want string }{
		{"ABCD-1234-EFGH-5678", "ABCD-1234-EFGH-5678"},
		{"efgh-56", "ABCD-1234-EFGH-5678"},
		{"1234", "ABCD-1234-EFGH-5678,WXYZ-1234-QRST-9999"},
		{"%_", "A%_B-0000-0000-0000"},
		{"_", "A%_B-0000-0000-0000"},
		{"EFGH-0000", ""}, // another tenant's
	} {
		rows, total, err := s.List(ctx, "t1", store.Filter{Key: tt.search, Limit: 50})
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, r := range rows {
			keys = append(keys, r.Key)
		}
		if got := strings.Join(slices.Sorted(slices.Values(keys)), ","); got != tt.want || total != len(keys) {
			t.Errorf("key %q: found %q (total %d), want %q", tt.search, got, total, tt.want)
		}
	}
	// KeyAsIssued: the license of that key matches besides the substring's.
	for _, tt := range []struct{ search, asIssued, want string }{
		{"abcd1234efgh5678", "ABCD-1234-EFGH-5678", "ABCD-1234-EFGH-5678"},
		{"1234", "WXYZ-1234-QRST-9999", "ABCD-1234-EFGH-5678,WXYZ-1234-QRST-9999"},
		{"nothing", "ABCD-1234-EFGH-0000", ""}, // another tenant's
	} {
		rows, total, err := s.List(ctx, "t1", store.Filter{Key: tt.search, KeyAsIssued: tt.asIssued, Limit: 50})
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, r := range rows {
			keys = append(keys, r.Key)
		}
		if got := strings.Join(slices.Sorted(slices.Values(keys)), ","); got != tt.want || total != len(keys) {
			t.Errorf("key %q: found %q (total %d), want %q", tt.search, got, total, tt.want)
		}
	}
}

// The overview's "expiring in the next 30 days": active licenses whose expiry falls in
// the window, soonest first; not the expired, the revoked, the perpetual or the later.
func TestListExpiringKeepsTheActiveLicensesExpiringInTheWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	now := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { v := now.Add(d); return &v }
	for _, l := range []struct {
		key     string
		expires *time.Time
		revoked bool
	}{
		{"IN-20D", at(20 * 24 * time.Hour), false},
		{"IN-2D", at(2 * 24 * time.Hour), false},
		{"IN-30D", at(30 * 24 * time.Hour), false},
		{"EXPIRED", at(-time.Hour), false},
		{"LATER", at(31 * 24 * time.Hour), false},
		{"PERPETUAL", nil, false},
		{"REVOKED-5D", at(5 * 24 * time.Hour), true},
	} {
		if err := s.InTx(ctx, func(tx store.Tx) error {
			if err := tx.Insert(ctx, &store.License{TenantID: "t1", Key: l.key, Tier: "pro", ProductID: "p", IssuedTo: "x", ExpiresAt: l.expires, Limits: map[string]float64{}}); err != nil {
				return err
			}
			if l.revoked {
				return tx.SetStatus(ctx, "t1", l.key, "revoked")
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	until := now.AddDate(0, 0, 30)
	rows, total, err := s.List(ctx, "t1", store.Filter{ExpiringFrom: &now, ExpiringUntil: &until, Limit: 50})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, r := range rows {
		keys = append(keys, r.Key)
	}
	if got := strings.Join(keys, ","); got != "IN-2D,IN-20D,IN-30D" || total != 3 {
		t.Errorf("expiring: %q (total %d), want IN-2D,IN-20D,IN-30D soonest first", got, total)
	}
	if rows, _, err := s.List(ctx, "t2", store.Filter{ExpiringFrom: &now, ExpiringUntil: &until, Limit: 50}); err != nil || len(rows) != 0 {
		t.Errorf("another tenant sees %d licenses (%v)", len(rows), err)
	}
}

// Paging through any listing gives the listing whole, in its order, each row in full:
// a page past the first finds its rows through the index and then reads them, and
// licenses issued in one transaction (an import) share issued_at, so the key orders them.
func TestListPagesCutTheWholeListingInOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	now := time.Now()
	expires := now.Add(10 * 24 * time.Hour)
	for batch := range 3 {
		if err := s.InTx(ctx, func(tx store.Tx) error {
			for i := range 7 {
				l := &store.License{TenantID: "t1", Key: fmt.Sprintf("K%d-%02d", batch, 7-i), Tier: fmt.Sprintf("tier-%d-%d", batch, i),
					ProductID: []string{"desk", "cli"}[i%2], IssuedTo: fmt.Sprintf("buyer%d@example.com", i), Limits: map[string]float64{}}
				if i%3 == 0 {
					l.ExpiresAt = &expires
				}
				if err := tx.Insert(ctx, l); err != nil {
					return err
				}
				if i == 4 {
					if err := tx.SetStatus(ctx, "t1", l.Key, "revoked"); err != nil {
						return err
					}
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.InTx(ctx, func(tx store.Tx) error {
		return tx.Insert(ctx, &store.License{TenantID: "t2", Key: "K1-03X", Tier: "other", ProductID: "desk", IssuedTo: "buyer3@example.com", Limits: map[string]float64{}})
	}); err != nil {
		t.Fatal(err)
	}
	until := now.Add(30 * 24 * time.Hour)
	show := func(rows []*store.License) []string {
		var out []string
		for _, r := range rows {
			out = append(out, r.Key+"/"+r.Tier+"/"+r.ProductID+"/"+r.Status)
		}
		return out
	}
	for name, f := range map[string]store.Filter{
		"all":       {},
		"product":   {ProductID: "desk"},
		"status":    {Status: "active"},
		"issued_to": {IssuedTo: "BUYER1"},
		"key":       {Key: "k1-"},
		"expiring":  {ExpiringFrom: &now, ExpiringUntil: &until},
	} {
		whole := f
		whole.Limit = 1000
		want, wantTotal, err := s.List(ctx, "t1", whole)
		if err != nil {
			t.Fatal(err)
		}
		if len(want) < 3 || wantTotal != len(want) {
			t.Fatalf("%s: the whole listing has %d rows (total %d); the test needs several", name, len(want), wantTotal)
		}
		var paged []*store.License
		for off := 0; off < len(want)+2; off += 2 {
			page := f
			page.Limit, page.Offset = 2, off
			rows, total, err := s.List(ctx, "t1", page)
			if err != nil {
				t.Fatal(err)
			}
			if total != wantTotal {
				t.Errorf("%s offset %d: total %d, want %d", name, off, total, wantTotal)
			}
			paged = append(paged, rows...)
		}
		if got, want := strings.Join(show(paged), " "), strings.Join(show(want), " "); got != want {
			t.Errorf("%s: the pages give\n%s\nthe listing is\n%s", name, got, want)
		}
	}
}
