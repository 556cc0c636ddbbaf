package bench

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/keyhouse/keyhouse/pkg/auth"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
)

// The lease scenarios (addendum §12). Signing a lease is the heartbeat of an app that
// checks offline, so it is compared with verify-license, the online check, on the same
// 100,000 licenses and the same uniform spread; floating seats' renewals arrive at a
// steady rate, as the heartbeats of that many running apps would.
const (
	// floatingLicenses × floatingCap floating seats, every license at its cap.
	floatingLicenses = 2_000
	floatingCap      = 10
	floatingSeats    = floatingLicenses * floatingCap
	floatingProduct  = "bench-floating"
	// floatingTTL outlasts any run, so a seat the bench renews never lapses between two
	// of its renewals (the rounds leave gaps while other rows run); a lapse would be a
	// seat lost.
	floatingTTL = 3600 * time.Second
	// renewalRate is the goal: renewals of floating seats per second, sustained.
	renewalRate = 1000
)

func init() {
	uniform := Spreads[0]
	Register(Scenario{
		ID:    "leases",
		Name:  "POST /v1/leases, " + uniform.Label + ", one seat each (gateway → activations → licensing, Postgres)",
		Note:  "a signed lease (EdDSA JWS) for a seat proven by its token, on verify-license's licenses and spread: sent to activations in batches (CreateLeaseBatch): the batch's licenses from activations' cache or one GetLicenses, every item's seat, policy and signing key in one query, the Ed25519 signature; a seat that is not floating and keeps its binding is not written",
		Setup: func(ctx context.Context, env *Env) (Op, error) { return setupLeases(ctx, env, uniform) },
	})
	Register(Scenario{
		ID:    "renewals",
		Name:  fmt.Sprintf("floating seats' lease renewals, open loop at %d/s over %d seats (caps of %d, all taken)", renewalRate, floatingSeats, floatingCap),
		Rate:  renewalRate,
		Note:  "the renewals of a batch move their floating seats' lease ends in one statement under their licenses' shared locks (one round trip); checked by SQL after the row: live seats per license at most the cap, and every seat the bench renewed still live with the lease end its last answer gave",
		Setup: setupRenewals,
		Check: checkRenewals,
	})
}

// readSeatToken is the activation token of the read licenses' seat i (readLicenseKeys
// seeds the seats with its SHA-256, as activate-license stores a token).
func readSeatToken(i int) string { return fmt.Sprintf("keyhouse-bench-seat-%d", i) }

func setupLeases(ctx context.Context, env *Env, sp Spread) (Op, error) {
	keys, err := readLicenseKeys(ctx, env)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, worker, i int) error {
		j := sp.pick(worker, i)
		st, body, err := env.Do(ctx, http.MethodPost, "/v1/leases", clientIP(31, worker, i, 900), false,
			map[string]string{"key": keys[j], "token": readSeatToken(j)})
		if err := Expect(st, body, err, http.StatusOK); err != nil {
			return err
		}
		if !strings.HasPrefix(string(body), `{"lease":"eyJ`) {
			return fmt.Errorf("lease answer %s", body)
		}
		return nil
	}, nil
}

// floatingKey is floating license i: a well-formed key of its own, as readKey's.
func floatingKey(i int) string { return readKey(-1 - i) }

func floatingToken(seat int) string { return fmt.Sprintf("keyhouse-bench-float-%d", seat) }

// floatingLicense and floatingInstance place seat n: successive seats go to successive
// licenses, so one license's seats renew spread over the run (as independent apps'
// heartbeats do), not ten in a row that its cached answer would serve.
func floatingLicense(n int) int { return n % floatingLicenses }

func floatingInstance(n int) string { return fmt.Sprintf("floater-%d", n/floatingLicenses) }

// leaseEnds is what the renewal row's clients of env's stack hold: each seat's lease end
// as its last answer gave it (Unix seconds; 0 before its first renewal).
func leaseEnds(env *Env) *[floatingSeats]atomic.Int64 {
	ends, _ := onStack(env, "renewals' lease ends", func() (*[floatingSeats]atomic.Int64, error) {
		return new([floatingSeats]atomic.Int64), nil
	})
	return ends
}

// setupRenewals seeds floatingLicenses licenses of a floating product, each with its cap
// of seats taken, the way readLicenseKeys seeds: COPY into the tables issue-license and
// activate-license write (seats leased for floatingTTL from now, as activate-license
// leases a floating seat), then ANALYZE. The policy goes through the API.
func setupRenewals(ctx context.Context, env *Env) (Op, error) {
	st, body, err := env.Do(ctx, http.MethodPut, "/v1/products/"+floatingProduct+"/policies/*", SetupIP(), true,
		map[string]any{"floating": true, "lease_ttl_seconds": int(floatingTTL / time.Second)})
	if err := Expect(st, body, err, http.StatusOK); err != nil {
		return nil, fmt.Errorf("floating policy: %w", err)
	}
	url := env.Stack.Env("DATABASE_URL")
	lic, err := pgxx.Open(ctx, url, "licensing")
	if err != nil {
		return nil, err
	}
	defer lic.Close()
	if _, err := lic.CopyFrom(ctx, pgx.Identifier{"licenses"},
		[]string{"key_hash", "key", "tenant_id", "tier", "product_id", "issued_to", "max_activations"},
		pgx.CopyFromSlice(floatingLicenses, func(i int) ([]any, error) {
			key := floatingKey(i)
			sum := sha256.Sum256([]byte(key))
			return []any{sum[:], key, auth.SelfHostedTenant, "pro", floatingProduct, fmt.Sprintf("floater-%d@example.com", i), floatingCap}, nil
		})); err != nil {
		return nil, fmt.Errorf("seed floating licenses: %w", err)
	}
	seats, err := pgxx.Open(ctx, url, "activations")
	if err != nil {
		return nil, err
	}
	defer seats.Close()
	leased := time.Now().Add(floatingTTL)
	columns := []string{"tenant_id", "license_key", "instance_id", "token_hash", "lease_expires_at", "product_id"}
	// The sweeper's lower bound of the lease end, as activate-license sets it, when the
	// schema under test has it (-bin may name binaries from before it).
	var sweepColumn bool
	if err := seats.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM information_schema.columns
		WHERE table_schema = current_schema() AND table_name = 'seats' AND column_name = 'lease_sweep_after')`).Scan(&sweepColumn); err != nil {
		return nil, err
	}
	if sweepColumn {
		columns = append(columns, "lease_sweep_after")
	}
	if _, err := seats.CopyFrom(ctx, pgx.Identifier{"seats"}, columns,
		pgx.CopyFromSlice(floatingSeats, func(n int) ([]any, error) {
			tok := sha256.Sum256([]byte(floatingToken(n)))
			row := []any{auth.SelfHostedTenant, floatingKey(floatingLicense(n)), floatingInstance(n), tok[:], leased, floatingProduct}
			if sweepColumn {
				row = append(row, leased)
			}
			return row, nil
		})); err != nil {
		return nil, fmt.Errorf("seed floating seats: %w", err)
	}
	if _, err := seats.Exec(ctx, `VACUUM (ANALYZE) seats`); err != nil {
		return nil, err
	}
	if _, err := lic.Exec(ctx, `VACUUM (ANALYZE) licenses`); err != nil {
		return nil, err
	}
	ends := leaseEnds(env)
	return func(ctx context.Context, worker, i int) error {
		n := i % floatingSeats
		st, body, err := env.Do(ctx, http.MethodPost, "/v1/leases", clientIP(32, worker, i, 900), false,
			map[string]string{"key": floatingKey(floatingLicense(n)), "token": floatingToken(n)})
		if err == nil && st == http.StatusServiceUnavailable {
			// Overload's answer: the app retries later, its lease still good until its end.
			return ErrRefused
		}
		if err := Expect(st, body, err, http.StatusOK); err != nil {
			return fmt.Errorf("renewal of floating seat %d: %w", n, err)
		}
		var out struct {
			ExpiresAt time.Time `json:"expires_at"`
		}
		if err := json.Unmarshal(body, &out); err != nil {
			return err
		}
		end := &ends[n]
		for {
			seen := end.Load()
			if out.ExpiresAt.Unix() <= seen || end.CompareAndSwap(seen, out.ExpiresAt.Unix()) {
				return nil
			}
		}
	}, nil
}

// checkRenewals reads the floating seats back: no license has more live seats than its
// cap, and every seat the bench renewed is live with the lease end its last answer gave
// (a renewal answered 200 but not kept, or a seat removed while leased, is a seat lost).
func checkRenewals(ctx context.Context, env *Env) (string, error) {
	db, err := pgxx.Open(ctx, env.Stack.Env("DATABASE_URL"), "activations")
	if err != nil {
		return "", err
	}
	defer db.Close()
	var over int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM (SELECT license_key FROM seats
		WHERE product_id = $1 AND (lease_expires_at IS NULL OR lease_expires_at >= clock_timestamp())
		GROUP BY license_key HAVING count(*) > $2) x`, floatingProduct, floatingCap).Scan(&over); err != nil {
		return "", err
	}
	ends := map[string]time.Time{}
	rows, err := db.Query(ctx, `SELECT license_key || '/' || instance_id, lease_expires_at FROM seats
		WHERE product_id = $1 AND lease_expires_at >= clock_timestamp()`, floatingProduct)
	if err != nil {
		return "", err
	}
	var id string
	var end time.Time
	if _, err := pgx.ForEachRow(rows, []any{&id, &end}, func() error { ends[id] = end; return nil }); err != nil {
		return "", err
	}
	renewed, lost, first := 0, 0, ""
	answered := leaseEnds(env)
	for n := range floatingSeats {
		want := answered[n].Load()
		if want == 0 {
			continue
		}
		renewed++
		id := floatingKey(floatingLicense(n)) + "/" + floatingInstance(n)
		if got, ok := ends[id]; !ok || got.Unix() < want {
			lost++
			if first == "" {
				first = fmt.Sprintf("seat %s: live lease end %v, last answered %s", id, got, time.Unix(want, 0).UTC())
			}
		}
	}
	summary := fmt.Sprintf("%d seats renewed, %d live seats in all; %d licenses over their cap of %d, %d seats lost",
		renewed, len(ends), over, floatingCap, lost)
	if over > 0 || lost > 0 {
		return "", errors.New(summary + "; first lost: " + first)
	}
	return summary, nil
}

// leaseGoals compares the lease rows with their goals: a lease within 2× verify-license's
// cost on the same licenses and spread (time per op and CPU per op), and floating
// renewals sustained at renewalRate.
func leaseGoals(by map[string]Result) string {
	var b strings.Builder
	verify, okV := by["verify"]
	if r, ok := by["leases"]; ok && okV && r.RPS() > 0 && verify.CPUPerOp() > 0 {
		fmt.Fprintf(&b, "- POST /v1/leases, uniform: %.2f× verify-license's time per op, %.2f× its CPU per op (goal within 2×)\n",
			verify.RPS()/r.RPS(), float64(r.CPUPerOp())/float64(verify.CPUPerOp()))
	}
	if r, ok := by["renewals"]; ok {
		fmt.Fprintf(&b, "- floating renewals: %.0f/s answered of %d/s offered (goal %d/s sustained), p99 %s, %d errors\n",
			r.RPS(), renewalRate, renewalRate, ms(r.P99), r.Errors)
	}
	return b.String()
}
