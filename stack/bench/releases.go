package bench

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
)

// channelReleases is how many published releases the check-update scenario's channel
// holds: api.md's limit, the worst case for selection.
const channelReleases = 500

func init() {
	Register(Scenario{
		ID:    "check-update",
		Name:  "check-update, 500 releases in the channel (gateway → licensing + releases → Postgres)",
		Note:  "as shipped: releases' answer from the gateway's cache, kept for the second its manifest was signed in (on a miss: the license from releases' cache of licensing's answers, one indexed selection among 500 published releases, an RSA-2048 signature at most once per release and second)",
		Setup: setupCheckUpdate,
	})
}

func setupCheckUpdate(ctx context.Context, env *Env) (Op, error) {
	const product = "bench-updates"
	// Registered in random order, so the latest is not simply the newest row.
	r := rand.New(rand.NewPCG(7, 11))
	for _, i := range r.Perm(channelReleases) {
		body := map[string]any{
			"product_id": product, "version": fmt.Sprintf("%d.%d.%d", i/100, i%100/10, i%10), "platform": "linux-x64",
			"artifact_url": fmt.Sprintf("https://downloads.example.com/%s/%d.tar.gz", product, i),
			"checksum":     fmt.Sprintf("sha256:%064x", i), "release_notes": "Bug fixes and performance improvements.",
		}
		st, data, err := env.Do(ctx, http.MethodPost, "/v1/register-release", SetupIP(), true, body)
		if err := Expect(st, data, err, http.StatusOK); err != nil {
			return nil, fmt.Errorf("register-release: %w", err)
		}
	}
	keys, err := issuePool(ctx, env, product)
	if err != nil {
		return nil, err
	}
	want := []byte(`"version":"4.9.9"`)
	return func(ctx context.Context, worker, i int) error {
		// Workers 64.. in ClientIP's numbering: addresses the verify scenarios (same
		// Validation tier, workers 0..C-1) have not spent.
		st, body, err := env.Do(ctx, http.MethodPost, "/v1/check-update", ClientIP(worker+64, i, 900), false, map[string]string{
			"key": keys[(worker*7919+i)%len(keys)], "product_id": product, "platform": "linux-x64", "current_version": "1.0.0",
		})
		if err := Expect(st, body, err, http.StatusOK); err != nil {
			return err
		}
		if !bytes.Contains(body, want) {
			return fmt.Errorf("not the latest release: %s", body)
		}
		return nil
	}, nil
}
