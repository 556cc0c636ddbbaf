package bench

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/keyhouse/keyhouse/pkg/license"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
)

func init() {
	Register(Scenario{
		ID:    "pairs-floor",
		Name:  "activate + deactivate floor, pairs/s (bare net/http + pgx)",
		Note:  "the write floor: each request decodes its body and looks the license up by key hash; activate then takes the license's advisory lock, checks the cap and inserts the seat in one transaction (the statements activations runs), deactivate deletes the seat by token; on the read licenses, a fresh instance per pair",
		Setup: setupWriteFloor,
	})
}

// setupWriteFloor serves activate-license and deactivate-license from bare handlers in
// this process, on the same tables activations writes, for the pairs row to be compared
// with.
func setupWriteFloor(ctx context.Context, env *Env) (Op, error) {
	keys, err := readLicenseKeys(ctx, env)
	if err != nil {
		return nil, err
	}
	url := env.Stack.Env("DATABASE_URL")
	licenses, err := pgxx.Open(ctx, url, "licensing")
	if err != nil {
		return nil, err
	}
	seats, err := pgxx.Open(ctx, url, "activations")
	if err != nil {
		licenses.Close()
		return nil, err
	}
	type found struct {
		tenant   string
		maxSeats *int32
	}
	lookup := func(r *http.Request, key string) (found, int) {
		var f found
		var status string
		var expires *time.Time
		sum := sha256.Sum256([]byte(key))
		err := licenses.QueryRow(r.Context(), `SELECT tenant_id, status, expires_at, max_activations FROM licenses WHERE key_hash = $1`,
			sum[:]).Scan(&f.tenant, &status, &expires, &f.maxSeats)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return f, http.StatusNotFound
		case err != nil:
			return f, http.StatusInternalServerError
		case license.Usable(status, expires, time.Now()) != nil:
			return f, http.StatusForbidden
		}
		return f, http.StatusOK
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/activate-license", func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Key, InstanceID string }
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, `{"error":"bad body"}`, http.StatusBadRequest)
			return
		}
		key := license.CanonicalKey(req.Key)
		f, st := lookup(r, key)
		if st != http.StatusOK {
			http.Error(w, `{"error":"refused"}`, st)
			return
		}
		var raw [32]byte
		_, _ = rand.Read(raw[:])
		token := hex.EncodeToString(raw[:])
		tokenHash := sha256.Sum256([]byte(token))
		inserted, err := activateSeat(r.Context(), seats, f.tenant, key, req.InstanceID, tokenHash[:], f.maxSeats)
		if err != nil || !inserted {
			http.Error(w, `{"error":"not activated"}`, http.StatusConflict)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"token": token})
	})
	mux.HandleFunc("POST /v1/deactivate-license", func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Key, Token string }
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, `{"error":"bad body"}`, http.StatusBadRequest)
			return
		}
		key := license.CanonicalKey(req.Key)
		f, st := lookup(r, key)
		if st != http.StatusOK {
			http.Error(w, `{"error":"refused"}`, st)
			return
		}
		tokenHash := sha256.Sum256([]byte(req.Token))
		tag, err := seats.Exec(r.Context(), `DELETE FROM seats WHERE tenant_id = $1 AND license_key = $2 AND token_hash = $3`, f.tenant, key, tokenHash[:])
		if err != nil || tag.RowsAffected() != 1 {
			http.Error(w, `{"error":"not deactivated"}`, http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"deactivated":true}`))
	})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		licenses.Close()
		seats.Close()
		return nil, err
	}
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(lis) }()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
		licenses.Close()
		seats.Close()
	}()
	floor := &Env{Stack: env.Stack, URL: "http://" + lis.Addr().String(), HTTP: env.HTTP}
	var pairs atomic.Int64
	return func(ctx context.Context, worker, i int) error {
		n := int(pairs.Add(1) - 1)
		key := keys[n%len(keys)]
		st, data, err := floor.Do(ctx, http.MethodPost, "/v1/activate-license", "", false,
			map[string]string{"key": key, "instance_id": fmt.Sprintf("floor-%d", n)})
		if err := Expect(st, data, err, http.StatusOK); err != nil {
			return fmt.Errorf("activate: %w", err)
		}
		var out struct {
			Token string `json:"token"`
		}
		if err := json.Unmarshal(data, &out); err != nil {
			return err
		}
		st, data, err = floor.Do(ctx, http.MethodPost, "/v1/deactivate-license", "", false, map[string]string{"key": key, "token": out.Token})
		return Expect(st, data, err, http.StatusOK)
	}, nil
}

// activateSeat is activations' cap check and insert: the license's advisory lock, then
// (as a statement of its own, so its snapshot sees the seats the lock's last holder
// committed) the count and the conditional insert.
func activateSeat(ctx context.Context, db *pgxpool.Pool, tenant, key, instance string, tokenHash []byte, maxSeats *int32) (bool, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(1263488, hashtext($1 || E'\x1f' || $2))`, tenant, key); err != nil {
		return false, err
	}
	var inserted bool
	if err := tx.QueryRow(ctx, `WITH state AS (
		SELECT EXISTS (SELECT 1 FROM seats WHERE tenant_id = $1 AND license_key = $2 AND instance_id = $3) AS present,
			(SELECT count(*) FROM seats WHERE tenant_id = $1 AND license_key = $2) AS n
	), inserted AS (
		INSERT INTO seats (tenant_id, license_key, instance_id, token_hash)
		SELECT $1, $2, $3, $4 FROM state WHERE NOT present AND ($5::int IS NULL OR n < $5)
		RETURNING 1
	)
	SELECT EXISTS (SELECT 1 FROM inserted)`, tenant, key, instance, tokenHash, maxSeats).Scan(&inserted); err != nil {
		return false, err
	}
	return inserted, tx.Commit(ctx)
}
