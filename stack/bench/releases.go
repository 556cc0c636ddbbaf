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
	for _, sp := range Spreads {
		Register(Scenario{
			ID:    "check-update" + sp.ID,
			Name:  "check-update, " + sp.Label + ", 500 releases in the channel (gateway → licensing + releases → Postgres)",
			Note:  "as shipped: releases' answer from the gateway's cache when it knows the license's class (its tenant and product, kept while the license does not change, or from a valid verify-license answer it holds: the verify-license rows verify the same licenses) and holds the class's answer to the question (an offer kept for the second its manifest was signed in; the apps run 50 versions, so 50 questions) (on a miss: the license from releases' cache of licensing's answers, the channel's latest release from releases' cache of it (one indexed selection among 500 published releases when it lacks it), an RSA-2048 signature at most once per release and second)",
			Setup: func(ctx context.Context, env *Env) (Op, error) { return setupCheckUpdate(ctx, env, sp) },
		})
	}
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
	offer, current := []byte(`"version":"4.9.9"`), []byte(`{"update_available":false,"release":null}`)
	return func(ctx context.Context, worker, i int) error {
		k := sp.pick(worker, i)
		installed := installedVersion(k)
		// Block 26..28 of clientIP's numbering: addresses the verify and validate rows
		// (same Validation tier) have not spent.
		st, body, err := env.Do(ctx, http.MethodPost, "/v1/check-update", clientIP(26+spreadIndex(sp), worker, i, 900), false, map[string]string{
			"key": keys[k], "product_id": product, "platform": "linux-x64", "current_version": installed,
		})
		if err := Expect(st, body, err, http.StatusOK); err != nil {
			return err
		}
		want := offer
		if installed == latestVersion {
			want = current
		}
		if !bytes.Contains(body, want) {
			return fmt.Errorf("on %s, not the latest release: %s", installed, body)
		}
		return nil
	}, nil
}

// installedVersions is how many versions a fleet's installs are spread over: the app of
// license k runs the (k mod 50)th of the 50 newest releases, so the row asks 50 different
// questions of one product (each answered by the gateway for every license of the product
// it has seen), and a fiftieth of the apps are current.
const installedVersions = 50

// latestVersion is the channel's newest release (channelReleases are 0.0.0 to 4.9.9).
const latestVersion = "4.9.9"

// installedVersion is the version the app of license k runs.
func installedVersion(k int) string {
	v := channelReleases - installedVersions + k%installedVersions
	return fmt.Sprintf("%d.%d.%d", v/100, v%100/10, v%10)
}

// registerChannel registers the channel's releases, once per stack, for the three
// spreads' rows.
func registerChannel(ctx context.Context, env *Env, product string) error {
	_, err := onStack(env, "releases of "+product, func() (struct{}, error) {
		return struct{}{}, registerReleases(ctx, env, product)
	})
	return err
}

func registerReleases(ctx context.Context, env *Env, product string) error {
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
	return nil
}
