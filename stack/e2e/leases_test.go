package e2e

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/devinfra/testkit"
	"github.com/keyhouse/keyhouse/stack"
)

// Leases, lease policies and lease keys (addendum §12) through the REST edge.

const (
	errLeaseLapsed    = "Seat lease has expired"
	errNeedComponents = "components are required by this product's policy"
	errFingerprint    = "Machine fingerprint does not match"
	errProductUnknown = "Product not found"
)

// jwks is GET /v1/lease-keys's answer.
type jwks struct {
	Keys []struct {
		Kty, Crv, X, Kid, Use, Alg, Status string
		RetireAt                           *time.Time `json:"retire_at"`
	} `json:"keys"`
}

func leaseKeys(t testing.TB, c *Client, query string) jwks {
	t.Helper()
	var set jwks
	if err := json.Unmarshal(c.Get("/v1/lease-keys"+query).Expect(t, 200).Body, &set); err != nil {
		t.Fatal(err)
	}
	return set
}

// verifyLease checks a compact JWS against a JWKS the way any JOSE library would: the
// header's alg and kid, the key of that kid, the Ed25519 signature over the first two
// parts. It returns the header and the claims' bytes, or an error.
func verifyLease(lease string, set jwks) (header map[string]any, claims []byte, err error) {
	parts := strings.Split(lease, ".")
	if len(parts) != 3 {
		return nil, nil, fmt.Errorf("not a compact JWS: %q", lease)
	}
	h, err := base64.RawURLEncoding.DecodeString(parts[0])
	if err != nil {
		return nil, nil, err
	}
	if err := json.Unmarshal(h, &header); err != nil {
		return nil, nil, err
	}
	if header["alg"] != "EdDSA" {
		return nil, nil, fmt.Errorf("alg %v", header["alg"])
	}
	for _, k := range set.Keys {
		if k.Kid != header["kid"] {
			continue
		}
		pub, err := base64.RawURLEncoding.DecodeString(k.X)
		if err != nil || len(pub) != ed25519.PublicKeySize {
			return nil, nil, fmt.Errorf("key %s: bad x", k.Kid)
		}
		sig, err := base64.RawURLEncoding.DecodeString(parts[2])
		if err != nil {
			return nil, nil, err
		}
		if !ed25519.Verify(pub, []byte(parts[0]+"."+parts[1]), sig) {
			return nil, nil, fmt.Errorf("signature does not verify with key %s", k.Kid)
		}
		claims, err = base64.RawURLEncoding.DecodeString(parts[1])
		return header, claims, err
	}
	return nil, nil, fmt.Errorf("no key %v in the JWKS", header["kid"])
}

func lease(c *Client, body map[string]any) *Response {
	return c.Post("/v1/leases", body)
}

func putPolicy(t testing.TB, a *Client, productID, tier string, policy map[string]any) map[string]any {
	t.Helper()
	return a.Do("PUT", "/v1/products/"+productID+"/policies/"+tier, policy).Expect(t, 200).JSON(t)
}

// A lease is a JWS over the claims of addendum §12, in their order, that verifies with the
// JWKS; its exp never passes the license's own expiry; a policy change shows in the next
// lease only; the nonce comes back.
func TestLeaseIsASignedStatementOfTheSeat(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a, c := admin(t, s), anon(t, s)
	p := product("lease-claims")
	expires := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	key := issueLicense(t, a, lic(p, "expires_at", expires.Format(time.RFC3339), "limits", map[string]any{"users": 3}))
	putPolicy(t, a, p, "pro", map[string]any{"lease_ttl_seconds": 86400, "renew_after_seconds": 3600, "entitlements": []string{"export.pdf", "sync"}})
	tok := seat(t, c, key, "laptop")

	resp := lease(c, map[string]any{"key": key, "token": tok, "nonce": "n-1"}).Expect(t, 200)
	if got := resp.Keys(t); strings.Join(got, ",") != "lease,expires_at,renew_after" {
		t.Fatalf("lease answer fields %v", got)
	}
	body := resp.JSON(t)
	header, claims, err := verifyLease(body["lease"].(string), leaseKeys(t, c, ""))
	if err != nil {
		t.Fatal(err)
	}
	if header["typ"] != "keyhouse-lease+jwt" || len(header) != 3 {
		t.Errorf("header %v", header)
	}
	var order []string
	dec := json.NewDecoder(strings.NewReader(string(claims)))
	_, _ = dec.Token()
	for dec.More() {
		k, _ := dec.Token()
		order = append(order, k.(string))
		var skip json.RawMessage
		_ = dec.Decode(&skip)
	}
	want := "iss,sub,aud,jti,iat,exp,renew_after,tier,status,license_expires_at,limits,entitlements,instance_id,floating,components,nonce"
	if strings.Join(order, ",") != want {
		t.Fatalf("claims in order %v, want %s", order, want)
	}
	var cl map[string]any
	_ = json.Unmarshal(claims, &cl)
	// The license ends in an hour: the day-long lease ends with it.
	if cl["exp"] != float64(expires.Unix()) || cl["license_expires_at"] != float64(expires.Unix()) {
		t.Errorf("exp %v, license_expires_at %v, want both %d", cl["exp"], cl["license_expires_at"], expires.Unix())
	}
	if body["expires_at"] != expires.Format(time.RFC3339) {
		t.Errorf("expires_at %v, want %s", body["expires_at"], expires.Format(time.RFC3339))
	}
	// The license's expiry cut the day-long lease to an hour: renew_after keeps the
	// policy's share of it (3600 of 86400 s), in whole seconds, well before exp.
	iat, exp := int64(cl["iat"].(float64)), int64(cl["exp"].(float64))
	if cl["renew_after"] != float64(iat+(exp-iat)*3600/86400) || cl["sub"] != key || cl["aud"] != p || cl["instance_id"] != "laptop" ||
		cl["tier"] != "pro" || cl["status"] != "active" || cl["floating"] != false || cl["components"] != nil ||
		cl["nonce"] != "n-1" || cl["iss"] != s.Env("PUBLIC_BASE_URL") && cl["iss"] != "http://localhost:8080" {
		t.Errorf("claims %s", claims)
	}
	if fmt.Sprint(cl["entitlements"]) != "[export.pdf sync]" || fmt.Sprint(cl["limits"]) != "map[users:3]" {
		t.Errorf("entitlements %v, limits %v", cl["entitlements"], cl["limits"])
	}

	// A new policy: the lease signed before keeps its claims (it is signed), the next one
	// carries the new entitlements.
	putPolicy(t, a, p, "pro", map[string]any{"lease_ttl_seconds": 600, "entitlements": []string{"sync"}})
	next := lease(c, map[string]any{"key": key, "token": tok}).Expect(t, 200).JSON(t)
	_, claims2, err := verifyLease(next["lease"].(string), leaseKeys(t, c, ""))
	if err != nil {
		t.Fatal(err)
	}
	var cl2 map[string]any
	_ = json.Unmarshal(claims2, &cl2)
	if fmt.Sprint(cl2["entitlements"]) != "[sync]" || cl2["exp"] != cl2["iat"].(float64)+600 || cl2["renew_after"] != cl2["iat"].(float64)+300 {
		t.Errorf("after the policy change: %s", claims2)
	}
	if _, ok := cl2["nonce"]; ok {
		t.Errorf("a nonce claim without a nonce sent: %s", claims2)
	}
	if _, _, err := verifyLease(body["lease"].(string), leaseKeys(t, c, "")); err != nil {
		t.Errorf("the first lease no longer verifies: %v", err)
	}
}

// A license that ends before the default 7-day lease would: the lease ends with the
// license, and renew_after is half of it (the default policy's share), before exp, so the
// app renews ahead and sees an extension of its license while its lease still runs.
func TestLeaseCutByTheLicenseIsRenewedAhead(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a, c := admin(t, s), anon(t, s)
	expires := time.Now().Add(48 * time.Hour).UTC().Truncate(time.Second)
	key := issueLicense(t, a, lic(product("lease-cut"), "expires_at", expires.Format(time.RFC3339)))
	tok := seat(t, c, key, "laptop")
	body := lease(c, map[string]any{"key": key, "token": tok}).Expect(t, 200).JSON(t)
	_, claims, err := verifyLease(body["lease"].(string), leaseKeys(t, c, ""))
	if err != nil {
		t.Fatal(err)
	}
	var cl struct {
		Iat        int64 `json:"iat"`
		Exp        int64 `json:"exp"`
		RenewAfter int64 `json:"renew_after"`
	}
	if err := json.Unmarshal(claims, &cl); err != nil {
		t.Fatal(err)
	}
	if cl.Exp != expires.Unix() || cl.RenewAfter != cl.Iat+(cl.Exp-cl.Iat)/2 || cl.RenewAfter >= cl.Exp {
		t.Fatalf("iat %d, exp %d, renew_after %d: want exp at the license's expiry %d and renew_after half way", cl.Iat, cl.Exp, cl.RenewAfter, expires.Unix())
	}
	if body["renew_after"] != time.Unix(cl.RenewAfter, 0).UTC().Format(time.RFC3339) {
		t.Errorf("the answer's renew_after %v, the claim's %d", body["renew_after"], cl.RenewAfter)
	}
}

// Every refusal of POST /v1/leases with its exact text.
func TestLeaseRefusals(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a, c := admin(t, s), anon(t, s)
	p := product("lease-errors")
	key := issueLicense(t, a, lic(p))
	tok := seat(t, c, key, "box")

	lease(c, map[string]any{"token": tok}).ExpectError(t, 400, "key is required")
	lease(c, map[string]any{"key": key}).ExpectError(t, 400, "token is required")
	lease(c, map[string]any{"key": "AAAA-BBBB-CCCC-DDDD-EEEE-FFFF-GGGG", "token": tok}).ExpectError(t, 404, errNotFound)
	lease(c, map[string]any{"key": key, "token": "act_nope"}).ExpectError(t, 403, errBadToken)
	mentions(t, lease(c, map[string]any{"key": key, "token": tok, "nonce": strings.Repeat("n", 129)}), "nonce")
	many := map[string]string{}
	for i := range 17 {
		many[fmt.Sprintf("c%d", i)] = "v"
	}
	mentions(t, lease(c, map[string]any{"key": key, "token": tok, "components": many}), "components")
	mentions(t, lease(c, map[string]any{"key": key, "token": tok, "components": map[string]string{"Disk": "v"}}), "components")
	mentions(t, lease(c, map[string]any{"key": key, "token": tok, "components": map[string]string{strings.Repeat("a", 33): "v"}}), "components")
	mentions(t, lease(c, map[string]any{"key": key, "token": tok, "components": map[string]string{"disk": strings.Repeat("v", 129)}}), "components.disk")
	// A value that is not a string is refused by the edge's JSON decoding (400).
	lease(c, map[string]any{"key": key, "token": tok, "components": map[string]any{"disk": 7}}).Expect(t, 400)

	// A policy that binds: components are required, then must match.
	putPolicy(t, a, p, "*", map[string]any{"fingerprint_match": "all"})
	lease(c, map[string]any{"key": key, "token": tok}).ExpectError(t, 400, errNeedComponents)
	lease(c, map[string]any{"key": key, "token": tok, "components": map[string]string{"disk": "d1", "cpu": "c1"}}).Expect(t, 200)
	lease(c, map[string]any{"key": key, "token": tok, "components": map[string]string{"disk": "d2", "cpu": "c1"}}).ExpectError(t, 403, errFingerprint)

	// Expired, revoked, deleted: no lease.
	a.Post("/v1/admin/update-license-terms", map[string]any{"key": key, "expires_at": "2021-01-01T00:00:00Z"}).Expect(t, 200)
	lease(c, map[string]any{"key": key, "token": tok, "components": map[string]string{"disk": "d1", "cpu": "c1"}}).ExpectError(t, 403, errHasExpired)
	a.Post("/v1/admin/update-license-terms", map[string]any{"key": key, "expires_at": nil}).Expect(t, 200)
	a.Post("/v1/revoke-license", map[string]any{"key": key, "revoked": true}).Expect(t, 200)
	lease(c, map[string]any{"key": key, "token": tok, "components": map[string]string{"disk": "d1", "cpu": "c1"}}).ExpectError(t, 403, errNotActive)
	a.Delete("/v1/delete-license", map[string]any{"key": key}).Expect(t, 200)
	lease(c, map[string]any{"key": key, "token": tok, "components": map[string]string{"disk": "d1", "cpu": "c1"}}).ExpectError(t, 404, errNotFound)
}

// Machine binding: for each strategy, one, half and all of four components changed give
// the documented answer; another machine's components are refused.
func TestLeaseBindingStrategies(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a, c := admin(t, s), anon(t, s)
	machine := map[string]string{"cpu": "c", "disk": "d", "mac": "m", "board": "b"}
	changed := func(names ...string) map[string]string {
		out := map[string]string{}
		for k, v := range machine {
			out[k] = v
		}
		for _, n := range names {
			out[n] = "other-" + n
		}
		return out
	}
	cases := map[string]struct{ one, half, all bool }{
		"any":  {one: true, half: true, all: false},
		"most": {one: true, half: false, all: false},
		"all":  {one: false, half: false, all: false},
	}
	for strategy, want := range cases {
		t.Run(strategy, func(t *testing.T) {
			p := product("binding-" + strategy)
			putPolicy(t, a, p, "*", map[string]any{"fingerprint_match": strategy})
			key := issueLicense(t, a, lic(p, "max_activations", 2))
			tok := seat(t, c, key, "desk")
			lease(c, map[string]any{"key": key, "token": tok, "components": machine}).Expect(t, 200)
			for name, tc := range map[string]struct {
				components map[string]string
				ok         bool
			}{
				"one-changed":  {changed("cpu"), want.one},
				"half-changed": {changed("cpu", "disk"), want.half},
				"all-changed":  {changed("cpu", "disk", "mac", "board"), want.all},
				"unchanged":    {machine, true},
			} {
				resp := lease(c, map[string]any{"key": key, "token": tok, "components": tc.components})
				if tc.ok {
					resp.Expect(t, 200)
				} else {
					resp.ExpectError(t, 403, errFingerprint)
				}
				_ = name
			}
			// Another machine: its own seat, bound to its own components, then the first
			// seat's token with the second machine's components is refused.
			other := map[string]string{"cpu": "x", "disk": "y", "mac": "z", "board": "w"}
			tok2 := seat(t, c, key, "other-desk")
			lease(c, map[string]any{"key": key, "token": tok2, "components": other}).Expect(t, 200)
			lease(c, map[string]any{"key": key, "token": tok, "components": other}).ExpectError(t, 403, errFingerprint)
		})
	}
}

// Reinstall on the same machine: a bound seat's lease by instance_id and matching
// components answers a new token, and the old one stops working.
func TestLeaseReinstallGivesANewToken(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a, c := admin(t, s), anon(t, s)
	p := product("reinstall")
	putPolicy(t, a, p, "*", map[string]any{"fingerprint_match": "most"})
	key := issueLicense(t, a, lic(p))
	machine := map[string]string{"cpu": "c", "disk": "d", "mac": "m"}
	// An unbound seat still needs its token.
	tok := seat(t, c, key, "pc")
	lease(c, map[string]any{"key": key, "instance_id": "pc", "components": machine}).ExpectError(t, 403, errBadToken)
	lease(c, map[string]any{"key": key, "token": tok, "components": machine}).Expect(t, 200)

	lease(c, map[string]any{"key": key, "instance_id": "pc", "components": map[string]string{"cpu": "x", "disk": "y", "mac": "m"}}).ExpectError(t, 403, errFingerprint)
	resp := lease(c, map[string]any{"key": key, "instance_id": "pc", "components": machine}).Expect(t, 200)
	if got := strings.Join(resp.Keys(t), ","); got != "lease,expires_at,renew_after,token" {
		t.Fatalf("reinstall answer fields %s", got)
	}
	fresh := resp.JSON(t)["token"].(string)
	if !tokenFormat.MatchString(fresh) || fresh == tok {
		t.Fatalf("reinstall token %q", fresh)
	}
	lease(c, map[string]any{"key": key, "token": tok, "components": machine}).ExpectError(t, 403, errBadToken)
	lease(c, map[string]any{"key": key, "token": fresh, "components": machine}).Expect(t, 200)
	if !validate(t, c, key, "pc") {
		t.Error("the reinstalled seat is not valid")
	}
}

// Policies: bounds answered 400 naming the field, the product default, listing, deleting;
// hosted, another tenant's product is not found.
func TestLeasePoliciesBoundsAndOwnership(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	owner, other := newTenant(t, s), newTenant(t, s)
	p := product("policies")
	path := "/v1/products/" + p + "/policies/"
	for field, body := range map[string]map[string]any{
		"lease_ttl_seconds":   {"lease_ttl_seconds": 59},
		"renew_after_seconds": {"lease_ttl_seconds": 600, "renew_after_seconds": 600},
		"fingerprint_match":   {"fingerprint_match": "some"},
		"entitlements":        {"entitlements": []string{"Upper"}},
	} {
		mentions(t, owner.Do("PUT", path+"pro", body), field)
	}
	mentions(t, owner.Do("PUT", path+"pro", map[string]any{"lease_ttl_seconds": 90*86400 + 1}), "lease_ttl_seconds")
	mentions(t, owner.Do("PUT", path+"pro", map[string]any{"lease_ttl_seconds": "soon"}), "lease_ttl_seconds")
	many := make([]string, 65)
	for i := range many {
		many[i] = fmt.Sprintf("e%d", i)
	}
	mentions(t, owner.Do("PUT", path+"pro", map[string]any{"entitlements": many}), "entitlements")
	mentions(t, owner.Do("PUT", path+"pro", map[string]any{"entitlements": []string{strings.Repeat("e", 65)}}), "entitlements")

	got := owner.Do("PUT", path+"pro", map[string]any{"floating": true, "lease_ttl_seconds": 3600, "fingerprint_match": "any", "entitlements": []string{"a.b:c-d_e"}}).Expect(t, 200)
	if strings.Join(got.Keys(t), ",") != "product_id,tier,floating,lease_ttl_seconds,renew_after_seconds,fingerprint_match,entitlements,updated_at" {
		t.Fatalf("policy fields %v", got.Keys(t))
	}
	if m := got.JSON(t); m["renew_after_seconds"] != float64(1800) || m["floating"] != true || m["tier"] != "pro" {
		t.Errorf("policy %s", got.Body)
	}
	owner.Do("PUT", path+"*", map[string]any{}).Expect(t, 200)
	var list struct {
		Policies []struct {
			Tier            string
			LeaseTTLSeconds int `json:"lease_ttl_seconds"`
		}
	}
	_ = json.Unmarshal(owner.Get("/v1/products/"+p+"/policies").Expect(t, 200).Body, &list)
	if len(list.Policies) != 2 || list.Policies[0].Tier != "*" || list.Policies[0].LeaseTTLSeconds != 7*86400 || list.Policies[1].Tier != "pro" {
		t.Errorf("policies %+v", list)
	}

	other.Get("/v1/products/"+p+"/policies").ExpectError(t, 404, errProductUnknown)
	other.Do("PUT", path+"pro", map[string]any{}).ExpectError(t, 404, errProductUnknown)
	other.Delete(path+"pro", nil).ExpectError(t, 404, errProductUnknown)

	owner.Delete(path+"pro", nil).Expect(t, 200).ExpectBody(t, `{"product_id":"`+p+`","tier":"pro","deleted":true}`)
	owner.Delete(path+"pro", nil).ExpectError(t, 404, "Policy not found")
}

// Hosted, reading a product's policies, or a request about them that is refused, claims
// nothing: the product stays free for the first tenant that writes (here another tenant's
// issue-license), and a read key, which may only read, can never claim one.
func TestLeasePoliciesReadOrRefusedLeaveTheProductFree(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	squatter, issuer := newTenant(t, s), newTenant(t, s)
	reader, _ := createAPIKey(t, squatter, "dashboards", "read")
	p := product("squat")
	path := "/v1/products/" + p + "/policies"

	reader.Get(path).Expect(t, 200).ExpectBody(t, `{"policies":[]}`)
	reader.Do("PUT", path+"/pro", map[string]any{"floating": false}).ExpectError(t, 403, "Unauthorized")
	squatter.Get(path).Expect(t, 200).ExpectBody(t, `{"policies":[]}`)
	squatter.Delete(path+"/pro", nil).ExpectError(t, 404, "Policy not found")
	mentions(t, squatter.Do("PUT", path+"/pro", map[string]any{"lease_ttl_seconds": 59}), "lease_ttl_seconds")

	issueLicense(t, issuer, lic(p))
	squatter.Get(path).ExpectError(t, 404, errProductUnknown)
	squatter.Do("PUT", path+"/pro", map[string]any{}).ExpectError(t, 404, errProductUnknown)
	issuer.Do("PUT", path+"/pro", map[string]any{}).Expect(t, 200)
}

// A blank product_id is 400 naming it, as issue-license and register-release answer, not
// the outage's 503; and it claims nothing.
func TestLeasePoliciesRefuseABlankProductID(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"self", "hosted"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			c := tenantClient(t, mode)
			for _, blank := range []string{"%20", "%20%20"} {
				path := "/v1/products/" + blank + "/policies"
				c.Get(path).ExpectError(t, 400, "product_id is required")
				c.Delete(path+"/"+blank, nil).ExpectError(t, 400, "product_id is required")
				c.Do("PUT", path+"/pro", map[string]any{"floating": false, "lease_ttl_seconds": 3600}).ExpectError(t, 400, "product_id is required")
			}
		})
	}
}

// A tier of white space only is 400 "tier is required" on PUT and DELETE, the wording of a
// blank product_id (issue-license refuses such a tier, so no license could follow the
// policy), and it claims nothing: the product stays free for another tenant.
func TestLeasePoliciesRefuseABlankTier(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	a, b := newTenant(t, s), newTenant(t, s)
	p := product("blank-tier")
	for _, blank := range []string{"%20", "%20%20"} {
		path := "/v1/products/" + p + "/policies/" + blank
		a.Do("PUT", path, map[string]any{"floating": false, "lease_ttl_seconds": 3600}).ExpectError(t, 400, "tier is required")
		a.Delete(path, nil).ExpectError(t, 400, "tier is required")
	}
	issueLicense(t, b, lic(p))
}

// Lease keys: hosted, each tenant's own set, made on first use, listed by tenant_id, which
// each lease names.
func TestLeaseKeysArePerTenant(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	c := anon(t, s)
	lease1, tenant1 := hostedLease(t, s, c)
	lease2, tenant2 := hostedLease(t, s, c)
	set1, set2 := leaseKeys(t, c, "?tenant_id="+tenant1), leaseKeys(t, c, "?tenant_id="+tenant2)
	if len(set1.Keys) != 1 || len(set2.Keys) != 1 || set1.Keys[0].Kid == set2.Keys[0].Kid {
		t.Fatalf("key sets %+v %+v", set1, set2)
	}
	// Each lease names its tenant, so an app fetches the right key set without being told
	// its tenant id (hosted only: a self-hosted lease has no tenant_id claim).
	for lease, tenant := range map[string]string{lease1: tenant1, lease2: tenant2} {
		_, claims, err := verifyLease(lease, map[string]jwks{tenant1: set1, tenant2: set2}[tenant])
		if err != nil {
			t.Fatal(err)
		}
		var cl struct {
			TenantID string `json:"tenant_id"`
		}
		if json.Unmarshal(claims, &cl) != nil || cl.TenantID != tenant {
			t.Errorf("lease claims %s, want tenant_id %q", claims, tenant)
		}
	}
	if _, _, err := verifyLease(lease1, set2); err == nil {
		t.Error("tenant one's lease verifies with tenant two's keys")
	}
	if _, _, err := verifyLease(lease2, set2); err != nil {
		t.Error(err)
	}
	c.Get("/v1/lease-keys").ExpectError(t, 400, "tenant_id is required")
	if got := leaseKeys(t, c, "?tenant_id=nobody"); len(got.Keys) != 0 {
		t.Errorf("keys of an unknown tenant: %+v", got)
	}
}

// hostedLease provisions a tenant, issues it a license, activates and leases it; it
// returns the lease and the tenant's id.
func hostedLease(t testing.TB, s *stack.Stack, c *Client) (string, string) {
	t.Helper()
	n := dbCounter.Add(1)
	created := admin(t, s).Post("/v1/operator/tenants", map[string]string{"name": fmt.Sprintf("Lessor %d", n), "email": fmt.Sprintf("lessor%d@example.com", n)}).Expect(t, 200).JSON(t)
	tenant := newClient(t, s.URL, created["api_key"].(string))
	key := issueLicense(t, tenant, lic(product("tenant-keys")))
	tok := seat(t, c, key, "m")
	return lease(c, map[string]any{"key": key, "token": tok}).Expect(t, 200).JSON(t)["lease"].(string), created["tenant_id"].(string)
}

// mentions checks a 400 whose error names field.
func mentions(t testing.TB, r *Response, field string) {
	t.Helper()
	r.Expect(t, 400)
	if msg, _ := r.JSON(t)["error"].(string); !strings.Contains(msg, field) {
		t.Fatalf("error %q does not name %s", msg, field)
	}
}

// Rotation: a lease signed before verifies against the JWKS until retire_at, and not
// after; new leases carry the new kid.
func TestLeaseKeyRotationOverlap(t *testing.T) {
	t.Parallel()
	s := startStack(t, nil)
	t.Cleanup(s.Stop)
	a, c := admin(t, s), anon(t, s)
	key := issueLicense(t, a, lic(product("rotation")))
	tok := seat(t, c, key, "m")
	old := lease(c, map[string]any{"key": key, "token": tok}).Expect(t, 200).JSON(t)["lease"].(string)
	before := leaseKeys(t, c, "")
	if len(before.Keys) != 1 || before.Keys[0].Status != "active" || before.Keys[0].RetireAt != nil {
		t.Fatalf("before rotation %+v", before)
	}
	mentions(t, a.Post("/v1/lease-keys/rotate", map[string]any{"retire_after_seconds": -1}), "retire_after_seconds")
	rotated := a.Post("/v1/lease-keys/rotate", map[string]any{"retire_after_seconds": 4}).Expect(t, 200).JSON(t)
	if rotated["retiring_kid"] != before.Keys[0].Kid || rotated["kid"] == before.Keys[0].Kid {
		t.Fatalf("rotation %v", rotated)
	}
	during := leaseKeys(t, c, "")
	if len(during.Keys) != 2 || during.Keys[0].Kid != rotated["kid"] || during.Keys[1].Status != "retiring" || during.Keys[1].RetireAt == nil {
		t.Fatalf("during the overlap %+v", during)
	}
	if _, _, err := verifyLease(old, during); err != nil {
		t.Fatalf("the old lease during the overlap: %v", err)
	}
	fresh := lease(c, map[string]any{"key": key, "token": tok}).Expect(t, 200).JSON(t)["lease"].(string)
	header, _, err := verifyLease(fresh, during)
	if err != nil || header["kid"] != rotated["kid"] {
		t.Fatalf("new lease: kid %v, %v", header["kid"], err)
	}
	// After retire_at the old key is gone from the JWKS, so the old lease no longer verifies.
	retireAt := *during.Keys[1].RetireAt
	deadline := time.Now().Add(time.Until(retireAt) + 30*time.Second)
	for {
		after := leaseKeys(t, c, "")
		_, _, err := verifyLease(old, after)
		if err != nil {
			if time.Now().Before(retireAt.Add(-time.Second)) {
				t.Fatalf("the old lease stopped verifying before retire_at %s: %v", retireAt, err)
			}
			if _, _, err := verifyLease(fresh, after); err != nil {
				t.Fatalf("the new lease: %v", err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the old key is still listed long after retire_at %s", retireAt)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// The verifiers of docs/leases.md (Go standard library, Node's built-in crypto, Python's
// cryptography) run as documented against a real lease and the JWKS, and refuse a lease
// whose claims were changed.
func TestDocumentedLeaseVerifiersWork(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a, c := admin(t, s), anon(t, s)
	root, err := stack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	examples := filepath.Join(root, "docs", "examples", "leases")
	p := product("lease-verifiers")
	putPolicy(t, a, p, "*", map[string]any{"entitlements": []string{"export.pdf", "sync"}})
	key := issueLicense(t, a, lic(p))
	tok := seat(t, c, key, "workstation")
	resp := lease(c, map[string]any{"key": key, "token": tok}).Expect(t, 200).JSON(t)
	jwt := resp["lease"].(string)
	dir := t.TempDir()
	keysPath, good, bad := filepath.Join(dir, "lease-keys.json"), filepath.Join(dir, "lease.jwt"), filepath.Join(dir, "bad.jwt")
	_ = os.WriteFile(keysPath, c.Get("/v1/lease-keys").Expect(t, 200).Body, 0o600)
	_ = os.WriteFile(good, []byte(jwt), 0o600)
	// The same signature over claims naming another machine.
	parts := strings.Split(jwt, ".")
	claims, _ := base64.RawURLEncoding.DecodeString(parts[1])
	forged := strings.Replace(string(claims), `"instance_id":"workstation"`, `"instance_id":"elsewhere00"`, 1)
	_ = os.WriteFile(bad, []byte(parts[0]+"."+base64.RawURLEncoding.EncodeToString([]byte(forged))+"."+parts[2]), 0o600)

	want := "valid: " + key + " on workstation until " + resp["expires_at"].(string) + ", entitlements [export.pdf sync]"
	for name, argv := range map[string][]string{
		"go":     {"go", "run", filepath.Join(examples, "verify.go")},
		"node":   {testkit.RequireTool(t, "node"), filepath.Join(examples, "verify.js")},
		"python": {testkit.RequireTool(t, "/usr/bin/python3"), filepath.Join(examples, "verify.py")},
	} {
		out, err := exec.Command(argv[0], append(argv[1:], keysPath, good)...).CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != want {
			t.Errorf("%s verifier: %v\n got  %s\n want %s", name, err, out, want)
		}
		out, err = exec.Command(argv[0], append(argv[1:], keysPath, bad)...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "INVALID signature") {
			t.Errorf("%s verifier accepted a forged lease: %s", name, out)
		}
	}
}

// The lease pages as a person uses them: the product's policies (a refused bound shown
// beside its field), the license page's floating seat with its lease end and binding, a
// rotation, and the portal's lease end and release; then the API confirms each.
func TestLeasesInTheBrowser(t *testing.T) {
	s := selfHosted(t)
	a, c := admin(t, s), anon(t, s)
	p := product("console-leases")
	putPolicy(t, a, p, "*", map[string]any{"floating": true, "lease_ttl_seconds": 3600, "fingerprint_match": "all"})
	key := issueLicense(t, a, lic(p, "max_activations", 1))
	tok := seat(t, c, key, "studio")
	lease(c, map[string]any{"key": key, "token": tok, "components": map[string]string{"disk": "d1"}}).Expect(t, 200)
	before := leaseKeys(t, c, "")

	browse(t, "leases", map[string]any{"base": s.URL, "key": s.AdminKey, "ip": browserIP(t, s), "product": p, "licenseKey": key, "instance": "studio"})

	var list struct {
		Policies []struct {
			Tier             string
			FingerprintMatch string `json:"fingerprint_match"`
			Entitlements     []string
		}
	}
	_ = json.Unmarshal(a.Get("/v1/products/"+p+"/policies").Expect(t, 200).Body, &list)
	if len(list.Policies) != 2 || list.Policies[1].Tier != "enterprise" || list.Policies[1].FingerprintMatch != "most" ||
		strings.Join(list.Policies[1].Entitlements, ",") != "export.pdf,sync" {
		t.Errorf("policies after the browser: %+v", list.Policies)
	}
	after := leaseKeys(t, c, "")
	if len(after.Keys) != 2 || after.Keys[1].Kid != before.Keys[0].Kid || after.Keys[1].Status != "retiring" {
		t.Errorf("keys after the browser's rotation: %+v", after)
	}
	// Released in the portal: the seat is gone at once and the cap of 1 takes another.
	lease(c, map[string]any{"key": key, "token": tok, "components": map[string]string{"disk": "d1"}}).ExpectError(t, 403, errBadToken)
	seat(t, c, key, "laptop")
}

// Hosted, a tenant's JWKS exists before its first lease, so an app can ship with it
// pinned: the first read makes the tenant's key. Reads racing through two gateways and two
// activations replicas agree on one key; the first lease is signed with it; an unknown
// tenant_id lists none and makes nothing.
func TestLeaseKeysExistBeforeTheFirstLease(t *testing.T) {
	t.Parallel()
	s := startStack(t, hostedEnv(t, nil))
	t.Cleanup(s.Stop)
	ctx := t.Context()
	replica, err := s.StartServiceReplica(ctx, "activations", nil)
	if err != nil {
		t.Fatal(err)
	}
	gateway2, err := s.StartGateway(ctx, 0, map[string]string{"ACTIVATIONS_ADDR": replica})
	if err != nil {
		t.Fatal(err)
	}
	db := dbConn(t, s)
	created := admin(t, s).Post("/v1/operator/tenants", map[string]string{"name": "Pinned JWKS", "email": "pinned@example.com"}).Expect(t, 200).JSON(t)
	tenantID := created["tenant_id"].(string)

	const readers = 20
	sets := make([]jwks, readers)
	var wg sync.WaitGroup
	for i := range readers {
		base := s.URL
		if i%2 == 1 {
			base = gateway2
		}
		c := newClient(t, base, "")
		wg.Go(func() {
			if err := json.Unmarshal(c.Get("/v1/lease-keys?tenant_id="+tenantID).Expect(t, 200).Body, &sets[i]); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	pinned := sets[0]
	if len(pinned.Keys) != 1 || pinned.Keys[0].Status != "active" || pinned.Keys[0].RetireAt != nil {
		t.Fatalf("a new tenant's JWKS: %+v", pinned)
	}
	for i, set := range sets {
		if len(set.Keys) != 1 || set.Keys[0].Kid != pinned.Keys[0].Kid || set.Keys[0].X != pinned.Keys[0].X {
			t.Errorf("reader %d saw %+v, reader 0 %+v", i, set, pinned)
		}
	}
	var rows int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM activations.lease_keys WHERE tenant_id = $1`, tenantID).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 1 {
		t.Fatalf("%d lease keys made for one tenant by concurrent first reads", rows)
	}

	vendor := newClient(t, s.URL, created["api_key"].(string))
	c := anon(t, s)
	key := issueLicense(t, vendor, lic(product("pinned")))
	first := lease(c, map[string]any{"key": key, "token": seat(t, c, key, "m")}).Expect(t, 200).JSON(t)["lease"].(string)
	header, _, err := verifyLease(first, pinned)
	if err != nil || header["kid"] != pinned.Keys[0].Kid {
		t.Fatalf("the first lease against the JWKS pinned before it: kid %v, %v", header["kid"], err)
	}

	if got := leaseKeys(t, c, "?tenant_id=no-such-tenant"); len(got.Keys) != 0 {
		t.Errorf("keys of an unknown tenant: %+v", got)
	}
	if err := db.QueryRow(ctx, `SELECT count(*) FROM activations.lease_keys WHERE tenant_id = 'no-such-tenant'`).Scan(&rows); err != nil || rows != 0 {
		t.Errorf("an unknown tenant's read made %d keys (%v)", rows, err)
	}
}

// A policy that stops being floating reaches a floating seat with its next lease: the seat
// no longer lapses (and floats again once the policy does), the lease saying which.
func TestNextLeaseMovesASeatInAndOutOfFloating(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a, c := admin(t, s), anon(t, s)
	db := dbConn(t, s)
	p := product("float-switch")
	putPolicy(t, a, p, "*", map[string]any{"floating": true, "lease_ttl_seconds": 600})
	key := issueLicense(t, a, lic(p))
	tok := seat(t, c, key, "m")
	leaseEnd := func() *time.Time {
		t.Helper()
		var end *time.Time
		if err := db.QueryRow(t.Context(), `SELECT lease_expires_at FROM activations.seats WHERE license_key = $1`, key).Scan(&end); err != nil {
			t.Fatal(err)
		}
		return end
	}
	floating := func(resp map[string]any) bool {
		t.Helper()
		_, claims, err := verifyLease(resp["lease"].(string), leaseKeys(t, c, ""))
		if err != nil {
			t.Fatal(err)
		}
		var cl map[string]any
		_ = json.Unmarshal(claims, &cl)
		return cl["floating"] == true
	}
	if leaseEnd() == nil {
		t.Fatal("a seat activated under a floating policy has no lease end")
	}
	putPolicy(t, a, p, "*", map[string]any{"floating": false, "lease_ttl_seconds": 600})
	if resp := lease(c, map[string]any{"key": key, "token": tok}).Expect(t, 200).JSON(t); floating(resp) || leaseEnd() != nil {
		t.Fatalf("after the policy stopped floating: lease floating %v, seat's lease end %v", floating(resp), leaseEnd())
	}
	putPolicy(t, a, p, "*", map[string]any{"floating": true, "lease_ttl_seconds": 600})
	resp := lease(c, map[string]any{"key": key, "token": tok}).Expect(t, 200).JSON(t)
	end := leaseEnd()
	if !floating(resp) || end == nil || end.UTC().Format(time.RFC3339) != resp["expires_at"] {
		t.Fatalf("floating again: lease floating %v, seat's lease end %v, lease expires_at %v", floating(resp), end, resp["expires_at"])
	}
}

// Hosted, a tenant's first rotation makes its first key, and nothing retires: the answer
// says so with every field present, in the documented order (retiring_kid and retire_at
// null), and so does the event; the rotation after it names the key it retired.
func TestFirstLeaseKeyRotationRetiresNothingAndSaysSo(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	tn := newTenant(t, s)
	first := tn.Post("/v1/lease-keys/rotate", map[string]any{}).Expect(t, 200)
	if keys := strings.Join(first.Keys(t), ","); keys != "kid,retiring_kid,retire_at" {
		t.Fatalf("first rotation answered %s (fields %s)", first.Body, keys)
	}
	kid := first.JSON(t)["kid"].(string)
	first.ExpectBody(t, `{"kid":"`+kid+`","retiring_kid":null,"retire_at":null}`)
	second := tn.Post("/v1/lease-keys/rotate", map[string]any{}).Expect(t, 200).JSON(t)
	if second["retiring_kid"] != kid || second["retire_at"] == nil {
		t.Fatalf("second rotation %v", second)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		p := listEvents(t, newClient(t, tn.Base, tn.Token), url.Values{"type": {"lease_key.rotated"}})
		if len(p.Events) == 2 {
			slices.Reverse(p.Events)
			if d := p.Events[0].Data; d["kid"] != kid || d["retiring_kid"] != nil || len(d) != 2 {
				t.Fatalf("the first rotation's event data %v", d)
			}
			if d := p.Events[1].Data; d["kid"] != second["kid"] || d["retiring_kid"] != kid {
				t.Fatalf("the second rotation's event data %v", d)
			}
			return
		}
		if len(p.Events) > 2 || time.Now().After(deadline) {
			t.Fatalf("lease_key.rotated events: %v", types(p.Events))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
