package store

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/devinfra/pgproxy"
	"github.com/keyhouse/keyhouse/devinfra/testkit"
	"github.com/keyhouse/keyhouse/pkg/pgxx"
)

// A 503 means not applied: with the commit of usage changes delayed (Postgres commits
// after the caller gave up, or the caller gives up while the COMMIT waits) or its reply
// held (Postgres committed, the caller never hears), no change that answers an error
// other than ErrNoAnswer was applied, and none that answers its totals was not, over
// 1,000 trials in parallel (more on a machine too slow to learn both outcomes in those):
// single increments, batches of increments and resets.
func TestAUsageChangeAnswersFailureOnlyWhenNotApplied(t *testing.T) {
	t.Parallel()
	const (
		trials    = 1000
		maxRounds = 5
		workers   = 32
		deadline  = 1200 * time.Millisecond
		maxFault  = 1600 * time.Millisecond
	)
	dbURL := testkit.DatabaseURL(t, schema)
	direct, err := pgxx.Open(context.Background(), dbURL, "activations")
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	setup := New(direct, nil)

	// Only the changes' commits fail; the questions that learn their outcome find a
	// healthy database.
	fault := func(statements []string) pgproxy.Fault {
		if !slices.Contains(statements, recordCommitSQL) {
			return pgproxy.Fault{}
		}
		d := rand.N(maxFault)
		switch rand.N(10) {
		case 0, 1, 2:
			return pgproxy.Fault{HoldReply: d}
		case 3, 4, 5:
			return pgproxy.Fault{DelayCommit: d}
		}
		return pgproxy.Fault{}
	}
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := pgproxy.Start(u.Host, fault)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	u.Host = proxy.Addr()
	q := u.Query()
	q.Set("pool_max_conns", "48")
	u.RawQuery = q.Encode()
	pool, err := pgxx.Open(context.Background(), u.String(), "activations")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	proxied := New(pool, nil)
	var resolvedApplied, resolvedNot atomic.Int64
	proxied.resolved = func(applied bool) {
		if applied {
			resolvedApplied.Add(1)
		} else {
			resolvedNot.Add(1)
		}
	}

	// Each trial changes licenses of its own: one to three increments of 1 (a batch when
	// more than one), or every fifth a reset of a total of 5.
	type trial struct {
		tenant string
		keys   []string
		reset  bool
		err    error
	}
	ctx := context.Background()
	run := func() []*trial {
		all := make([]*trial, trials)
		for i := range all {
			tr := &trial{reset: i%5 == 4}
			n := 1 + i%3
			if tr.reset {
				n = 1
			}
			for range n {
				tenant, key := ids()
				tr.tenant = tenant
				tr.keys = append(tr.keys, key)
			}
			all[i] = tr
		}
		for _, tr := range all {
			for _, key := range tr.keys {
				mustActivate(t, setup, tr.tenant, key, "a")
				if tr.reset {
					if a, err := setup.AddUsage(ctx, tr.tenant, key, hash(key, "a"), "users", 5, 10, true); err != nil || !a.Applied {
						t.Fatalf("setup: %+v %v", a, err)
					}
				}
			}
		}

		next := make(chan *trial)
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for tr := range next {
					ctx, cancel := context.WithTimeout(context.Background(), deadline)
					if tr.reset {
						metric := "users"
						_, tr.err = proxied.ResetUsage(ctx, tr.tenant, tr.keys[0], "app", &metric)
					} else {
						var incs []Increment
						for _, key := range tr.keys {
							incs = append(incs, Increment{Tenant: tr.tenant, Key: key, TokenHash: hash(key, "a"), Metric: "users", Inc: 1, Limit: 10, Allowed: true})
						}
						var added []Added
						added, tr.err = proxied.AddUsages(ctx, incs)
						for _, a := range added {
							if !a.Applied || a.Used != 1 {
								t.Errorf("an answered increment: %+v", a)
							}
						}
					}
					cancel()
				}
			})
		}
		for _, tr := range all {
			next <- tr
		}
		close(next)
		wg.Wait()
		return all
	}
	// The test means something only when both outcomes were learned after a lost reply.
	// How often a fence's question runs out of the call's time depends on the machine's
	// speed (under a load of 50 one run of 1,000 learned only one way), so a slow machine
	// runs more trials rather than failing for its slowness; a fast one runs 1,000.
	var all []*trial
	for round := 0; round < maxRounds && (round == 0 || resolvedApplied.Load() == 0 || resolvedNot.Load() == 0); round++ {
		all = append(all, run()...)
	}
	// A delayed COMMIT still on its way reaches Postgres within maxFault.
	time.Sleep(maxFault + 200*time.Millisecond)

	var ok, failed, unknown int
	for _, tr := range all {
		switch {
		case tr.err == nil:
			ok++
		case errors.Is(tr.err, ErrNoAnswer):
			unknown++
			continue
		default:
			failed++
		}
		for _, key := range tr.keys {
			usage, err := setup.Usage(ctx, tr.tenant, key)
			if err != nil {
				t.Fatal(err)
			}
			want := map[bool]int64{true: 1, false: 0}[tr.err == nil]
			if tr.reset {
				want = map[bool]int64{true: 0, false: 5}[tr.err == nil]
			}
			if usage["users"] != want {
				t.Errorf("answered %v, but the total is %d (want %d): reset %v", tr.err, usage["users"], want, tr.reset)
			}
		}
	}
	t.Logf("%d trials: %d answered applied, %d not applied, %d unknown; fences found %d applied, %d not",
		len(all), ok, failed, unknown, resolvedApplied.Load(), resolvedNot.Load())
	if resolvedApplied.Load() == 0 || resolvedNot.Load() == 0 {
		t.Errorf("the faults never left an outcome to learn both ways")
	}
}
