package store

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/devinfra/devnats"
	"github.com/keyhouse/keyhouse/devinfra/testkit"
	"github.com/keyhouse/keyhouse/pkg/events"
	"github.com/keyhouse/keyhouse/pkg/license"
	"github.com/keyhouse/keyhouse/pkg/licensecache"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
	"github.com/keyhouse/keyhouse/pkg/tenantpurge"
	"github.com/nats-io/nats.go"
)

// cachedReplica is one releases process on a shared database, wired as cmd/releases wires
// it: a cache of latest releases emptied by its own spine's local step and by
// license.ReleasesChangedSubject, a spine whose fast path announces its changes. The
// cache's TTL is an hour, so only the invalidation can make a change show.
func cachedReplica(t *testing.T, dbURL string) *Store {
	t.Helper()
	db, err := pgxx.Open(context.Background(), dbURL, "releases")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	nc, err := nats.Connect(devnats.SharedURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	cache := licensecache.New[*Release](time.Hour)
	stop, err := cache.ClearOn(nc, license.ReleasesChangedSubject)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	spine := events.NewSpine(events.WithFastPath(nc), ClearOnReleaseChange(cache))
	return New(db, spine).WithLatestCache(cache)
}

func versionOf(t *testing.T, s *Store, c Channel) string {
	t.Helper()
	one, many := answers(t, s, c)
	if one != many[0] || many[0] != many[1] {
		t.Fatalf("Latest answers %q, LatestOf %q", one, many)
	}
	return one
}

// answers reads c's latest version through Latest, then twice in one LatestOf ("" for
// none). The two calls are two reads: while a change is on its way to this process they
// may straddle it.
func answers(t *testing.T, s *Store, c Channel) (one string, many [2]string) {
	t.Helper()
	r, err := s.Latest(context.Background(), c.Tenant, c.ProductKey, c.Channel, c.Platform)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := s.LatestOf(context.Background(), []Channel{c, c})
	if err != nil {
		t.Fatal(err)
	}
	version := func(r *Release) string {
		if r == nil {
			return ""
		}
		return r.Version
	}
	if r != nil && rs[0] != nil && r.Version == rs[0].Version && *r != *rs[0] {
		t.Fatalf("Latest %+v and LatestOf %+v: one version, two releases", r, rs[0])
	}
	return version(r), [2]string{version(rs[0]), version(rs[1])}
}

// eventually waits until s answers want for c through Latest and LatestOf alike (the other
// process hears the change).
func eventually(t *testing.T, s *Store, c Channel, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		one, many := answers(t, s, c)
		if one == want && many[0] == want && many[1] == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Latest answers %q, LatestOf %q, want %q: the change did not reach this process's cache", one, many, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

var appStable = Channel{Tenant: "t1", ProductKey: "app", Channel: "stable", Platform: "linux"}

// A release change counts at once in the process that made it and, through
// license.ReleasesChangedSubject, in every other; the cache answers between changes.
func TestLatestCacheFollowsReleaseChangesAcrossProcesses(t *testing.T) {
	ctx := context.Background()
	dbURL := testkit.DatabaseURL(t, schema)
	a, b := cachedReplica(t, dbURL), cachedReplica(t, dbURL)

	if v := versionOf(t, b, appStable); v != "" {
		t.Fatalf("nothing published yet, got %q", v)
	}
	if _, err := a.Register(ctx, "t1", "", nil, release("1.0.0", "stable"), 500, nil); err != nil {
		t.Fatal(err)
	}
	if v := versionOf(t, a, appStable); v != "1.0.0" {
		t.Fatalf("the registering process answers %q", v)
	}
	// "None published" is not kept: b reads it at once.
	if v := versionOf(t, b, appStable); v != "1.0.0" {
		t.Fatalf("the other process answers %q", v)
	}

	// Between changes the cache answers: a row changed behind its back (no event) does not
	// show. (Answers read within 100 ms of an invalidation are not kept: read once after.)
	time.Sleep(200 * time.Millisecond)
	versionOf(t, b, appStable)
	if _, err := a.db.Exec(ctx, `UPDATE releases SET release_notes = 'changed without an event'`); err != nil {
		t.Fatal(err)
	}
	if r, _ := b.Latest(ctx, "t1", "app", "stable", "linux"); r.ReleaseNotes != "" {
		t.Fatalf("read Postgres again (%q): the cache answered nothing", r.ReleaseNotes)
	}

	newer, err := a.Register(ctx, "t1", "", nil, release("1.1.0", "stable"), 500, nil)
	if err != nil {
		t.Fatal(err)
	}
	if v := versionOf(t, a, appStable); v != "1.1.0" {
		t.Fatalf("the registering process answers %q", v)
	}
	eventually(t, b, appStable, "1.1.0")

	if err := b.Unpublish(ctx, "t1", newer); err != nil {
		t.Fatal(err)
	}
	if v := versionOf(t, b, appStable); v != "1.0.0" {
		t.Fatalf("the unpublishing process answers %q", v)
	}
	eventually(t, a, appStable, "1.0.0")

	// A deleted tenant's purge announces the change without an event (events.Spine.Announce).
	if err := (tenantpurge.Forgetter{DB: a.db, Stale: StaleOnTenantPurge, Spine: a.spine}).Forget(ctx, "t1"); err != nil {
		t.Fatal(err)
	}
	if v := versionOf(t, a, appStable); v != "" {
		t.Fatalf("the purging process answers %q", v)
	}
	eventually(t, b, appStable, "")
}

// While both processes answer from many goroutines, every change a process commits is in
// its own next answer (a read that raced the change never keeps what it read), and in the
// other's as soon as the event arrives.
func TestLatestCacheUnderParallelReadsAndChanges(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dbURL := testkit.DatabaseURL(t, schema)
	replicas := []*Store{cachedReplica(t, dbURL), cachedReplica(t, dbURL)}
	if _, err := replicas[0].Register(ctx, "t1", "", nil, release("1.0.0", "stable"), 500, nil); err != nil {
		t.Fatal(err)
	}

	var reads atomic.Int64
	var wg sync.WaitGroup
	for i := range 8 {
		s := replicas[i%2]
		wg.Go(func() {
			for ctx.Err() == nil {
				var err error
				if i%4 < 2 {
					_, err = s.Latest(ctx, "t1", "app", "stable", "linux")
				} else {
					_, err = s.LatestOf(ctx, []Channel{appStable, {Tenant: "t1", ProductKey: "app", Channel: "beta", Platform: "linux"}, appStable})
				}
				if err != nil && ctx.Err() == nil {
					t.Error(err)
					return
				}
				reads.Add(1)
			}
		})
	}

	var ids []int32
	for n := range 20 {
		writer, other := replicas[n%2], replicas[(n+1)%2]
		version := fmt.Sprintf("2.0.%d", n)
		id, err := writer.Register(ctx, "t1", "", nil, release(version, "stable"), 500, nil)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
		if v := versionOf(t, writer, appStable); v != version {
			t.Fatalf("change %d: the registering process answers %q, want %q", n, v, version)
		}
		eventually(t, other, appStable, version)
		if n%3 == 2 {
			// Unpublish the newest through the other process: the one before is latest again.
			if err := other.Unpublish(ctx, "t1", id); err != nil {
				t.Fatal(err)
			}
			before := fmt.Sprintf("2.0.%d", n-1)
			if v := versionOf(t, other, appStable); v != before {
				t.Fatalf("change %d: the unpublishing process answers %q, want %q", n, v, before)
			}
			eventually(t, writer, appStable, before)
		}
	}
	cancel()
	wg.Wait()
	if reads.Load() < 100 {
		t.Fatalf("only %d reads ran alongside the changes", reads.Load())
	}
}
