package licensingclient_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/pkg/licensingclient"
	"github.com/keyhouse/keyhouse/pkg/signing"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	"google.golang.org/grpc"
)

// keyLicensing serves a keyring and the public key it signs with, counting the questions
// about the public key; promote swaps in another keyring, as a licensing restarted on a
// promoted key answers.
type keyLicensing struct {
	licensingv1.UnimplementedLicensingInternalServiceServer
	licensingv1.UnimplementedLicensingServiceServer
	mu      sync.Mutex
	keyring *signing.Keyring
	asked   atomic.Int64
}

func (f *keyLicensing) current() *signing.Keyring {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.keyring
}

func (f *keyLicensing) promote(k *signing.Keyring) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.keyring = k
}

func (f *keyLicensing) GetSigningKeys(context.Context, *licensingv1.GetSigningKeysRequest) (*licensingv1.GetSigningKeysResponse, error) {
	doc, err := signing.MarshalKeyring(f.current())
	return &licensingv1.GetSigningKeysResponse{Keyring: doc}, err
}

func (f *keyLicensing) GetPublicKey(context.Context, *licensingv1.GetPublicKeyRequest) (*licensingv1.GetPublicKeyResponse, error) {
	f.asked.Add(1)
	return &licensingv1.GetPublicKeyResponse{PublicKey: f.current().PublicKeyPEM()}, nil
}

func newKeyring(t *testing.T) *signing.Keyring {
	t.Helper()
	k, err := signing.NewKeyring()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// Releases asks CurrentKeyring before each manifest it signs, once a second for each
// release checked: with thousands of releases that was thousands of calls a second to
// licensing. The process now asks at most once a KeyCheckInterval, and still follows a
// promotion.
func TestCurrentKeyringAsksLicensingOnceAnIntervalAndFollowsAPromotion(t *testing.T) {
	old, promoted := newKeyring(t), newKeyring(t)
	f := &keyLicensing{keyring: old}
	lis := listen(t)
	g := grpc.NewServer()
	licensingv1.RegisterLicensingInternalServiceServer(g, f)
	licensingv1.RegisterLicensingServiceServer(g, f)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	c := client(t, lis.Addr().String())
	clock := time.Unix(1_800_000_000, 0)
	var clockMu sync.Mutex
	c.SetClock(func() time.Time { clockMu.Lock(); defer clockMu.Unlock(); return clock })
	advance := func(d time.Duration) { clockMu.Lock(); clock = clock.Add(d); clockMu.Unlock() }
	ctx := context.Background()

	// 200 signings within one interval, in parallel: one question.
	var wg sync.WaitGroup
	for range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k, err := c.CurrentKeyring(ctx)
			if err != nil || k.KeyID() != old.KeyID() {
				t.Errorf("CurrentKeyring = %v, %v; want the kept keyring %s", k, err, old.KeyID())
			}
		}()
	}
	wg.Wait()
	if n := f.asked.Load(); n != 1 {
		t.Fatalf("licensing was asked for its key %d times for 200 signings within an interval, want 1", n)
	}

	// Licensing restarts on a promoted key: within the interval the kept key still signs;
	// once it has passed, the first signing fetches the promoted keyring and signs with it.
	f.promote(promoted)
	if k, _ := c.CurrentKeyring(ctx); k.KeyID() != old.KeyID() {
		t.Fatalf("within the interval CurrentKeyring = %s, want the kept %s", k.KeyID(), old.KeyID())
	}
	advance(licensingclient.KeyCheckInterval)
	k, err := c.CurrentKeyring(ctx)
	if err != nil || k.KeyID() != promoted.KeyID() {
		t.Fatalf("after the interval CurrentKeyring = %v, %v; want the promoted %s", k, err, promoted.KeyID())
	}
	if n := f.asked.Load(); n != 2 {
		t.Fatalf("licensing was asked %d times, want 2", n)
	}
	if k, _ := c.Keyring(ctx); k.KeyID() != promoted.KeyID() {
		t.Fatalf("Keyring after the promotion was met = %s, want the promoted %s kept", k.KeyID(), promoted.KeyID())
	}
}
