package bench

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
)

// channelReleases is how many published releases the check-update scenario's channel
// holds: api.md's limit, the worst case for selection.
const channelReleases = 500

func init() {
	for _, sp := range Spreads {
		Register(Scenario{
			ID:    "check-update" + sp.ID,
			Name:  "check-update, " + sp.Label + ", 500 releases in the channel (gateway → licensing + releases → Postgres)",
			Note:  "as shipped: releases' answer from the gateway's cache when it knows the license's class (its tenant and product, kept while the license does not change) and holds the class's answer to the question (an offer kept for the second its manifest was signed in) (on a miss: the license from releases' cache of licensing's answers, the channel's latest release from releases' cache of it (one indexed selection among 500 published releases when it lacks it), an RSA-2048 signature at most once per release and second)",
			Setup: func(ctx context.Context, env *Env) (Op, error) { return setupCheckUpdate(ctx, env, sp) },
		})
	}
}

// releasesOnce registers the channel's releases once for the three spreads' rows.
var releasesOnce struct {
	sync.Mutex
	done bool
}

func setupCheckUpdate(ctx context.Context, env *Env, sp Spread) (Op, error) {
	const product = readProduct
	if err := registerChannel(ctx, env, product); err != nil {
		return nil, err
	}
	keys, err := readLicenseKeys(ctx, env)
	if err != nil {
		return nil, err
	}
	want := []byte(`"version":"4.9.9"`)
	return func(ctx context.Context, worker, i int) error {
		// Block 26..28 of clientIP's numbering: addresses the verify and validate rows
		// (same Validation tier) have not spent.
		st, body, err := env.Do(ctx, http.MethodPost, "/v1/check-update", clientIP(26+spreadIndex(sp), worker, i, 900), false, map[string]string{
			"key": keys[sp.pick(worker, i)], "product_id": product, "platform": "linux-x64", "current_version": "1.0.0",
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

// registerChannel registers the channel's releases, once per run.
func registerChannel(ctx context.Context, env *Env, product string) error {
	releasesOnce.Lock()
	defer releasesOnce.Unlock()
	if releasesOnce.done {
		return nil
	}
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
			return fmt.Errorf("register-release: %w", err)
		}
	}
	releasesOnce.done = true
	return nil
}
