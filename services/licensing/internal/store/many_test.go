package store_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/devinfra/testkit"
	"github.com/keyhouse/keyhouse/pkg/license"
	"github.com/keyhouse/keyhouse/pkg/licensecache"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
	"github.com/keyhouse/keyhouse/services/licensing/internal/store"
)

// GetMany finds, in one query, the same rows Get finds one by one, in every tenant, and
// leaves out the keys that name no license; with a cache, the rows it read serve Get, and
// a key invalidated since is read again.
func TestGetManyFindsWhatGetFinds(t *testing.T) {
	ctx := context.Background()
	for _, cached := range []bool{false, true} {
		db, err := pgxx.Open(ctx, testkit.DatabaseURL(t, schema), "licensing")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(db.Close)
		s := store.New(db, nil)
		var cache *licensecache.Cache[*store.License]
		if cached {
			cache = licensecache.New[*store.License](time.Minute)
			s = s.WithCache(cache)
		}
		var keys []string
		for i, tenant := range []string{"t1", "t1", "t2", "t3"} {
			key := license.NewKey()
			keys = append(keys, key)
			if err := s.InTx(ctx, func(tx store.Tx) error {
				return tx.Insert(ctx, &store.License{TenantID: tenant, Key: key, Tier: "pro", ProductID: "p", IssuedTo: "x",
					Limits: map[string]float64{"seats": float64(i)}})
			}); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.InTx(ctx, func(tx store.Tx) error { return tx.SetStatus(ctx, "t2", keys[2], license.StatusRevoked) }); err != nil {
			t.Fatal(err)
		}
		asked := append([]string{"NO-SUCH-KEY", ""}, keys...)
		got, err := s.GetMany(ctx, asked)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(keys) {
			t.Fatalf("cached %v: %d found, want %d", cached, len(got), len(keys))
		}
		for _, key := range keys {
			want, err := s.GetLive(ctx, "", key)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got[key], want) {
				t.Fatalf("cached %v: %s: GetMany %+v, Get %+v", cached, key, got[key], want)
			}
		}
		if !cached {
			continue
		}
		// Kept: Get answers from the cache (the row changes in the database
		// unannounced, and the cache still has the old one).
		if _, err := db.Exec(ctx, `UPDATE licenses SET tier = 'changed' WHERE key = $1`, keys[0]); err != nil {
			t.Fatal(err)
		}
		if l, _ := s.Get(ctx, "", keys[0]); l.Tier != "pro" {
			t.Fatalf("GetMany's row was not kept: Get read %q", l.Tier)
		}
		cache.Invalidate(keys[0])
		got, err = s.GetMany(ctx, keys[:1])
		if err != nil || got[keys[0]].Tier != "changed" {
			t.Fatalf("after the invalidation: %+v, %v", got[keys[0]], err)
		}
	}
}
