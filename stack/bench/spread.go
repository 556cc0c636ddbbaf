package bench

import (
	"context"
	"crypto/sha256"
	"fmt"
	"math"
	"sort"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/keyhouse/keyhouse/pkg/auth"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
)

// The read scenarios (verify-license, its floor, validate-license, check-update) look up
// licenses the way installed apps do: many licenses, each checked now and then. They share
// one set of readLicenses licenses, each with one seat, and pick the key of each request by
// one of three spreads, each its own row of the report.
const (
	readLicenses = 100_000
	// hotSet is how many licenses the hot spread walks round robin: the spread of the
	// earlier benchmarks, which the gateway's cache answers almost entirely.
	hotSet = 200
	// zipfS is the Zipf exponent of the realistic mix: a few busy licenses, a long tail of
	// quiet ones.
	zipfS = 1.1
	// readProduct is the read licenses' product; check-update registers its releases under
	// it.
	readProduct = "bench-updates"
	// readInstance is the instance id of every read license's seat.
	readInstance = "bench-host"
)

// Spread picks which of the read licenses request i of a worker asks about.
type Spread struct {
	// ID suffixes the scenario's ID ("" for uniform, which the goals are about).
	ID string
	// Label goes into the scenario's name.
	Label string
	pick  func(worker, i int) int
}

// Spreads are the three key spreads of every read scenario.
var Spreads = []Spread{
	{ID: "", Label: "uniform over 100,000 licenses", pick: func(worker, i int) int {
		return int(mix(uint64(worker)<<40|uint64(i)) % readLicenses)
	}},
	{ID: "-zipf", Label: "Zipf s=1.1 over 100,000 licenses", pick: func(worker, i int) int {
		return zipfRank(mix(uint64(worker)<<40 | uint64(i) | 1<<63))
	}},
	{ID: "-hot", Label: "hot set of 200 licenses, round robin", pick: func(worker, i int) int {
		return (worker*7919 + i) % hotSet
	}},
}

// spreadIndex numbers sp among Spreads, so each spread's row takes client addresses of its
// own (the rows run one after another in one rate-limit window).
func spreadIndex(sp Spread) int {
	for i, s := range Spreads {
		if s.ID == sp.ID {
			return i
		}
	}
	return 0
}

// mix is SplitMix64's finalizer: a stateless, well-spread hash of a request's number, so
// that workers need no random source of their own.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// zipfCDF[k] is the probability that a Zipf-distributed rank is at most k (ranks 0..n-1,
// weight 1/(k+1)^s).
var zipfCDF = sync.OnceValue(func() []float64 {
	cdf := make([]float64, readLicenses)
	var sum float64
	for k := range cdf {
		sum += 1 / math.Pow(float64(k+1), zipfS)
		cdf[k] = sum
	}
	for k := range cdf {
		cdf[k] /= sum
	}
	return cdf
})

// zipfRank maps a uniform 64-bit value to a Zipf rank, then the rank to a license, so the
// busy licenses are spread over the table rather than its first rows.
func zipfRank(u uint64) int {
	cdf := zipfCDF()
	p := float64(u>>11) / (1 << 53)
	rank := sort.SearchFloat64s(cdf, p)
	if rank >= len(cdf) {
		rank = len(cdf) - 1
	}
	return int(mix(uint64(rank)) % readLicenses)
}

// readKey is license i of the read set: a well-formed key derived from i, so that a run
// needs no list of them.
func readKey(i int) string { return derivedKey(fmt.Sprintf("keyhouse-bench-read-%d", i)) }

// derivedKey is a well-formed license key (seven groups of four Crockford base32
// characters) derived from seed.
func derivedKey(seed string) string {
	const alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
	sum := sha256.Sum256([]byte(seed))
	b := make([]byte, 0, 34)
	for j := range 28 {
		if j > 0 && j%4 == 0 {
			b = append(b, '-')
		}
		b = append(b, alphabet[sum[j]%32])
	}
	return string(b)
}

// readLicenseKeys returns the read licenses' keys, seeding them on the stack's first use: the
// licenses with COPY into licensing's table and one seat each into activations' (the same
// rows issue-license and activate-license write; through the API, the Management and
// Activation tiers would take hours for 100,000), then VACUUM and ANALYZE, as after any bulk load.
func readLicenseKeys(ctx context.Context, env *Env) ([]string, error) {
	return onStack(env, "read licenses", func() ([]string, error) { return seedReadLicenses(ctx, env) })
}

func seedReadLicenses(ctx context.Context, env *Env) ([]string, error) {
	keys := make([]string, readLicenses)
	for i := range keys {
		keys[i] = readKey(i)
	}
	url := env.Stack.Env("DATABASE_URL")
	lic, err := pgxx.Open(ctx, url, "licensing")
	if err != nil {
		return nil, err
	}
	defer lic.Close()
	if _, err := lic.CopyFrom(ctx, pgx.Identifier{"licenses"},
		[]string{"key_hash", "key", "tenant_id", "tier", "product_id", "issued_to", "limits"},
		pgx.CopyFromSlice(len(keys), func(i int) ([]any, error) {
			sum := sha256.Sum256([]byte(keys[i]))
			return []any{sum[:], keys[i], auth.SelfHostedTenant, "pro", readProduct,
				fmt.Sprintf("reader-%d@example.com", i), map[string]any{"seats": 10}}, nil
		})); err != nil {
		return nil, fmt.Errorf("seed licenses: %w", err)
	}
	seats, err := pgxx.Open(ctx, url, "activations")
	if err != nil {
		return nil, err
	}
	defer seats.Close()
	if _, err := seats.CopyFrom(ctx, pgx.Identifier{"seats"},
		[]string{"tenant_id", "license_key", "instance_id", "token_hash"},
		pgx.CopyFromSlice(len(keys), func(i int) ([]any, error) {
			tok := sha256.Sum256(fmt.Appendf(nil, "keyhouse-bench-seat-%d", i))
			return []any{auth.SelfHostedTenant, keys[i], readInstance, tok[:]}, nil
		})); err != nil {
		return nil, fmt.Errorf("seed seats: %w", err)
	}
	// VACUUM too: a bulk load leaves every page without its visibility map bits and
	// every row without its hint bits, which the first reads then write (and autovacuum
	// comes to vacuum in the middle of a measured row).
	for _, db := range []*pgxpool.Pool{lic, seats} {
		if _, err := db.Exec(ctx, `VACUUM (ANALYZE)`); err != nil {
			return nil, err
		}
	}
	return keys, nil
}
