package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/pkg/signing"
	"github.com/keyhouse/keyhouse/services/activations/internal/store"
	"google.golang.org/grpc/codes"
)

// fakeLeaseKeys is the lease-key SQL of LeaseStore: one tenant's active key and the
// replacements asked for.
type fakeLeaseKeys struct {
	LeaseStore
	mu       sync.Mutex
	active   *store.LeaseKey
	retired  []string
	replaced []time.Duration
}

func (f *fakeLeaseKeys) ActiveLeaseKey(context.Context, string) (*store.LeaseKey, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := *f.active
	return &k, nil
}

func (f *fakeLeaseKeys) LongestLeaseTTL(context.Context, string) (time.Duration, error) {
	return time.Hour, nil
}

func (f *fakeLeaseKeys) ReplaceLeaseKey(_ context.Context, _ string, kid string, next store.LeaseKey, retireAfter time.Duration) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.active.Kid != kid {
		return false, nil
	}
	f.retired = append(f.retired, kid)
	f.replaced = append(f.replaced, retireAfter)
	f.active = &next
	return true, nil
}

func newKeyring(t *testing.T) *signing.Keyring {
	t.Helper()
	k, err := signing.NewKeyring()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func fixed(k *signing.Keyring) func(context.Context) (*signing.Keyring, error) {
	return func(context.Context) (*signing.Keyring, error) { return k, nil }
}

// A lease key sealed under a keyring that is gone (the operator replaced the installation
// keyring) no longer opens: the lease signer retires it as a rotation would (the default
// overlap: the longest lease_ttl, at least 7 days, plus a day) and signs with a new key
// sealed under the current keyring, saying so in one WARN line. Before, every lease was a
// 500 until someone rotated the keys by hand.
func TestALeaseKeyThatNoLongerOpensIsReplacedAsARotation(t *testing.T) {
	gone, current := newKeyring(t), newKeyring(t)
	var logs bytes.Buffer
	st := &fakeLeaseKeys{}
	old := NewLeases(st, nil, nil, LeaseConfig{Keyring: fixed(gone)})
	k, err := old.newLeaseKey(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	st.active = &k
	x := NewLeases(st, nil, nil, LeaseConfig{Keyring: fixed(current), RefreshKeyring: fixed(current), Log: slog.New(slog.NewJSONHandler(&logs, nil))})

	signer, err := x.signingKey(context.Background(), "default", &k)
	if err != nil {
		t.Fatalf("signing with a key sealed under a replaced keyring: %v", err)
	}
	if len(st.retired) != 1 || st.retired[0] != k.Kid || st.active.Kid == k.Kid || st.replaced[0] != 8*24*time.Hour {
		t.Fatalf("retired %v (overlap %v), active %s; want %s retired for 8 days and a new key", st.retired, st.replaced, st.active.Kid, k.Kid)
	}
	if _, err := current.Open(st.active.SealedPrivate); err != nil {
		t.Fatalf("the new key is not sealed under the current keyring: %v", err)
	}
	if header, _ := base64.RawURLEncoding.DecodeString(strings.TrimSuffix(signer.header, ".")); !strings.Contains(string(header), `"kid":"`+st.active.Kid+`"`) {
		t.Fatalf("the lease is signed by %s, want the new key %s", header, st.active.Kid)
	}
	if want := `"kid":"` + st.active.Kid + `"`; !strings.Contains(logs.String(), want) ||
		!strings.Contains(logs.String(), `"level":"WARN"`) || !strings.Contains(logs.String(), `"retired_kid":"`+k.Kid+`"`) ||
		!strings.Contains(logs.String(), "docs/licensing.md#rotating") {
		t.Fatalf("log:\n%s", logs.String())
	}
	// The next lease signs with the new key, replacing nothing more.
	if _, err := x.signingKey(context.Background(), "default", st.active); err != nil || len(st.retired) != 1 {
		t.Fatalf("second lease: %v, retired %v", err, st.retired)
	}
}

// A key sealed under a keyring newer than the one this replica kept (licensing restarted on
// a replaced keyring after this replica fetched its own, and another replica sealed the
// key) is not replaced: the replica fetches the keyring again and opens it. Otherwise
// replicas holding different keyrings would replace each other's keys for as long as the
// restarts last.
func TestALeaseKeySealedUnderANewerKeyringIsOpenedAfterARefresh(t *testing.T) {
	stale, current := newKeyring(t), newKeyring(t)
	st := &fakeLeaseKeys{}
	k, err := NewLeases(st, nil, nil, LeaseConfig{Keyring: fixed(current)}).newLeaseKey(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	st.active = &k
	var mu sync.Mutex
	kept := stale
	x := NewLeases(st, nil, nil, LeaseConfig{
		Keyring: func(context.Context) (*signing.Keyring, error) { mu.Lock(); defer mu.Unlock(); return kept, nil },
		RefreshKeyring: func(context.Context) (*signing.Keyring, error) {
			mu.Lock()
			defer mu.Unlock()
			kept = current
			return kept, nil
		},
	})
	if _, err := x.signingKey(context.Background(), "default", &k); err != nil {
		t.Fatal(err)
	}
	if len(st.retired) != 0 || st.active.Kid != k.Kid {
		t.Fatalf("a key that opens under licensing's keyring was replaced: retired %v", st.retired)
	}
}

// When the replacement does not open either (another replica, on yet another keyring,
// replaced it in turn), the lease is a 503 that says retry, never a 500.
func TestAReplacementThatDoesNotOpenEitherIsA503(t *testing.T) {
	gone, current, other := newKeyring(t), newKeyring(t), newKeyring(t)
	st := &racingLeaseKeys{fakeLeaseKeys: fakeLeaseKeys{}, other: other}
	k, err := NewLeases(st, nil, nil, LeaseConfig{Keyring: fixed(gone)}).newLeaseKey(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	st.active = &k
	x := NewLeases(st, nil, nil, LeaseConfig{Keyring: fixed(current), RefreshKeyring: fixed(current)})
	_, err = x.signingKey(context.Background(), "default", &k)
	wantAPIError(t, err, codes.Unavailable, "Service unavailable, retry")
}

// racingLeaseKeys loses every replacement to a replica holding the keyring other.
type racingLeaseKeys struct {
	fakeLeaseKeys
	other *signing.Keyring
}

func (r *racingLeaseKeys) ReplaceLeaseKey(ctx context.Context, _ string, _ string, _ store.LeaseKey, _ time.Duration) (bool, error) {
	theirs, err := NewLeases(r, nil, nil, LeaseConfig{Keyring: fixed(r.other)}).newLeaseKey(ctx)
	if err != nil {
		return false, err
	}
	r.mu.Lock()
	r.active = &theirs
	r.mu.Unlock()
	return false, nil
}
