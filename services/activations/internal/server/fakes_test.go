package server

import (
	"bytes"
	"context"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/auth"
	"github.com/keyhouse/keyhouse/pkg/license"
	"github.com/keyhouse/keyhouse/pkg/licensecache"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
	"github.com/keyhouse/keyhouse/services/activations/internal/store"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// fakeLicenses is licensing's GetLicense and GetLicenses as pkg/licensingclient asks
// them: tenant "" finds a key in any tenant. It counts the calls of each.
type fakeLicenses struct {
	byKey   map[string]*licensingv1.License
	deleted map[string][]string // tenant → keys licensing deleted lately
	err     error               // an outage

	mu                 sync.Mutex
	singles, togethers int // License and Licenses calls
}

// calls reports how many License and Licenses calls were made.
func (f *fakeLicenses) calls() (singles, togethers int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.singles, f.togethers
}

func (f *fakeLicenses) DeletedKeys(_ context.Context, tenant string) ([]string, error) {
	if f.err != nil {
		return nil, f.err
	}
	return f.deleted[tenant], nil
}

func (f *fakeLicenses) License(ctx context.Context, tenant, key string) (*licensingv1.License, error) {
	f.mu.Lock()
	f.singles++
	f.mu.Unlock()
	l, err := f.find(tenant, key)
	if err == nil && tenant == "" { // as pkg/licensingclient does
		licensecache.AnnounceTenant(ctx, l.GetKey(), l.GetTenantId())
	}
	return l, err
}

// Licenses is License in any tenant for each key, by canonical key, the found ones named
// in one header write, as pkg/licensingclient does.
func (f *fakeLicenses) Licenses(ctx context.Context, keys []string) (map[string]*licensingv1.License, error) {
	f.mu.Lock()
	f.togethers++
	f.mu.Unlock()
	found := map[string]*licensingv1.License{}
	var named []string
	for _, key := range keys {
		l, err := f.find("", key)
		switch {
		case apierr.Is(err, codes.NotFound):
		case err != nil:
			return nil, err
		default:
			found[license.CanonicalKey(key)] = l
			named = append(named, l.GetKey(), l.GetTenantId())
		}
	}
	licensecache.AnnounceTenant(ctx, named...)
	return found, nil
}

func (f *fakeLicenses) find(tenant, key string) (*licensingv1.License, error) {
	if f.err != nil {
		return nil, f.err
	}
	l, ok := f.byKey[key]
	if !ok || (tenant != "" && l.GetTenantId() != tenant) {
		return nil, license.ErrNotFound
	}
	return l, nil
}

type seatRow struct {
	tenant, key, instance string
	hash                  []byte
	at                    time.Time
}

type usageRow struct {
	used, version int64
}

// fakeStore keeps the rules the SQL keeps (one seat per pair, the cap, increments within
// the limit) in memory.
type fakeStore struct {
	mu      sync.Mutex
	seats   []seatRow
	usage   map[string]*usageRow // tenant/key/metric
	version int64
	deleted map[string]bool // tenant/key
	clock   time.Time
}

func newFakeStore() *fakeStore {
	return &fakeStore{usage: map[string]*usageRow{}, deleted: map[string]bool{}, clock: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func usageKey(tenant, key, metric string) string { return tenant + "/" + key + "/" + metric }

func (f *fakeStore) find(tenant, key string, match func(seatRow) bool) int {
	for i, s := range f.seats {
		if s.tenant == tenant && s.key == key && match(s) {
			return i
		}
	}
	return -1
}

// ChangeSeats makes the removals first, then the activations, as the store does.
func (f *fakeStore) ChangeSeats(_ context.Context, changes []store.SeatChange) ([]store.SeatChanged, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]store.SeatChanged, len(changes))
	for _, activations := range []bool{false, true} {
		for i, c := range changes {
			switch {
			case c.Activate != activations:
			case c.Activate:
				out[i].Already, out[i].Err = f.activate(c.Tenant, c.Key, c.Instance, c.TokenHash, c.MaxSeats)
			default:
				out[i].Removed = f.remove(f.find(c.Tenant, c.Key, func(s seatRow) bool { return bytes.Equal(s.hash, c.TokenHash) }))
			}
		}
	}
	return out, nil
}

func (f *fakeStore) activate(tenant, key, instance string, hash []byte, maxSeats *int32) (bool, error) {
	if f.deleted[tenant+"/"+key] {
		return false, store.ErrLicenseDeleted
	}
	if f.find(tenant, key, func(s seatRow) bool { return s.instance == instance }) >= 0 {
		return true, nil
	}
	n := 0
	for _, s := range f.seats {
		if s.tenant == tenant && s.key == key {
			n++
		}
	}
	if maxSeats != nil && n >= int(*maxSeats) {
		return false, store.ErrCapReached
	}
	f.clock = f.clock.Add(time.Second)
	f.seats = append(f.seats, seatRow{tenant, key, instance, hash, f.clock})
	return false, nil
}

func (f *fakeStore) remove(i int) bool {
	if i < 0 {
		return false
	}
	f.seats = append(f.seats[:i], f.seats[i+1:]...)
	return true
}

func (f *fakeStore) DeactivateInstance(_ context.Context, tenant, key, _, instance, _ string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.remove(f.find(tenant, key, func(s seatRow) bool { return s.instance == instance })), nil
}

func (f *fakeStore) HasSeat(_ context.Context, tenant, key, instance string) (bool, *time.Time, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.find(tenant, key, func(s seatRow) bool { return s.instance == instance }) >= 0, nil, nil
}

func (f *fakeStore) Reissue(_ context.Context, tenant, key, _, instance string, hash []byte) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := f.find(tenant, key, func(s seatRow) bool { return s.instance == instance })
	if i < 0 {
		return false, nil
	}
	f.seats[i].hash = hash
	return true, nil
}

func (f *fakeStore) AddUsages(_ context.Context, incs []store.Increment) ([]store.Added, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []store.Added
	for _, i := range incs {
		out = append(out, f.addUsage(i.Tenant, i.Key, i.TokenHash, i.Metric, i.Inc, i.Limit, i.Allowed))
	}
	return out, nil
}

func (f *fakeStore) AddUsageOnce(ctx context.Context, _ string, _ []byte, inc store.Increment, answer func(store.Added) ([]byte, error)) ([]byte, error) {
	added, err := f.AddUsages(ctx, []store.Increment{inc})
	if err != nil {
		return nil, err
	}
	return answer(added[0])
}

func (f *fakeStore) addUsage(tenant, key string, hash []byte, metric string, inc int64, limit float64, allowed bool) store.Added {
	a := store.Added{SeatOK: f.find(tenant, key, func(s seatRow) bool { return bytes.Equal(s.hash, hash) }) >= 0}
	k := usageKey(tenant, key, metric)
	var used int64
	if u := f.usage[k]; u != nil {
		used = u.used
	}
	if !a.SeatOK || !allowed || float64(used+inc) > limit {
		return a
	}
	f.version++
	f.usage[k] = &usageRow{used: used + inc, version: f.version}
	a.Applied, a.Used = true, used+inc
	return a
}

func (f *fakeStore) Usage(_ context.Context, tenant, key string) (map[string]int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.usageOf(tenant, key), nil
}

func (f *fakeStore) usageOf(tenant, key string) map[string]int64 {
	out := map[string]int64{}
	prefix := tenant + "/" + key + "/"
	for k, u := range f.usage {
		if len(k) > len(prefix) && k[:len(prefix)] == prefix {
			out[k[len(prefix):]] = u.used
		}
	}
	return out
}

func (f *fakeStore) ResetUsage(_ context.Context, tenant, key, _ string, metric *string) (map[string]int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if metric != nil {
		f.version++
		f.usage[usageKey(tenant, key, *metric)] = &usageRow{used: 0, version: f.version}
	} else {
		for m := range f.usageOf(tenant, key) {
			delete(f.usage, usageKey(tenant, key, m))
		}
	}
	return f.usageOf(tenant, key), nil
}

func (f *fakeStore) Seats(_ context.Context, tenant, key string) ([]store.Seat, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []store.Seat
	for _, s := range f.seats {
		if s.tenant == tenant && s.key == key {
			out = append(out, store.Seat{Key: s.key, InstanceID: s.instance, ActivatedAt: s.at})
		}
	}
	return out, nil
}

func (f *fakeStore) Recent(_ context.Context, tenant string, limit int, exclude []string) ([]store.Seat, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []store.Seat
	for _, s := range f.seats {
		if s.tenant == tenant && !slices.Contains(exclude, s.key) {
			out = append(out, store.Seat{Key: s.key, InstanceID: s.instance, ActivatedAt: s.at})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ActivatedAt.After(out[j].ActivatedAt) })
	return out[:min(limit, len(out))], nil
}

func (f *fakeStore) CountSeats(ctx context.Context, tenant string, exclude []string) (int, error) {
	all, err := f.Recent(ctx, tenant, 1<<30, exclude)
	return len(all), err
}

func (f *fakeStore) ImportUsage(context.Context, string, map[string]map[string]int64) (int, error) {
	return 0, nil
}

func (f *fakeStore) Summaries(_ context.Context, tenant string, keys []string) (map[string]*store.Summary, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]*store.Summary{}
	for _, k := range keys {
		sum := &store.Summary{Usage: f.usageOf(tenant, k)}
		for _, s := range f.seats {
			if s.tenant == tenant && s.key == k {
				sum.Seats++
			}
		}
		if sum.Seats > 0 || len(sum.Usage) > 0 {
			out[k] = sum
		}
	}
	return out, nil
}

// lic is a license of tenant with the given terms; opts tweak it.
func lic(tenant, key string, maxSeats int32, limits map[string]any, opts ...func(*licensingv1.License)) *licensingv1.License {
	s, err := structpb.NewStruct(limits)
	if err != nil {
		panic(err)
	}
	l := &licensingv1.License{TenantId: tenant, Key: key, Status: "active", Limits: s, IssuedAt: timestamppb.Now()}
	if maxSeats > 0 {
		l.MaxActivations = wrapperspb.Int32(maxSeats)
	}
	for _, o := range opts {
		o(l)
	}
	return l
}

func revoked(l *licensingv1.License) { l.Status = "revoked" }

func expiresAt(t time.Time) func(*licensingv1.License) {
	return func(l *licensingv1.License) { l.ExpiresAt = timestamppb.New(t) }
}

// as is the context of a call the auth interceptor let through for tenant.
func as(tenant string) context.Context {
	return auth.WithPrincipal(context.Background(), auth.Principal{TenantID: tenant})
}
