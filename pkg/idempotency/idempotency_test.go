package idempotency_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/keyhouse/keyhouse/devinfra/testkit"
	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/idempotency"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
	"github.com/keyhouse/keyhouse/pkg/signing"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// schema is a service schema holding the idempotency table, as a service's migration makes it.
var schema = testkit.Template{Name: "idempotency", Migrate: pgxx.Migrations{Schema: "svc", FS: fstest.MapFS{"00001_init.sql": &fstest.MapFile{Data: []byte(
	"-- +goose Up\nCREATE TABLE things (id serial PRIMARY KEY);\n" + idempotency.TableSQL)}}}.Apply}

func pool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	db, err := pgxx.Open(context.Background(), testkit.DatabaseURL(t, schema), "svc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	return db
}

func TestDoReplaysOnceAndRefusesAnotherRequest(t *testing.T) {
	ctx := context.Background()
	db := pool(t)
	var created atomic.Int32
	create := func(tx pgx.Tx) ([]byte, error) {
		created.Add(1)
		var id int
		err := tx.QueryRow(ctx, `INSERT INTO things DEFAULT VALUES RETURNING id`).Scan(&id)
		return []byte{byte(id)}, err
	}
	hashA, hashB := []byte("request A"), []byte("request B")

	// Concurrent first calls with one key: one creates, the rest replay its answer.
	answers := make([][]byte, 8)
	var wg sync.WaitGroup
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, _, err := idempotency.Do(ctx, db, "t1", "k1", hashA, create)
			if err != nil {
				t.Error(err)
			}
			answers[i] = resp
		}()
	}
	wg.Wait()
	for _, a := range answers {
		if string(a) != string(answers[0]) {
			t.Fatalf("answers differ: %v", answers)
		}
	}
	if created.Load() != 1 {
		t.Fatalf("created %d times", created.Load())
	}
	if _, _, err := idempotency.Do(ctx, db, "t1", "k1", hashB, create); !errors.Is(err, idempotency.ErrReused) || !apierr.Is(err, idempotency.ErrReused.Code) {
		t.Fatalf("another request: %v", err)
	}
	// Keys are per tenant; a failed create keeps nothing.
	if _, replayed, err := idempotency.Do(ctx, db, "t2", "k1", hashB, create); err != nil || replayed {
		t.Fatalf("other tenant: %v %v", replayed, err)
	}
	boom := errors.New("quota")
	if _, _, err := idempotency.Do(ctx, db, "t1", "k2", hashA, func(pgx.Tx) ([]byte, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatal(err)
	}
	if _, replayed, err := idempotency.Do(ctx, db, "t1", "k2", hashB, create); err != nil || replayed {
		t.Fatalf("after a failed create the key is free: %v %v", replayed, err)
	}
	// An expired record is taken over by the next request.
	if _, err := db.Exec(ctx, `UPDATE idempotency_keys SET created_at = now() - interval '25 hours' WHERE idem_key = 'k1' AND tenant_id = 't1'`); err != nil {
		t.Fatal(err)
	}
	if _, replayed, err := idempotency.Do(ctx, db, "t1", "k1", hashB, create); err != nil || replayed {
		t.Fatalf("expired record: %v %v", replayed, err)
	}
	if n, err := idempotency.Purge(ctx, db); err != nil || n != 0 {
		t.Fatalf("purge: %d %v", n, err)
	}
}

// fixedKeys is the installation keyring of a test; fetched counts the times it was asked.
type fixedKeys struct {
	ring    *signing.Keyring
	fetched atomic.Int32
}

func (k *fixedKeys) Keyring(context.Context) (*signing.Keyring, error) {
	k.fetched.Add(1)
	return k.ring, nil
}

// An answer that shows a secret once is stored sealed, never in the clear, and a replay
// gets it back byte for byte; a keyring that no longer opens it refuses the retry (409)
// and creates nothing.
func TestDoSealedStoresNoSecretInTheClear(t *testing.T) {
	ctx := context.Background()
	db := pool(t)
	ring, err := signing.NewKeyring()
	if err != nil {
		t.Fatal(err)
	}
	keys := &fixedKeys{ring: ring}
	var created atomic.Int32
	create := func(tx pgx.Tx) ([]byte, error) {
		created.Add(1)
		var id int
		err := tx.QueryRow(ctx, `INSERT INTO things DEFAULT VALUES RETURNING id`).Scan(&id)
		return fmt.Appendf(nil, `{"id":%d,"api_key":"kh_secret_%d"}`, id, id), err
	}
	first, replayed, err := idempotency.DoSealed(ctx, db, keys, "t1", "k1", []byte("A"), create)
	if err != nil || replayed {
		t.Fatalf("first call: %v %v", replayed, err)
	}
	var stored []byte
	if err := db.QueryRow(ctx, `SELECT response FROM idempotency_keys WHERE tenant_id = 't1' AND idem_key = 'k1'`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(stored, []byte("kh_secret")) || bytes.Contains(stored, first) {
		t.Fatalf("the stored answer holds the secret in the clear: %q", stored)
	}
	again, replayed, err := idempotency.DoSealed(ctx, db, keys, "t1", "k1", []byte("A"), create)
	if err != nil || !replayed || !bytes.Equal(again, first) {
		t.Fatalf("replay: %q %v %v; want %q", again, replayed, err, first)
	}
	if _, _, err := idempotency.DoSealed(ctx, db, keys, "t1", "k1", []byte("B"), create); !errors.Is(err, idempotency.ErrReused) {
		t.Fatalf("another request: %v", err)
	}
	// Without a key nothing is stored, and the keyring is not asked for.
	before := keys.fetched.Load()
	if _, replayed, err := idempotency.DoSealed(ctx, db, keys, "t1", "", []byte("A"), create); err != nil || replayed {
		t.Fatalf("no key: %v %v", replayed, err)
	}
	if keys.fetched.Load() != before {
		t.Fatal("the keyring was fetched for a call without a key")
	}
	// The installation keyring replaced: the first answer cannot be shown, nor is it made again.
	other, _ := signing.NewKeyring()
	n := created.Load()
	if _, _, err := idempotency.DoSealed(ctx, db, &fixedKeys{ring: other}, "t1", "k1", []byte("A"), create); !errors.Is(err, idempotency.ErrAnswerSealed) {
		t.Fatalf("under another keyring: %v", err)
	}
	if created.Load() != n {
		t.Fatal("a retry under another keyring created again")
	}
}
