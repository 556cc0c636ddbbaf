package keyhouse

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// fakeServer answers the routes a client's lease path uses, signing leases with a key of
// its own that the client does not have pinned, like a hosted server that wants
// ?tenant_id= on GET /v1/lease-keys.
type fakeServer struct {
	t         *testing.T
	priv      ed25519.PrivateKey
	kid       string
	tenant    string // whose keys sign its leases, named in their tenant_id claim
	noClaim   bool   // leases without the tenant_id claim (a server before it)
	keysState int    // the status GET /v1/lease-keys answers when tenant_id is right
	floating  bool   // leases of a floating seat
	mu        sync.Mutex
	keyAsks   []string // the tenant_id of each GET /v1/lease-keys
	// suspended: every request is answered 403 Tenant is suspended, as a hosted server
	// whose operator suspended the vendor's account.
	suspended bool
	requests  map[string]int // requests by path
}

// setSuspended suspends the tenant (true) or lifts the suspension.
func (f *fakeServer) setSuspended(s bool) {
	f.mu.Lock()
	f.suspended = s
	f.mu.Unlock()
}

// count is how many requests of path the server saw.
func (f *fakeServer) count(path string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requests[path]
}

func newFakeServer(t *testing.T, tenant string) (*fakeServer, *httptest.Server) {
	_, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeServer{t: t, priv: priv, kid: "kid-" + tenant, tenant: tenant, keysState: 200}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv
}

// lease signs a lease of an hour, renewed after half an hour, on the server's (the real)
// clock; nonce, the client's clock at the request, is signed into it as the server does.
func (f *fakeServer) lease(key, product string, nonce any) string {
	enc := base64.RawURLEncoding
	header, _ := json.Marshal(map[string]string{"alg": "EdDSA", "kid": f.kid, "typ": "keyhouse-lease+jwt"})
	now := time.Now().Unix()
	claims := map[string]any{"iss": "https://licenses.example.com", "sub": key, "aud": product, "jti": "j", "iat": now,
		"exp": now + 3600, "renew_after": now + 1800, "tier": "pro", "status": "active", "license_expires_at": nil,
		"limits": map[string]any{}, "entitlements": []string{}, "instance_id": "m", "floating": f.floating, "components": nil}
	if !f.noClaim {
		claims["tenant_id"] = f.tenant
	}
	if nonce != nil {
		claims["nonce"] = nonce
	}
	payload, _ := json.Marshal(claims)
	input := enc.EncodeToString(header) + "." + enc.EncodeToString(payload)
	return input + "." + enc.EncodeToString(ed25519.Sign(f.priv, []byte(input)))
}

func (f *fakeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	var body map[string]any
	_ = json.NewDecoder(r.Body).Decode(&body)
	f.mu.Lock()
	if f.requests == nil {
		f.requests = map[string]int{}
	}
	f.requests[r.URL.Path]++
	suspended := f.suspended
	f.mu.Unlock()
	if suspended {
		w.WriteHeader(403)
		_, _ = w.Write([]byte(`{"error":"Tenant is suspended"}`))
		return
	}
	switch r.URL.Path {
	case "/v1/verify-license":
		_ = json.NewEncoder(w).Encode(map[string]any{"valid": true, "tier": "pro", "product_id": "app", "status": "active"})
	case "/v1/activate-license":
		_ = json.NewEncoder(w).Encode(map[string]any{"activated": true, "token": "act_1"})
	case "/v1/leases":
		_ = json.NewEncoder(w).Encode(map[string]any{"lease": f.lease(body["key"].(string), "app", body["nonce"])})
	case "/v1/lease-keys":
		tenant := r.URL.Query().Get("tenant_id")
		f.mu.Lock()
		f.keyAsks = append(f.keyAsks, tenant)
		f.mu.Unlock()
		if tenant == "" {
			w.WriteHeader(400)
			_, _ = w.Write([]byte(`{"error":"tenant_id is required"}`))
			return
		}
		if f.keysState != 200 {
			w.WriteHeader(f.keysState)
			_, _ = w.Write([]byte(`{"error":"Licensing service unavailable, retry"}`))
			return
		}
		keys := []map[string]string{}
		if tenant == f.tenant {
			keys = append(keys, map[string]string{"kty": "OKP", "crv": "Ed25519", "kid": f.kid, "x": base64.RawURLEncoding.EncodeToString(f.priv.Public().(ed25519.PublicKey))})
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"keys": keys})
	default:
		http.NotFound(w, r)
	}
}

func activated(t *testing.T, url string, cfg Config) *Client {
	t.Helper()
	cfg.URL, cfg.ProductID, cfg.Key, cfg.Components = url, "app", "KEY-1", map[string]string{}
	if cfg.StorePath == "" {
		cfg.StorePath = filepath.Join(t.TempDir(), "store.json")
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Activate(context.Background(), "m"); err != nil {
		t.Fatal(err)
	}
	return c
}

// A hosted app with no key pinned and no tenant id configured is licensed: its first
// lease names the tenant whose key set it fetches, and it keeps to that tenant.
func TestHostedLeaseKeysFetchedForTheLeasesTenant(t *testing.T) {
	f, srv := newFakeServer(t, "t_vendor")
	store := filepath.Join(t.TempDir(), "store.json")
	c := activated(t, srv.URL, Config{StorePath: store})
	if v := c.Check(context.Background()); !v.Licensed {
		t.Fatalf("%+v", v)
	}
	if len(f.keyAsks) != 1 || f.keyAsks[0] != "t_vendor" {
		t.Fatalf("lease-keys asked for tenants %q", f.keyAsks)
	}
	// After a rotation the set is fetched for the tenant learned, not one a lease names.
	again, err := New(Config{URL: srv.URL, ProductID: "app", Key: "KEY-1", StorePath: store, Components: map[string]string{}})
	if err != nil {
		t.Fatal(err)
	}
	f.kid, f.tenant = "kid-rotated", "t_other"
	if v := again.Renew(context.Background()); v.Licensed || v.Reason != "invalid_lease" {
		t.Fatalf("a lease naming another tenant: %+v", v)
	}
	if len(f.keyAsks) != 2 || f.keyAsks[1] != "t_vendor" {
		t.Fatalf("lease-keys asked for tenants %q", f.keyAsks)
	}
}

// A lease whose key set cannot be fetched is not called invalid: the verdict says the
// keys were unavailable.
func TestLeaseKeysUnavailableVerdict(t *testing.T) {
	for name, tc := range map[string]struct {
		tenant     string
		noClaim    bool
		keysStatus int
	}{
		"hosted lease without tenant claim": {tenant: "t_vendor", noClaim: true},
		"key set unavailable":               {tenant: "t_vendor", keysStatus: 503},
	} {
		t.Run(name, func(t *testing.T) {
			f, srv := newFakeServer(t, tc.tenant)
			f.noClaim = tc.noClaim
			if tc.keysStatus != 0 {
				f.keysState = tc.keysStatus
			}
			c := activated(t, srv.URL, Config{})
			if v := c.Check(context.Background()); v.Licensed || v.Reason != "lease_keys_unavailable" {
				t.Fatalf("%+v", v)
			}
		})
	}
	// A pinned tenant id is used as given.
	f, srv := newFakeServer(t, "t_vendor")
	f.noClaim = true
	if v := activated(t, srv.URL, Config{TenantID: "t_vendor"}).Check(context.Background()); !v.Licensed {
		t.Fatalf("pinned tenant: %+v", v)
	}
}
