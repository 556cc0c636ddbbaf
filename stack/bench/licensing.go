package bench

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/keyhouse/keyhouse/pkg/license"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
)

// licensePool is how many licenses the write scenarios (track-usage) spread over.
const licensePool = 200

func init() {
	for _, sp := range Spreads {
		Register(Scenario{
			ID:    "verify" + sp.ID,
			Name:  "verify-license, " + sp.Label + " (gateway → licensing → Postgres)",
			Note:  "the full path as shipped: HTTP edge, Redis rate limit (coalesced), then licensing's valid answer, from the gateway's cache when it holds the key (asked over gRPC at most once per key and LICENSE_CACHE_TTL, and licensing reads Postgres only on its own miss)",
			Setup: func(ctx context.Context, env *Env) (Op, error) { return setupVerifyGateway(ctx, env, sp, 20) },
		})
		Register(Scenario{
			ID:    "floor" + sp.ID,
			Name:  "verify-license floor, " + sp.Label + " (bare net/http + pgx)",
			Note:  "the same single-row lookup and JSON answer with nothing in between, on the same licenses and spread",
			Setup: func(ctx context.Context, env *Env) (Op, error) { return setupVerifyFloor(ctx, env, sp) },
		})
	}
}

func setupVerifyGateway(ctx context.Context, env *Env, sp Spread, ipBlock int) (Op, error) {
	keys, err := readLicenseKeys(ctx, env)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, worker, i int) error {
		st, body, err := env.Do(ctx, http.MethodPost, "/v1/verify-license", clientIP(ipBlock+spreadIndex(sp), worker, i, 900), false,
			map[string]string{"key": keys[sp.pick(worker, i)]})
		return Expect(st, body, err, http.StatusOK)
	}, nil
}

// setupVerifyFloor sends verify-license to the floor (startVerifyFloor), the one the full
// stack is compared with.
func setupVerifyFloor(ctx context.Context, env *Env, sp Spread) (Op, error) {
	keys, err := readLicenseKeys(ctx, env)
	if err != nil {
		return nil, err
	}
	url, err := startVerifyFloor(ctx, env)
	if err != nil {
		return nil, err
	}
	floor := &Env{Stack: env.Stack, URL: url, HTTP: env.HTTP}
	return func(ctx context.Context, worker, i int) error {
		st, body, err := floor.Do(ctx, http.MethodPost, "/v1/verify-license", ClientIP(worker, i, 900), false,
			map[string]string{"key": keys[sp.pick(worker, i)]})
		return Expect(st, body, err, http.StatusOK)
	}, nil
}

// startVerifyFloor serves verify-license from a bare handler in this process until ctx
// ends: decode the body, look the key up by its hash (as the licensing service does),
// check status and expiry, encode the answer. It returns the server's URL.
func startVerifyFloor(ctx context.Context, env *Env) (string, error) {
	pool, err := pgxx.Open(ctx, env.Stack.Env("DATABASE_URL"), "licensing")
	if err != nil {
		return "", err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/verify-license", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Key string `json:"key"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, `{"error":"bad body"}`, http.StatusBadRequest)
			return
		}
		sum := sha256.Sum256([]byte(req.Key))
		var out struct {
			Valid     bool               `json:"valid"`
			Tier      string             `json:"tier"`
			ProductID string             `json:"product_id"`
			Limits    map[string]float64 `json:"limits"`
			ExpiresAt *time.Time         `json:"expires_at"`
			IssuedAt  time.Time          `json:"issued_at"`
			Status    string             `json:"status"`
		}
		err := pool.QueryRow(r.Context(), `SELECT tier, product_id, limits, expires_at, issued_at, status
			FROM licenses WHERE key_hash = $1`, sum[:]).Scan(&out.Tier, &out.ProductID, &out.Limits, &out.ExpiresAt, &out.IssuedAt, &out.Status)
		if errors.Is(err, pgx.ErrNoRows) {
			http.Error(w, `{"valid":false,"error":"License key not found"}`, http.StatusNotFound)
			return
		}
		if err != nil {
			http.Error(w, `{"error":"Internal server error"}`, http.StatusInternalServerError)
			return
		}
		out.Valid = license.Usable(out.Status, out.ExpiresAt, time.Now()) == nil
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		pool.Close()
		return "", err
	}
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(lis) }()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
		pool.Close()
	}()
	return "http://" + lis.Addr().String(), nil
}
