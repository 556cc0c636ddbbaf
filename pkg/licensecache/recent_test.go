package licensecache

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/pkg/license"
	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// recordingCache is a following cache that records what it was told to drop.
type recordingCache struct{ dropped []string }

func (c *recordingCache) Invalidate(key string) { c.dropped = append(c.dropped, key) }
func (c *recordingCache) Clear()                {}

// sent runs req through r's client interceptor and returns the keys the call named.
func sent(t *testing.T, r *recentChanges, req any) (ctx context.Context, named []string) {
	t.Helper()
	err := r.forwarding()(context.Background(), "/m", req, nil, nil, func(c context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
		ctx = c
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	md, _ := metadata.FromOutgoingContext(ctx)
	return metadata.NewIncomingContext(context.Background(), md), md.Get(RecentlyChangedHeader)
}

// A revocation through a gateway, then a lease through it: the lease's batch names the
// revoked key to activations, wherever it sits in the request and however it was typed,
// and nothing else; activations drops it from its caches before serving the call and
// names it on its own call to licensing in turn. Past recentWindow nothing is named.
func TestACallNamesTheKeysOfItsRequestThatChangedWithinTheWindow(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	gateway, activations := newRecentChanges(), newRecentChanges()
	gateway.now, activations.now = clock, clock

	revoked, other := license.NewKey(), license.NewKey()
	gateway.note(license.CanonicalKey(revoked))
	// An app types its key in lower case, without dashes; the batch holds two leases.
	typed := strings.ToLower(strings.ReplaceAll(revoked, "-", ""))
	lease := &activationsv1.CreateLeaseBatchRequest{Items: []*activationsv1.CreateLeaseBatchItem{
		{Request: &activationsv1.CreateLeaseRequest{Key: other}},
		{Request: &activationsv1.CreateLeaseRequest{Key: typed}},
		{Request: &activationsv1.CreateLeaseRequest{Key: typed}},
	}}
	incoming, named := sent(t, gateway, lease)
	if want := []string{license.CanonicalKey(revoked)}; !slices.Equal(named, want) {
		t.Fatalf("the lease batch named %q, want %q", named, want)
	}

	cache := &recordingCache{}
	defer activations.follow(cache)()
	served := false
	_, err := activations.honoring()(incoming, lease, &grpc.UnaryServerInfo{}, func(context.Context, any) (any, error) {
		served = true
		if !slices.Equal(cache.dropped, named) {
			t.Errorf("activations served the call with %q dropped, want %q", cache.dropped, named)
		}
		return nil, nil
	})
	if err != nil || !served {
		t.Fatalf("the call was not served: %v", err)
	}
	// Activations' lookup of the two licenses names the revoked one to licensing.
	if _, named := sent(t, activations, &licensingv1.GetLicensesRequest{Keys: []string{other, revoked}}); !slices.Equal(named, []string{revoked}) {
		t.Fatalf("activations' call to licensing named %q, want %q", named, []string{revoked})
	}

	// Still named 172 ms after the change, when a loaded machine's lease and activation
	// had gone before the update check and NATS had not yet reached a replica, and just
	// short of the window; nothing at its end.
	changed := now
	for _, after := range []time.Duration{172 * time.Millisecond, recentWindow - time.Millisecond} {
		now = changed.Add(after)
		if _, named := sent(t, gateway, lease); len(named) != 1 {
			t.Errorf("the gateway named %q %v after the change, want the revoked key", named, after)
		}
	}
	now = changed.Add(recentWindow)
	for name, r := range map[string]*recentChanges{"gateway": gateway, "activations": activations} {
		if _, named := sent(t, r, lease); len(named) != 0 {
			t.Errorf("%s named %q after the window", name, named)
		}
	}
	// A call that names nothing drops nothing, and one that names keys it is not about
	// drops none of them: a call cannot empty more of a cache than asking would.
	unrelated := license.NewKey()
	for _, ctx := range []context.Context{
		context.Background(),
		metadata.NewIncomingContext(context.Background(), metadata.Pairs(RecentlyChangedHeader, unrelated)),
	} {
		cache.dropped = nil
		if _, err := activations.honoring()(ctx, lease, &grpc.UnaryServerInfo{}, func(context.Context, any) (any, error) { return nil, nil }); err != nil || len(cache.dropped) != 0 {
			t.Fatalf("a call naming nothing of its own dropped %q (%v)", cache.dropped, err)
		}
	}
}

// The answer of a write names the license it changed apart from the seats: the caller
// remembers the first (a revocation), not the second (a deactivation, which changes no
// license anyone else caches).
func TestDropAnnouncedRemembersLicensesNotSeats(t *testing.T) {
	licenseKey, seatKey := license.NewKey(), license.NewKey()
	for _, c := range []struct {
		key    string
		header metadata.MD
	}{
		{licenseKey, metadata.Pairs(ChangedHeader, licenseKey, LicenseChangedHeader, licenseKey)},
		{seatKey, metadata.Pairs(ChangedHeader, seatKey)},
	} {
		cache := &recordingCache{}
		err := DropAnnouncedFrom(cache)(context.Background(), "/m", nil, nil, nil, func(_ context.Context, _ string, _, _ any, _ *grpc.ClientConn, opts ...grpc.CallOption) error {
			for _, o := range opts {
				if h, ok := o.(grpc.HeaderCallOption); ok {
					*h.HeaderAddr = c.header
				}
			}
			return nil
		})
		if err != nil || !slices.Equal(cache.dropped, []string{c.key}) {
			t.Fatalf("the answer naming %q dropped %q (%v)", c.key, cache.dropped, err)
		}
	}
	req := &licensingv1.GetLicensesRequest{Keys: []string{seatKey, licenseKey}}
	if _, named := sent(t, recent, req); !slices.Equal(named, []string{licenseKey}) {
		t.Fatalf("after the answers, a call about both named %q, want only the license's %q", named, licenseKey)
	}
}

// A burst of changes (an import) keeps the record to the keys of the last windows: ended
// windows are pruned once the record is large, at most once per window.
func TestTheRecordOfRecentChangesStaysBoundedThroughABurst(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	r := newRecentChanges()
	r.now = func() time.Time { return now }
	const every = time.Millisecond / 10 // 10,000 changes a second
	for i := range 50_000 {
		r.note(strconv.Itoa(i))
		now = now.Add(every)
	}
	// A window holds recentWindow ÷ every keys at this rate; pruning once per window leaves
	// at most two windows' worth on top of the threshold.
	perWindow := int(recentWindow / every)
	if n := len(r.until); n > maxSettling+2*perWindow {
		t.Fatalf("%d keys recorded after the burst, want at most %d", n, maxSettling+2*perWindow)
	}
	if _, named := sent(t, r, &licensingv1.GetLicensesRequest{Keys: []string{"49999", "0"}}); !slices.Equal(named, []string{"49999"}) {
		t.Fatalf("named %q, want only the last change", named)
	}
}
