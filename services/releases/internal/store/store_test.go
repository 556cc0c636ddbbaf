package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/keyhouse/keyhouse/devinfra/testkit"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
	"github.com/keyhouse/keyhouse/services/releases/internal/semver"
	"github.com/keyhouse/keyhouse/services/releases/migrations"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// schema is the releases schema as the production migrations make it.
var schema = testkit.Template{Name: "releases", Migrate: pgxx.Migrations{Schema: "releases", FS: migrations.FS}.Apply}

// newStore is a store on a database of the test's own.
func newStore(t *testing.T) *Store {
	t.Helper()
	db, err := pgxx.Open(context.Background(), testkit.DatabaseURL(t, schema), "releases")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	return New(db, nil)
}

func release(version, channel string) *NewRelease {
	return &NewRelease{
		Release: Release{
			ProductID: "App", Version: version, Channel: channel, Platform: "linux",
			ArtifactURL: "https://example.com/" + version, Signature: "sig",
		},
		ProductKey: "app",
		Precedence: semver.KeyOf(version),
	}
}

// check-update's selection is one index probe however many releases the channel holds:
// the plan reads the first entry of releases_latest and stops, with no sort and no scan
// over the channel's rows.
func TestLatestReadsOneIndexEntry(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	for _, channel := range []string{"stable", "beta", "nightly"} {
		for i := range 500 {
			if _, err := s.Register(ctx, "t1", "", nil, release(fmt.Sprintf("1.%d.%d", i%13, i), channel), 500, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := s.db.Exec(ctx, `ANALYZE releases`); err != nil {
		t.Fatal(err)
	}
	r, err := s.Latest(ctx, "t1", "app", "stable", "linux")
	if err != nil || r == nil || r.Version != "1.12.493" {
		t.Fatalf("latest %+v %v", r, err)
	}

	var plan []struct {
		Plan planNode `json:"Plan"`
	}
	var raw []byte
	err = s.db.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) SELECT `+columns+` FROM releases
		WHERE tenant_id = $1 AND product_key = $2 AND channel = $3 AND platform = $4 AND status = 'published'
		ORDER BY precedence DESC, id DESC LIMIT 1`, "t1", "app", "stable", "linux").Scan(&raw)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &plan); err != nil {
		t.Fatal(err)
	}
	limit := plan[0].Plan
	if limit.NodeType != "Limit" || len(limit.Plans) != 1 {
		t.Fatalf("plan %s", raw)
	}
	scan := limit.Plans[0]
	if scan.NodeType != "Index Scan" || scan.IndexName != "releases_latest" || scan.ActualRows != 1 {
		t.Fatalf("selection is not a single read of releases_latest: %s", raw)
	}
}

type planNode struct {
	NodeType   string     `json:"Node Type"`
	IndexName  string     `json:"Index Name"`
	ActualRows float64    `json:"Actual Rows"`
	Plans      []planNode `json:"Plans"`
}

// beforeCommit (licensing's product claim) runs only for a release that passed every
// check and was inserted, and its error stores nothing: a refused registration claims
// nothing, and a claim refused registers nothing.
func TestRegisterRunsBeforeCommitOnlyForAReleaseWritten(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	calls := 0
	count := func(context.Context) error { calls++; return nil }
	if _, err := s.Register(ctx, "t1", "k-1", []byte("first"), release("1.0.0", "stable"), 2, count); err != nil || calls != 1 {
		t.Fatalf("a release written: err %v, beforeCommit ran %d times", err, calls)
	}
	if _, err := s.Register(ctx, "t1", "k-1", []byte("first"), release("1.0.0", "stable"), 2, count); err != nil || calls != 1 {
		t.Fatalf("a replay: err %v, beforeCommit ran %d times", err, calls)
	}
	if _, err := s.Register(ctx, "t1", "k-1", []byte("other"), release("1.0.1", "stable"), 2, count); err == nil || calls != 1 {
		t.Fatalf("an Idempotency-Key reused: err %v, beforeCommit ran %d times", err, calls)
	}
	if _, err := s.Register(ctx, "t1", "", nil, release("1.0.0", "stable"), 2, count); err != ErrDuplicate || calls != 1 {
		t.Fatalf("a duplicate: err %v, beforeCommit ran %d times", err, calls)
	}
	if _, err := s.Register(ctx, "t1", "", nil, release("1.0.1", "stable"), 2, count); err != nil || calls != 2 {
		t.Fatalf("the second release: err %v, beforeCommit ran %d times", err, calls)
	}
	if _, err := s.Register(ctx, "t1", "", nil, release("1.0.2", "stable"), 2, count); err != ErrLimit || calls != 2 {
		t.Fatalf("over the limit: err %v, beforeCommit ran %d times", err, calls)
	}
	refused := errors.New("claim refused")
	if _, err := s.Register(ctx, "t1", "", nil, release("1.0.0", "beta"), 2, func(context.Context) error { return refused }); !errors.Is(err, refused) {
		t.Fatalf("a refused claim: %v", err)
	}
	if _, total, err := s.List(ctx, "t1", Filter{Channel: "beta", Limit: 10}); total != 0 || err != nil {
		t.Fatalf("a refused claim stored %d releases (err %v)", total, err)
	}
}

func TestRegisterRefusesDuplicatesAndThe501st(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	for i := range 3 {
		if _, err := s.Register(ctx, "t1", "", nil, release(fmt.Sprintf("1.0.%d", i), "stable"), 3, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Register(ctx, "t1", "", nil, release("1.0.0", "stable"), 3, nil); err != ErrDuplicate {
		t.Fatalf("duplicate: %v", err)
	}
	if _, err := s.Register(ctx, "t1", "", nil, release("2.0.0", "stable"), 3, nil); err != ErrLimit {
		t.Fatalf("over the limit: %v", err)
	}
	// Another tenant's channel of the same name is its own.
	if _, err := s.Register(ctx, "t2", "", nil, release("1.0.0", "stable"), 3, nil); err != nil {
		t.Fatal(err)
	}
	rows, total, err := s.List(ctx, "t1", Filter{Limit: 10})
	if err != nil || total != 3 || len(rows) != 3 {
		t.Fatalf("list %d %d %v", len(rows), total, err)
	}
	if err := s.Unpublish(ctx, "t2", rows[0].ID); err != ErrNotFound {
		t.Fatalf("another tenant unpublished: %v", err)
	}
	if err := s.Unpublish(ctx, "t1", rows[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Register(ctx, "t1", "", nil, release("2.0.0", "stable"), 3, nil); err != nil {
		t.Fatalf("after an unpublish: %v", err)
	}
}
