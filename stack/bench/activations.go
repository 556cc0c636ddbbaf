package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// The activation scenarios. activate-license and deactivate-license also count 20 requests
// per license key per 15 minutes, so the pair scenario walks through a pool of keys, ten
// pairs each.
const (
	pairsPerKey = 10
	// pairKeys bounds how many pairs one run can make (warm-up included): 60,000, some
	// 40 s at the rates this machine reaches.
	pairKeys = 6000
	// hotLimit is the hot license's limit: high enough never to be reached in a run.
	hotLimit = 1 << 50
)

// clientIP is ClientIP in an address block of the scenario's own (11.x, 12.x, …): the
// scenarios run one after another in one rate-limit window, and verify-license, validate-
// license and track-usage share the Validation tier, so reusing one scenario's client IPs
// in the next would start it on spent budgets.
func clientIP(block, worker, i, perIP int) string {
	n := worker<<16 | (i/perIP)&(1<<16-1)
	return fmt.Sprintf("%d.%d.%d.%d", block, (n>>16)&0xff, (n>>8)&0xff, n&0xff)
}

func init() {
	Register(Scenario{
		ID:    "pairs",
		Name:  "activate + deactivate, pairs/s (gateway → activations → licensing, Postgres)",
		Note:  "one op = two requests: activate (licensing lookup over gRPC, then lock, checks and insert in one round trip) and deactivate (lookup, one indexed delete); CPU-bound like every full-path row",
		Setup: setupActivatePairs,
	})
	for _, sp := range Spreads {
		Register(Scenario{
			ID:    "validate" + sp.ID,
			Name:  "validate-license, " + sp.Label + ", one seat each (gateway → activations → licensing, Postgres)",
			Note:  "read only, as shipped: activations' valid answer from the gateway's cache when it holds the seat (on a miss the gateway calls activations, which has the license from its cache of licensing's answers or asks licensing, and probes the seat in Postgres)",
			Setup: func(ctx context.Context, env *Env) (Op, error) { return setupValidate(ctx, env, sp) },
		})
	}
	Register(Scenario{
		ID:    "usage",
		Name:  "track-usage, 200 licenses (no contention)",
		Note:  "licensing lookup, then one statement: seat check and conditional increment (the baseline for the hot case)",
		Setup: func(ctx context.Context, env *Env) (Op, error) { return setupTrackUsage(ctx, env, licensePool, 13) },
	})
	Register(Scenario{
		ID:      "usage-hot",
		Name:    "track-usage, one hot license, 100 parallel increments",
		Workers: 100,
		Note:    "100 clients increment the same metric of one license; ops/s counts applied increments, the 503 share the calls answered 503 (nothing applied; retrying is correct)",
		Setup:   func(ctx context.Context, env *Env) (Op, error) { return setupTrackUsage(ctx, env, 1, 14) },
	})
}

// issueMany issues n licenses in parallel (setup only) with the given terms.
func issueMany(ctx context.Context, env *Env, n int, body func(i int) map[string]any) ([]string, error) {
	keys := make([]string, n)
	errs := make([]error, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n && ctx.Err() == nil; i = int(next.Add(1) - 1) {
				keys[i], errs[i] = env.IssueLicense(ctx, body(i))
			}
		}()
	}
	wg.Wait()
	return keys, errors.Join(append(errs, ctx.Err())...)
}

// activate creates the seat and returns its token.
func (e *Env) activate(ctx context.Context, ip, key, instance string) (string, error) {
	st, data, err := e.Do(ctx, http.MethodPost, "/v1/activate-license", ip, false, map[string]string{"key": key, "instance_id": instance})
	if err := Expect(st, data, err, http.StatusOK); err != nil {
		return "", fmt.Errorf("activate-license: %w", err)
	}
	var out struct {
		Token string `json:"token"`
	}
	if err := json.Unmarshal(data, &out); err != nil || out.Token == "" {
		return "", fmt.Errorf("activate-license: no token in %s", data)
	}
	return out.Token, nil
}

func setupActivatePairs(ctx context.Context, env *Env) (Op, error) {
	keys, err := issueMany(ctx, env, pairKeys, func(i int) map[string]any {
		return map[string]any{"tier": "pro", "product_id": "bench-activate", "issued_to": fmt.Sprintf("pair-%d@example.com", i), "max_activations": nil}
	})
	if err != nil {
		return nil, err
	}
	var pairs atomic.Int64
	return func(ctx context.Context, worker, i int) error {
		n := int(pairs.Add(1) - 1)
		if n/pairsPerKey >= len(keys) {
			// Counted as errors in the report; the pause keeps them from spinning.
			time.Sleep(100 * time.Millisecond)
			return errors.New("key pool used up: raise pairKeys for runs this long")
		}
		key := keys[n/pairsPerKey]
		// Two requests of the Activation tier (300 per IP) per op.
		ip := clientIP(11, worker, i, 100)
		tok, err := env.activate(ctx, ip, key, fmt.Sprintf("bench-%d", n))
		if err != nil {
			return err
		}
		st, data, err := env.Do(ctx, http.MethodPost, "/v1/deactivate-license", ip, false, map[string]string{"key": key, "token": tok})
		if err := Expect(st, data, err, http.StatusOK); err != nil {
			return fmt.Errorf("deactivate-license: %w", err)
		}
		if string(data) != `{"deactivated":true}` {
			return fmt.Errorf("deactivate-license: %s", data)
		}
		return nil
	}, nil
}

func setupValidate(ctx context.Context, env *Env, sp Spread) (Op, error) {
	keys, err := readLicenseKeys(ctx, env)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, worker, i int) error {
		st, data, err := env.Do(ctx, http.MethodPost, "/v1/validate-license", clientIP(23+spreadIndex(sp), worker, i, 900), false,
			map[string]string{"key": keys[sp.pick(worker, i)], "instance_id": readInstance})
		if err := Expect(st, data, err, http.StatusOK); err != nil {
			return err
		}
		if string(data) != `{"valid":true}` {
			return fmt.Errorf("validate-license: %s", data)
		}
		return nil
	}, nil
}

// setupTrackUsage meters api_calls_per_day on n licenses, one seat each; workers spread
// over them, so n = 1 puts every increment on the same row.
func setupTrackUsage(ctx context.Context, env *Env, n, ipBlock int) (Op, error) {
	keys, err := issueMany(ctx, env, n, func(i int) map[string]any {
		return map[string]any{"tier": "pro", "product_id": "bench-usage", "issued_to": fmt.Sprintf("usage-%d@example.com", i),
			"limits": map[string]any{"api_calls_per_day": hotLimit}}
	})
	if err != nil {
		return nil, err
	}
	tokens := make([]string, n)
	for i, k := range keys {
		if tokens[i], err = env.activate(ctx, SetupIP(), k, "meter"); err != nil {
			return nil, err
		}
	}
	return func(ctx context.Context, worker, i int) error {
		j := (worker*7919 + i) % n
		st, data, err := env.Do(ctx, http.MethodPost, "/v1/track-usage", clientIP(ipBlock, worker, i, 900), false,
			map[string]any{"key": keys[j], "token": tokens[j], "metric": "api_calls_per_day"})
		if err == nil && st == http.StatusServiceUnavailable {
			return ErrRefused
		}
		return Expect(st, data, err, http.StatusOK)
	}, nil
}
