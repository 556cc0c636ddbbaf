package server

import (
	"bytes"
	"context"
	"maps"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	"github.com/keyhouse/keyhouse/pkg/auth"
	"github.com/keyhouse/keyhouse/pkg/billingclient"
	"github.com/keyhouse/keyhouse/pkg/license"
	"github.com/keyhouse/keyhouse/pkg/signing"
	activationsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/activations/v1"
	"github.com/keyhouse/keyhouse/services/licensing/internal/store"
)

// fakeStore keeps what the SQL keeps in memory: licenses per tenant and key, product
// owners, deletions and idempotency records. A transaction works on a copy that replaces
// the state only when fn succeeds, and transactions run one at a time (which is what the
// quota lock guarantees in Postgres).
type fakeStore struct {
	mu       sync.Mutex
	now      func() time.Time
	licenses map[string]*store.License // tenant + "/" + key
	owners   map[string]string         // license.ProductKey → tenant
	idem     map[string]idemRecord     // tenant + "/" + Idempotency-Key
	deleted  map[string][]string       // tenant → keys deleted
}

type idemRecord struct {
	hash, resp []byte
}

func newFakeStore(now func() time.Time) *fakeStore {
	return &fakeStore{now: now, licenses: map[string]*store.License{}, owners: map[string]string{}, idem: map[string]idemRecord{}, deleted: map[string][]string{}}
}

func id(tenant, key string) string { return tenant + "/" + key }

// put stores l as it is (a row written earlier).
func (f *fakeStore) put(l store.License) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.licenses[id(l.TenantID, l.Key)] = &l
}

// row returns a copy of the stored license, or nil.
func (f *fakeStore) row(tenant, key string) *store.License {
	f.mu.Lock()
	defer f.mu.Unlock()
	if l, ok := f.licenses[id(tenant, key)]; ok {
		c := *l
		return &c
	}
	return nil
}

func (f *fakeStore) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.licenses)
}

// deletions lists the tenant's committed deletions (each emits license.deleted).
func (f *fakeStore) deletions(tenant string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.deleted[tenant]...)
}

func (f *fakeStore) find(licenses map[string]*store.License, tenant, key string) (*store.License, error) {
	for _, l := range licenses {
		if l.Key == key && (tenant == "" || l.TenantID == tenant) {
			c := *l
			return &c, nil
		}
	}
	return nil, store.ErrNotFound
}

func (f *fakeStore) Get(_ context.Context, tenant, key string) (*store.License, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.find(f.licenses, tenant, key)
}

func (f *fakeStore) GetMany(ctx context.Context, keys []string) (map[string]*store.License, error) {
	found := map[string]*store.License{}
	for _, key := range keys {
		if l, err := f.Get(ctx, "", key); err == nil {
			found[key] = l
		}
	}
	return found, nil
}

func (f *fakeStore) GetLive(ctx context.Context, tenant, key string) (*store.License, error) {
	return f.Get(ctx, tenant, key)
}

// run is one transaction: fn sees a copy, committed when it returns nil.
func (f *fakeStore) run(fn func(store.Tx) error) error {
	tx := &fakeTx{f: f, licenses: map[string]*store.License{}, owners: maps.Clone(f.owners)}
	for k, l := range f.licenses {
		c := *l
		tx.licenses[k] = &c
	}
	if err := fn(tx); err != nil {
		return err
	}
	f.licenses, f.owners = tx.licenses, tx.owners
	for _, d := range tx.deleted {
		f.deleted[d.TenantID] = append(f.deleted[d.TenantID], d.Key)
	}
	return nil
}

func (f *fakeStore) DeletedKeys(_ context.Context, tenant string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.deleted[tenant]...), nil
}

func (f *fakeStore) InTx(_ context.Context, fn func(store.Tx) error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.run(fn)
}

func (f *fakeStore) Issue(ctx context.Context, l *store.License) error {
	return f.InTx(ctx, func(tx store.Tx) error { return tx.Insert(ctx, l) })
}

func (f *fakeStore) Idempotent(_ context.Context, tenant, idemKey string, hash []byte, create func(store.Tx) ([]byte, error)) ([]byte, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if idemKey != "" {
		if rec, ok := f.idem[id(tenant, idemKey)]; ok {
			if !bytes.Equal(rec.hash, hash) {
				return nil, false, apierr.Conflict("Idempotency-Key reused with a different request")
			}
			return rec.resp, true, nil
		}
	}
	var resp []byte
	err := f.run(func(tx store.Tx) error {
		var err error
		resp, err = create(tx)
		return err
	})
	if err != nil {
		return nil, false, err
	}
	if idemKey != "" {
		f.idem[id(tenant, idemKey)] = idemRecord{hash: hash, resp: resp}
	}
	return resp, false, nil
}

func (f *fakeStore) UpdateNotes(_ context.Context, tenant, key, notes string) (*store.License, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.licenses[id(tenant, key)]
	if !ok {
		return nil, store.ErrNotFound
	}
	l.Notes = &notes
	if notes == "" {
		l.Notes = nil
	}
	c := *l
	return &c, nil
}

func (f *fakeStore) List(_ context.Context, tenant string, flt store.Filter) ([]*store.License, int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*store.License
	for _, l := range f.licenses {
		if l.TenantID == tenant && (flt.Status == "" || l.Status == flt.Status) && (flt.ProductID == "" || l.ProductID == flt.ProductID) {
			c := *l
			out = append(out, &c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].IssuedAt.After(out[j].IssuedAt) })
	total := len(out)
	out = out[min(flt.Offset, total):min(flt.Offset+flt.Limit, total)]
	return out, total, nil
}

func (f *fakeStore) Counts(_ context.Context, tenant string) (store.Counts, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var c store.Counts
	for _, l := range f.licenses {
		if l.TenantID != tenant {
			continue
		}
		c.Total++
		switch l.Status {
		case license.StatusActive:
			c.Active++
		case license.StatusRevoked:
			c.Revoked++
		}
	}
	return c, nil
}

func (f *fakeStore) countActive(licenses map[string]*store.License, tenant string) int {
	n := 0
	for _, l := range licenses {
		if l.TenantID == tenant && license.Usable(l.Status, l.ExpiresAt, f.now()) == nil {
			n++
		}
	}
	return n
}

func (f *fakeStore) CountActive(_ context.Context, tenant string) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.countActive(f.licenses, tenant), nil
}

func (f *fakeStore) ClaimProduct(_ context.Context, tenant, productID string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return claim(f.owners, tenant, productID)
}

func claim(owners map[string]string, tenant, productID string) error {
	k := license.ProductKey(productID)
	if owner, ok := owners[k]; ok && owner != tenant {
		return store.ErrProductOwned
	}
	owners[k] = tenant
	return nil
}

func (f *fakeStore) ProductOwner(_ context.Context, productID string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.owners[license.ProductKey(productID)], nil
}

// fakeTx is one transaction's view.
type fakeTx struct {
	f        *fakeStore
	licenses map[string]*store.License
	owners   map[string]string
	deleted  []store.License
}

func (t *fakeTx) ClaimProduct(_ context.Context, tenant, productID string) error {
	return claim(t.owners, tenant, productID)
}

func (t *fakeTx) GetForUpdate(_ context.Context, tenant, key string) (*store.License, error) {
	return t.f.find(t.licenses, tenant, key)
}

func (t *fakeTx) LockQuota(context.Context, string) error { return nil }

func (t *fakeTx) CountActive(_ context.Context, tenant string) (int, error) {
	return t.f.countActive(t.licenses, tenant), nil
}

func (t *fakeTx) Insert(_ context.Context, l *store.License) error {
	l.IssuedAt, l.Status = t.f.now(), license.StatusActive
	c := *l
	t.licenses[id(l.TenantID, l.Key)] = &c
	return nil
}

func (t *fakeTx) SetStatus(_ context.Context, tenant, key, status string) error {
	l, ok := t.licenses[id(tenant, key)]
	if !ok {
		return store.ErrNotFound
	}
	l.Status, l.RevokedAt = status, nil
	if status == license.StatusRevoked {
		now := t.f.now()
		l.RevokedAt = &now
	}
	return nil
}

func (t *fakeTx) UpdateTerms(_ context.Context, locked *store.License, terms store.Terms) (*store.License, error) {
	l, ok := t.licenses[id(locked.TenantID, locked.Key)]
	if !ok {
		return nil, store.ErrNotFound
	}
	if terms.SetExpiry {
		l.ExpiresAt = terms.ExpiresAt
	}
	if terms.SetMaxActivations {
		l.MaxActivations = terms.MaxActivations
	}
	if terms.Limits != nil {
		l.Limits = terms.Limits
	}
	c := *l
	return &c, nil
}

func (t *fakeTx) Delete(_ context.Context, tenant, key string) error {
	if _, ok := t.licenses[id(tenant, key)]; !ok {
		return store.ErrNotFound
	}
	delete(t.licenses, id(tenant, key))
	t.deleted = append(t.deleted, store.License{TenantID: tenant, Key: key})
	return nil
}

func (t *fakeTx) Existing(_ context.Context, keys []string) (map[string]*store.License, error) {
	out := map[string]*store.License{}
	for _, k := range keys {
		for _, l := range t.licenses {
			if l.Key == k {
				c := *l
				out[k] = &c
			}
		}
	}
	return out, nil
}

func (t *fakeTx) DeletedAmong(_ context.Context, tenant string, keys []string) (map[string]bool, error) {
	deleted := append([]string(nil), t.f.deleted[tenant]...)
	for _, d := range t.deleted {
		if d.TenantID == tenant {
			deleted = append(deleted, d.Key)
		}
	}
	out := map[string]bool{}
	for _, k := range keys {
		if slices.Contains(deleted, k) {
			out[k] = true
		}
	}
	return out, nil
}

func (t *fakeTx) InsertImported(_ context.Context, ls []*store.License) error {
	for _, l := range ls {
		c := *l
		t.licenses[id(l.TenantID, l.Key)] = &c
	}
	return nil
}

// fakeBilling is billingclient's ActivePlan with the rule it keeps.
type fakeBilling struct {
	mu     sync.Mutex
	quota  int
	active bool
	err    error // an outage
	calls  int
}

func (b *fakeBilling) TenantExists(context.Context, string) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err == nil, b.err
}

func (b *fakeBilling) ActivePlan(context.Context, string) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls++
	switch {
	case b.err != nil:
		return 0, b.err
	case !b.active:
		return 0, billingclient.ErrSubscriptionInactive
	}
	return b.quota, nil
}

// fakeSeats is an activations service without seats that records what Stats was asked.
type fakeSeats struct {
	mu      sync.Mutex
	exclude []string
}

func (*fakeSeats) Summaries(context.Context, string, []string) (map[string]*activationsv1.SeatSummary, error) {
	return map[string]*activationsv1.SeatSummary{}, nil
}

func (*fakeSeats) ImportUsage(context.Context, string, []*activationsv1.ImportedUsage) error {
	return nil
}

func (f *fakeSeats) Stats(_ context.Context, _ string, _ int, exclude []string) (*activationsv1.GetActivationStatsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.exclude = exclude
	return &activationsv1.GetActivationStatsResponse{}, nil
}

var testKeyring = func() *signing.Keyring {
	k, err := signing.NewKeyring()
	if err != nil {
		panic(err)
	}
	return k
}()

// clock is the fixed now of every test.
var clock = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

type fixture struct {
	srv     *Server
	store   *fakeStore
	billing *fakeBilling
	seats   *fakeSeats
}

// newFixture is a licensing server on fakes: hosted (billing asked) unless selfHosted.
func newFixture(t *testing.T, hosted bool) *fixture {
	t.Helper()
	now := func() time.Time { return clock }
	fx := &fixture{store: newFakeStore(now), billing: &fakeBilling{active: true}, seats: &fakeSeats{}}
	fx.srv = New(Config{MultiTenant: hosted, Keyring: testKeyring}, fx.store, fx.billing, fx.seats)
	fx.srv.now = now
	return fx
}

// as is a call by tenant.
func as(tenant string) context.Context {
	return auth.WithPrincipal(context.Background(), auth.Principal{TenantID: tenant})
}

// seed stores a license of tenant: active and perpetual unless changed by opts.
func (fx *fixture) seed(tenant string, opts ...func(*store.License)) string {
	l := store.License{
		TenantID: tenant, Key: license.NewKey(), Tier: "pro", ProductID: "app", IssuedTo: "a@example.com",
		IssuedAt: clock.Add(-time.Hour), Status: license.StatusActive, Limits: map[string]float64{},
	}
	for _, o := range opts {
		o(&l)
	}
	fx.store.put(l)
	return l.Key
}

func revoked(l *store.License) {
	l.Status = license.StatusRevoked
	at := clock.Add(-time.Minute)
	l.RevokedAt = &at
}

func expiredAt(d time.Duration) func(*store.License) {
	return func(l *store.License) {
		at := clock.Add(d)
		l.ExpiresAt = &at
	}
}

// wantErr checks err is the apierr with code-carrying message msg.
func wantErr(t *testing.T, err error, msg string) {
	t.Helper()
	if err == nil || err.Error() != msg {
		t.Fatalf("got error %v, want %q", err, msg)
	}
}
