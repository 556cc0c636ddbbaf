package e2e

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// lic is a minimal issue-license body; extra fields are merged in.
func lic(product string, extra ...any) map[string]any {
	body := map[string]any{"tier": "pro", "product_id": product, "issued_to": "Ada Lovelace <ada@example.com>"}
	for i := 0; i+1 < len(extra); i += 2 {
		body[extra[i].(string)] = extra[i+1]
	}
	return body
}

var keyFormat = regexp.MustCompile(`^[0-9A-HJKMNP-TV-Z]{4}(-[0-9A-HJKMNP-TV-Z]{4}){6}$`)

func TestIssueLicenseAnswersOnlyKeyAndStatus(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a := admin(t, s)
	resp := a.Post("/v1/issue-license", lic("issue-shape", "notes", "vip")).Expect(t, 200)
	if got := strings.Join(resp.Keys(t), ","); got != "key,status" {
		t.Fatalf("fields %s", got)
	}
	body := resp.JSON(t)
	key := body["key"].(string)
	if body["status"] != "issued" || !keyFormat.MatchString(key) {
		t.Fatalf("issue %s", resp.Body)
	}
	// Defaults: max_activations 1, limits {}, perpetual; notes kept for the admin view.
	details := a.Get("/v1/admin/license/"+key).Expect(t, 200)
	if got := strings.Join(details.Keys(t), ","); got != "key,tier,product_id,issued_to,issued_at,expires_at,status,limits,usage,max_activations,revoked_at,notes" {
		t.Fatalf("admin/license fields %s", got)
	}
	d := details.JSON(t)
	if d["max_activations"] != 1.0 || d["expires_at"] != nil || d["notes"] != "vip" || d["revoked_at"] != nil ||
		fmt.Sprint(d["limits"]) != "map[]" || d["status"] != "active" || d["issued_to"] != "Ada Lovelace <ada@example.com>" {
		t.Fatalf("admin/license %s", details.Body)
	}
	// A key typed back in lower case without dashes still finds the license.
	typed := strings.ToLower(strings.ReplaceAll(key, "-", ""))
	anon(t, s).Post("/v1/verify-license", map[string]string{"key": typed}).Expect(t, 200)
}

func TestIssueLicenseKeysAreDistinct(t *testing.T) {
	t.Parallel()
	a := admin(t, selfHosted(t))
	seen := map[string]bool{}
	for i := 0; i < 20; i++ {
		k := issueLicense(t, a, lic("distinct"))
		if seen[k] {
			t.Fatalf("key %s issued twice", k)
		}
		seen[k] = true
	}
}

func TestIssueLicenseRejectsBadInput(t *testing.T) {
	t.Parallel()
	a := admin(t, selfHosted(t))
	for _, tc := range []struct {
		name string
		body any
		want string
	}{
		{"unknown limit key", lic("bad", "limits", map[string]any{"seats": 2, "storage": 10}), "Unknown limit key: storage"},
		{"custom metric", lic("bad", "limits", map[string]any{"bandwidth": 1}), "Unknown limit key: bandwidth"},
		{"zero limit", lic("bad", "limits", map[string]any{"seats": 0}), "limits.seats must be a positive number of at most 9007199254740991"},
		{"string limit", lic("bad", "limits", map[string]any{"users": "5"}), "limits.users must be a positive number of at most 9007199254740991"},
		{"missing tier", map[string]any{"product_id": "p", "issued_to": "x"}, "tier is required"},
		{"empty tier", lic("bad", "tier", ""), "tier is required"},
		{"missing product_id", map[string]any{"tier": "pro", "issued_to": "x"}, "product_id is required"},
		{"missing issued_to", map[string]any{"tier": "pro", "product_id": "p"}, "issued_to is required"},
		{"bad expiry", lic("bad", "expires_at", "next tuesday"), "expires_at must be an ISO 8601 timestamp (e.g. 2027-01-31T00:00:00Z) or null"},
		{"numeric expiry", lic("bad", "expires_at", 12), "expires_at must be an ISO 8601 timestamp (e.g. 2027-01-31T00:00:00Z) or null"},
		// RFC 3339: offsets run to ±23:59 (+24:00 had shifted the expiry a day) and a
		// fraction follows a period.
		{"offset +24:00", lic("bad", "expires_at", "2030-01-02T03:04:05+24:00"), "expires_at must be an ISO 8601 timestamp (e.g. 2027-01-31T00:00:00Z) or null"},
		{"comma before the fraction", lic("bad", "expires_at", "2030-01-02T03:04:05,5Z"), "expires_at must be an ISO 8601 timestamp (e.g. 2027-01-31T00:00:00Z) or null"},
		{"limit of 2^53", lic("bad", "limits", map[string]any{"seats": 1 << 53}), "limits.seats must be a positive number of at most 9007199254740991"},
		{"cap of 2^31", lic("bad", "max_activations", 1<<31), "max_activations must be a positive integer of at most 2147483647 or null (unlimited)"},
		{"zero cap", lic("bad", "max_activations", 0), "max_activations must be a positive integer of at most 2147483647 or null (unlimited)"},
		{"fractional cap", lic("bad", "max_activations", 1.5), "max_activations must be a positive integer of at most 2147483647 or null (unlimited)"},
		{"notes not a string", lic("bad", "notes", 5), "notes must be a string or null"},
		{"NUL in issued_to", lic("bad", "issued_to", "a\x00b"), "issued_to must not contain NUL characters"},
		{"NUL in notes", lic("bad", "notes", "a\x00b"), "notes must not contain NUL characters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a.Post("/v1/issue-license", tc.body).ExpectError(t, 400, tc.want)
		})
	}
	// RFC 3339 §5.6 allows a lowercase t and z.
	key := issueLicense(t, a, lic(product("lowercase-time"), "expires_at", "2030-01-02t03:04:05z"))
	if got := a.Get("/v1/admin/license/"+key).Expect(t, 200).JSON(t)["expires_at"]; got != "2030-01-02T03:04:05Z" {
		t.Fatalf("expires_at sent as 2030-01-02t03:04:05z is %v", got)
	}
	a.Post("/v1/issue-license", `{"tier": 5}`).Expect(t, 400)
	a.Post("/v1/issue-license", `{"tier":`).Expect(t, 400)
	anon(t, selfHosted(t)).Post("/v1/issue-license", lic("bad")).ExpectError(t, 403, "Unauthorized")
}

func TestVerifyLicense(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a, c := admin(t, s), anon(t, s)
	key := issueLicense(t, a, lic("verify", "expires_at", "2031-05-01T12:00:00Z", "limits", map[string]any{"seats": 3, "api_calls_per_day": 1000}))
	resp := c.Post("/v1/verify-license", map[string]string{"key": key}).Expect(t, 200)
	issuedAt := resp.JSON(t)["issued_at"].(string)
	resp.ExpectBody(t, `{"valid":true,"tier":"pro","product_id":"verify","limits":{"api_calls_per_day":1000,"seats":3},"expires_at":"2031-05-01T12:00:00Z","issued_at":"`+issuedAt+`","status":"active"}`)
	if _, err := time.Parse(time.RFC3339Nano, issuedAt); err != nil || !strings.HasSuffix(issuedAt, "Z") {
		t.Fatalf("issued_at %q", issuedAt)
	}

	c.Post("/v1/verify-license", map[string]string{"key": "no-such-key"}).ExpectBody(t, `{"valid":false,"error":"License key not found"}`)
	c.Post("/v1/verify-license", map[string]string{"key": ""}).Expect(t, 404)

	expired := issueLicense(t, a, lic("verify", "expires_at", "2020-01-01T00:00:00Z"))
	r := c.Post("/v1/verify-license", map[string]string{"key": expired})
	r.Expect(t, 403).ExpectBody(t, `{"valid":false,"error":"License has expired"}`)

	a.Post("/v1/revoke-license", map[string]any{"key": key, "revoked": true}).Expect(t, 200)
	c.Post("/v1/verify-license", map[string]string{"key": key}).Expect(t, 403).ExpectBody(t, `{"valid":false,"error":"License is not active"}`)
}

func TestRevokeLicenseFollowsTheStatusTable(t *testing.T) {
	t.Parallel()
	a := admin(t, selfHosted(t))
	key := issueLicense(t, a, lic("revoke"))
	a.Post("/v1/revoke-license", map[string]any{"key": key, "revoked": true}).ExpectBody(t, `{"key":"`+key+`","status":"revoked"}`)
	d := a.Get("/v1/admin/license/" + key).JSON(t)
	if d["status"] != "revoked" || d["revoked_at"] == nil {
		t.Fatalf("after revoke: %v", d)
	}
	a.Post("/v1/revoke-license", map[string]any{"key": key, "revoked": true}).ExpectError(t, 409, "License is already revoked")
	a.Post("/v1/revoke-license", map[string]any{"key": key, "revoked": false}).ExpectBody(t, `{"key":"`+key+`","status":"active"}`)
	if d := a.Get("/v1/admin/license/" + key).JSON(t); d["revoked_at"] != nil || d["status"] != "active" {
		t.Fatalf("after reactivation: %v", d)
	}
	a.Post("/v1/revoke-license", map[string]any{"key": key, "revoked": false}).ExpectError(t, 409, "License is already active")
	a.Post("/v1/revoke-license", map[string]any{"key": key}).ExpectError(t, 400, "revoked is required (true revokes, false reactivates)")
	a.Post("/v1/revoke-license", map[string]any{"key": "nope", "revoked": true}).ExpectError(t, 404, "License key not found")

	// A revoked license whose expiry has passed cannot come back.
	old := issueLicense(t, a, lic("revoke", "expires_at", "2021-01-01T00:00:00Z"))
	a.Post("/v1/revoke-license", map[string]any{"key": old, "revoked": true}).Expect(t, 200)
	a.Post("/v1/revoke-license", map[string]any{"key": old, "revoked": false}).ExpectError(t, 403, "License has expired")
}

func TestDeleteLicense(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a := admin(t, s)
	key := issueLicense(t, a, lic("delete"))
	a.Delete("/v1/delete-license", map[string]string{"key": key}).ExpectBody(t, `{"key":"`+key+`","deleted":true}`)
	a.Delete("/v1/delete-license", map[string]string{"key": key}).ExpectError(t, 404, "License key not found")
	anon(t, s).Post("/v1/verify-license", map[string]string{"key": key}).Expect(t, 404)
	a.Get("/v1/admin/license/"+key).ExpectError(t, 404, "License key not found")
}

func TestUpdateLicenseTerms(t *testing.T) {
	t.Parallel()
	a := admin(t, selfHosted(t))
	key := issueLicense(t, a, lic("terms", "limits", map[string]any{"seats": 5, "users": 2}, "max_activations", 3))
	a.Post("/v1/admin/update-license-terms", map[string]any{"key": key}).
		ExpectError(t, 400, "No updatable fields provided (expires_at, max_activations, limits)")
	a.Post("/v1/admin/update-license-terms", map[string]any{"key": "nope", "max_activations": 2}).ExpectError(t, 404, "License key not found")
	a.Post("/v1/admin/update-license-terms", map[string]any{"key": key, "limits": map[string]any{"disk": 1}}).ExpectError(t, 400, "Unknown limit key: disk")

	// limits replace the whole object; omitted fields stay.
	resp := a.Post("/v1/admin/update-license-terms", map[string]any{"key": key, "limits": map[string]any{"projects": 7}}).Expect(t, 200)
	resp.ExpectBody(t, `{"key":"`+key+`","expires_at":null,"limits":{"projects":7},"max_activations":3,"usage":{},"status":"active","activations_count":0}`)
	resp = a.Post("/v1/admin/update-license-terms", map[string]any{"key": key, "expires_at": "2032-02-02T00:00:00Z", "max_activations": nil}).Expect(t, 200)
	resp.ExpectBody(t, `{"key":"`+key+`","expires_at":"2032-02-02T00:00:00Z","limits":{"projects":7},"max_activations":null,"usage":{},"status":"active","activations_count":0}`)
	a.Post("/v1/admin/update-license-terms", map[string]any{"key": key, "expires_at": "2032-02-02T00:00:00+24:00"}).
		ExpectError(t, 400, "expires_at must be an ISO 8601 timestamp (e.g. 2027-01-31T00:00:00Z) or null")
	resp = a.Post("/v1/admin/update-license-terms", map[string]any{"key": key, "expires_at": "2032-02-02t00:00:00z"}).Expect(t, 200)
	if got := resp.JSON(t)["expires_at"]; got != "2032-02-02T00:00:00Z" {
		t.Fatalf("expires_at sent as 2032-02-02t00:00:00z is %v", got)
	}
	resp = a.Post("/v1/admin/update-license-terms", map[string]any{"key": key, "expires_at": nil}).Expect(t, 200)
	if resp.JSON(t)["expires_at"] != nil {
		t.Fatalf("expires_at null must make it perpetual: %s", resp.Body)
	}

	// The self-licensing credential (reserved product prefix) must keep an expiry.
	a.Post("/v1/issue-license", lic("_service_keyhouse")).ExpectError(t, 400, "expires_at is required for self-license credentials")
	self := issueLicense(t, a, lic("_service_keyhouse", "expires_at", "2030-01-01T00:00:00Z"))
	a.Post("/v1/admin/update-license-terms", map[string]any{"key": self, "expires_at": nil}).
		ExpectError(t, 400, "expires_at is required for self-license credentials")
	a.Post("/v1/admin/update-license-terms", map[string]any{"key": self, "expires_at": "2031-01-01T00:00:00Z"}).Expect(t, 200)
}

// Lowering the cap below the number of seats deactivates nothing; the counts show it.
func TestUpdateLicenseTermsCountsSeats(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a, c := admin(t, s), anon(t, s)
	key := issueLicense(t, a, lic("terms-seats", "max_activations", 3))
	for _, id := range []string{"a", "b", "c"} {
		c.Post("/v1/activate-license", map[string]string{"key": key, "instance_id": id}).Expect(t, 200)
	}
	resp := a.Post("/v1/admin/update-license-terms", map[string]any{"key": key, "max_activations": 1}).Expect(t, 200).JSON(t)
	if resp["activations_count"] != 3.0 || resp["max_activations"] != 1.0 {
		t.Fatalf("update-license-terms %v", resp)
	}
}

func TestNotesOnlyInTheAdminLookup(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a := admin(t, s)
	key := issueLicense(t, a, lic("notes", "notes", "first"))
	a.Post("/v1/admin/update-notes", map[string]any{"key": key, "notes": "called back <b>&</b>"}).
		ExpectBody(t, `{"key":"`+key+`","notes":"called back <b>&</b>"}`)
	if n := a.Get("/v1/admin/license/" + key).JSON(t)["notes"]; n != "called back <b>&</b>" {
		t.Fatalf("notes %v", n)
	}
	for _, path := range []string{"/v1/list-licenses?product_id=notes", "/v1/export-license/" + key} {
		if strings.Contains(string(a.Get(path).Body), "called back") {
			t.Fatalf("%s shows notes", path)
		}
	}
	if strings.Contains(string(anon(t, s).Post("/v1/verify-license", map[string]string{"key": key}).Body), "called back") {
		t.Fatal("verify-license shows notes")
	}
	a.Post("/v1/admin/update-notes", map[string]any{"key": key, "notes": ""}).ExpectBody(t, `{"key":"`+key+`","notes":null}`)
	a.Post("/v1/admin/update-notes", map[string]any{"key": key}).ExpectError(t, 400, "notes is required and must be a string")
	a.Post("/v1/admin/update-notes", map[string]any{"key": key, "notes": 42}).ExpectError(t, 400, "notes is required and must be a string")
	a.Post("/v1/admin/update-notes", map[string]any{"key": key, "notes": nil}).ExpectError(t, 400, "notes is required and must be a string")
	a.Post("/v1/admin/update-notes", map[string]any{"key": "nope", "notes": "x"}).ExpectError(t, 404, "License key not found")
}

func TestListLicenses(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	a := newTenant(t, s) // a tenant of its own: totals are exact
	other := newTenant(t, s)
	issueLicense(t, other, lic("list-other"))
	k1 := issueLicense(t, a, lic("list-a", "issued_to", "Grace HOPPER", "limits", map[string]any{"seats": 2}, "max_activations", 2))
	k2 := issueLicense(t, a, lic("list-b", "issued_to", "grace_100% sure"))
	k3 := issueLicense(t, a, lic("list-a", "issued_to", "Alan Turing", "max_activations", nil))
	a.Post("/v1/revoke-license", map[string]any{"key": k3, "revoked": true}).Expect(t, 200)
	anon(t, s).Post("/v1/activate-license", map[string]string{"key": k1, "instance_id": "box"}).Expect(t, 200)

	keys := func(path string) (string, float64) {
		body := a.Get(path).Expect(t, 200).JSON(t)
		var ks []string
		for _, l := range body["licenses"].([]any) {
			ks = append(ks, l.(map[string]any)["key"].(string))
		}
		return strings.Join(ks, ","), body["total"].(float64)
	}
	for _, tc := range []struct {
		query, want string
		total       float64
	}{
		{"", k3 + "," + k2 + "," + k1, 3},
		{"?product_id=list-a", k3 + "," + k1, 2},
		{"?status=active", k2 + "," + k1, 2},
		{"?status=revoked", k3, 1},
		{"?issued_to=grace", k2 + "," + k1, 2},
		{"?issued_to=%25", k2, 1}, // % is literal
		{"?issued_to=e_1", k2, 1}, // _ is literal
		{"?issued_to=a_t", "", 0}, // and does not match "an T"
		{"?limit=1", k3, 3},       // total ignores paging
		{"?limit=1&offset=2", k1, 3},
		{"?offset=3", "", 3},
	} {
		got, total := keys("/v1/list-licenses" + tc.query)
		if got != tc.want || total != tc.total {
			t.Errorf("%s: got %s (total %v), want %s (total %v)", tc.query, got, total, tc.want, tc.total)
		}
	}
	resp := a.Get("/v1/list-licenses?product_id=list-a&status=active").Expect(t, 200)
	row := resp.JSON(t)["licenses"].([]any)[0].(map[string]any)
	if row["activations_count"] != 1.0 || row["max_activations"] != 2.0 {
		t.Fatalf("row %v", row)
	}
	var raw struct {
		Licenses []json.RawMessage `json:"licenses"`
	}
	_ = json.Unmarshal(resp.Body, &raw)
	if got := strings.Join((&Response{Body: raw.Licenses[0]}).Keys(t), ","); got != "key,tier,product_id,issued_to,issued_at,expires_at,status,limits,usage,max_activations,revoked_at,activations_count" {
		t.Fatalf("row fields %s", got)
	}
	if got := strings.Join(resp.Keys(t), ","); got != "licenses,total" {
		t.Fatalf("fields %s", got)
	}
	// The input policy: no control character (NUL included) in a query value.
	a.Get("/v1/list-licenses?issued_to=a%00b").ExpectError(t, 400, "Invalid value for query parameter issued_to")
	for _, q := range []string{"limit=0", "limit=1001", "limit=x", "offset=-1", "offset=abc", "status=expired"} {
		a.Get("/v1/list-licenses?"+q).Expect(t, 400)
	}
	a.Get("/v1/list-licenses?limit=1000").Expect(t, 200)
	// expiring_within_days is a number as limit and offset are: ASCII digits only.
	for _, days := range []string{"0", "3651", "%2B5", "+5", "%205", "5.0", "-1", "x"} {
		a.Get("/v1/list-licenses?expiring_within_days="+days).ExpectError(t, 400, "expiring_within_days must be an integer from 1 to 3650")
	}
	a.Get("/v1/list-licenses?expiring_within_days=05").Expect(t, 200)
}

func TestAdminStats(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	a := newTenant(t, s)
	k1 := issueLicense(t, a, lic("stats-1"))
	k2 := issueLicense(t, a, lic("stats-1"))
	a.Post("/v1/revoke-license", map[string]any{"key": k2, "revoked": true}).Expect(t, 200)
	anon(t, s).Post("/v1/activate-license", map[string]string{"key": k1, "instance_id": "srv-1"}).Expect(t, 200)
	resp := a.Get("/v1/admin/stats").Expect(t, 200)
	if got := strings.Join(resp.Keys(t), ","); got != "totalLicenses,activeLicenses,revokedLicenses,totalActivations,recentActivations" {
		t.Fatalf("fields %s", got)
	}
	st := resp.JSON(t)
	recent := st["recentActivations"].([]any)
	if st["totalLicenses"] != 2.0 || st["activeLicenses"] != 1.0 || st["revokedLicenses"] != 1.0 || st["totalActivations"] != 1.0 || len(recent) != 1 {
		t.Fatalf("stats %s", resp.Body)
	}
	if r := recent[0].(map[string]any); r["key"] != k1 || r["instance_id"] != "srv-1" || r["activated_at"] == nil {
		t.Fatalf("recent %v", r)
	}
}

func TestHMACExportAndVerifyLicenseFile(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a, c := admin(t, s), anon(t, s)
	key := issueLicense(t, a, lic("export", "expires_at", "2033-03-03T03:03:03Z", "limits", map[string]any{"users": 5, "features": 3}))
	resp := c.Get("/v1/export-license/"+key).Expect(t, 200)
	if got := strings.Join(resp.Keys(t), ","); got != "key,tier,product_id,expires_at,limits,sig" {
		t.Fatalf("fields %s", got)
	}
	if strings.Contains(string(resp.Body), "issued_to") || !regexp.MustCompile(`"sig":"[0-9a-f]{64}"`).Match(resp.Body) {
		t.Fatalf("export %s", resp.Body)
	}
	// The export, posted back as is, verifies (issued_to may ride along unsigned).
	var export map[string]any
	_ = json.Unmarshal(resp.Body, &export)
	export["issued_to"] = "anyone"
	c.Post("/v1/verify-license-file", export).ExpectBody(t, `{"valid":true,"reason":null}`)

	tampered := map[string]any{}
	for k, v := range export {
		tampered[k] = v
	}
	tampered["tier"] = "enterprise"
	c.Post("/v1/verify-license-file", tampered).Expect(t, 403).ExpectBody(t, `{"valid":false,"reason":"Invalid signature","error":"Invalid signature"}`)
	tampered["tier"], tampered["limits"] = "pro", map[string]any{"users": 500, "features": 3}
	c.Post("/v1/verify-license-file", tampered).Expect(t, 403)
	delete(tampered, "sig")
	c.Post("/v1/verify-license-file", tampered).Expect(t, 400).ExpectBody(t, `{"valid":false,"reason":"Missing required fields","error":"Missing required fields"}`)

	a.Post("/v1/revoke-license", map[string]any{"key": key, "revoked": true}).Expect(t, 200)
	c.Post("/v1/verify-license-file", export).Expect(t, 403).ExpectBody(t, `{"valid":false,"reason":"Revoked or not found","error":"Revoked or not found"}`)
	c.Get("/v1/export-license/"+key).ExpectError(t, 403, "License is not active")
	c.Get("/v1/export-license/"+key+"/offline").ExpectError(t, 403, "License is not active")
	c.Get("/v1/export-license/nope").ExpectError(t, 404, "License key not found")

	// Perpetual, no limits: null and {} are what is signed.
	plain := issueLicense(t, a, lic("export"))
	exp := c.Get("/v1/export-license/"+plain).Expect(t, 200)
	if !strings.Contains(string(exp.Body), `"expires_at":null,"limits":{}`) {
		t.Fatalf("export %s", exp.Body)
	}
	c.Post("/v1/verify-license-file", exp.JSON(t)).Expect(t, 200)
}

func TestLicenseFileExport(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a, c := admin(t, s), anon(t, s)
	key := issueLicense(t, a, lic("file", "issued_to", "Lin <lin@example.com>", "limits", map[string]any{"seats": 4}, "expires_at", "2034-01-01T00:00:00Z"))
	resp := c.Get("/v1/export-license/"+key+"/file").Expect(t, 200)
	if resp.Header.Get("Content-Type") != "application/octet-stream" ||
		resp.Header.Get("Content-Disposition") != `attachment; filename="license-`+key+`.lic"` {
		t.Fatalf("headers %v", resp.Header)
	}
	if strings.Contains(string(resp.Body), key) || strings.Contains(string(resp.Body), "lin@example.com") {
		t.Fatal(".lic file is not encrypted")
	}
	file := base64.StdEncoding.EncodeToString(resp.Body)
	c.Post("/v1/verify-license-file-base64", map[string]string{"license_file": file}).
		ExpectBody(t, `{"valid":true,"license":{"key":"`+key+`","tier":"pro","product_id":"file","issued_to":"Lin <lin@example.com>","expires_at":"2034-01-01T00:00:00Z","limits":{"seats":4}}}`)

	fail := func(body any, status int, reason string) {
		t.Helper()
		c.Post("/v1/verify-license-file-base64", body).Expect(t, status).
			ExpectBody(t, `{"valid":false,"reason":"`+reason+`","error":"`+reason+`"}`)
	}
	flipped := append([]byte(nil), resp.Body...)
	flipped[len(flipped)-20] ^= 0x01
	fail(map[string]string{"license_file": base64.StdEncoding.EncodeToString(flipped)}, 403, "Invalid signature")
	fail(map[string]string{"license_file": base64.StdEncoding.EncodeToString(resp.Body[:20])}, 400, "Malformed or corrupt license_file")
	fail(map[string]string{"license_file": base64.StdEncoding.EncodeToString([]byte("hello, this is not a license file at all"))}, 400, "Malformed or corrupt license_file")
	fail(map[string]string{"license_file": "***not base64***"}, 400, "Malformed or corrupt license_file")
	fail(map[string]string{"license_file": ""}, 400, "Missing required fields")
	fail(map[string]any{}, 400, "Missing required fields")
	fail(map[string]any{"license_file": 12}, 400, "Missing required fields")

	a.Post("/v1/revoke-license", map[string]any{"key": key, "revoked": true}).Expect(t, 200)
	fail(map[string]string{"license_file": file}, 403, "Revoked or not found")
	c.Get("/v1/export-license/"+key+"/file").ExpectError(t, 403, "License is not active")
	expired := issueLicense(t, a, lic("file", "expires_at", "2022-01-01T00:00:00Z"))
	c.Get("/v1/export-license/"+expired+"/file").ExpectError(t, 403, "License has expired")
	c.Get("/v1/export-license/nope/file").ExpectError(t, 404, "License key not found")
}

// A .lic file that expires after it was exported verifies as Expired, live.
func TestLicenseFileOfAnExpiredLicense(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a, c := admin(t, s), anon(t, s)
	key := issueLicense(t, a, lic("file-expiry", "expires_at", "2040-01-01T00:00:00Z"))
	file := base64.StdEncoding.EncodeToString(c.Get("/v1/export-license/"+key+"/file").Expect(t, 200).Body)
	a.Post("/v1/admin/update-license-terms", map[string]any{"key": key, "expires_at": "2021-01-01T00:00:00Z"}).Expect(t, 200)
	c.Post("/v1/verify-license-file-base64", map[string]string{"license_file": file}).Expect(t, 403).
		ExpectBody(t, `{"valid":false,"reason":"Expired","error":"Expired"}`)
}

func TestPublicKeyIsSPKIPEM(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	resp := anon(t, s).Get("/v1/public-key").Expect(t, 200)
	if got := strings.Join(resp.Keys(t), ","); got != "publicKey" {
		t.Fatalf("fields %s", got)
	}
	pem := resp.JSON(t)["publicKey"].(string)
	if !strings.HasPrefix(pem, "-----BEGIN PUBLIC KEY-----\n") || strings.Contains(pem, "PRIVATE") {
		t.Fatalf("public key %q", pem)
	}
	// Every replica serves the same key: a second gateway (and the same service) agree.
	url, err := s.StartGateway(t.Context(), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	stopsWithTest(t, s, url)
	if other := newClient(t, url, "").Get("/v1/public-key").JSON(t)["publicKey"]; other != pem {
		t.Fatal("public key differs between gateways")
	}
}

// Hosted: the first tenant to issue under a product_id owns it; others get 403, and a key
// of another tenant is "not found" on every admin route.
func TestHostedProductOwnershipAndTenantScoping(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	a, b := newTenant(t, s), newTenant(t, s)
	product := fmt.Sprintf("owned-%d", time.Now().UnixNano())
	key := issueLicense(t, a, lic(product))
	b.Post("/v1/issue-license", lic(product)).ExpectError(t, 403, "product_id is owned by a different tenant")
	b.Post("/v1/issue-license", lic("  "+strings.ToUpper(product)+" ")).ExpectError(t, 403, "product_id is owned by a different tenant")
	issueLicense(t, a, lic(product))

	b.Get("/v1/admin/license/"+key).ExpectError(t, 404, "License key not found")
	b.Post("/v1/revoke-license", map[string]any{"key": key, "revoked": true}).ExpectError(t, 404, "License key not found")
	b.Delete("/v1/delete-license", map[string]string{"key": key}).ExpectError(t, 404, "License key not found")
	b.Post("/v1/admin/update-license-terms", map[string]any{"key": key, "max_activations": 9}).ExpectError(t, 404, "License key not found")
	b.Post("/v1/admin/update-notes", map[string]any{"key": key, "notes": "x"}).ExpectError(t, 404, "License key not found")
	if total := b.Get("/v1/list-licenses").JSON(t)["total"]; total != 0.0 {
		t.Fatalf("tenant b sees %v licenses", total)
	}
	// Public routes find any tenant's key.
	anon(t, s).Post("/v1/verify-license", map[string]string{"key": key}).Expect(t, 200)
	// The admin key is not a tenant credential in hosted mode.
	admin(t, s).Post("/v1/issue-license", lic(product)).ExpectError(t, 403, "Unauthorized")
	a.Post("/v1/issue-license", lic("_service_x", "expires_at", "2030-01-01T00:00:00Z")).ExpectError(t, 400, "product_id uses a reserved prefix")
}

// Two tenants issuing the first licenses of a new product at the same moment, each from
// several requests at once (with and without an Idempotency-Key): exactly one tenant owns
// the product, every one of its requests succeeds, every one of the other's is the 403,
// and the database holds no license of the loser for the product.
func TestHostedProductClaimIsRaceFree(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	db := dbConn(t, s)
	const perTenant = 4 // within the Free quota of 5
	for round := 0; round < 5; round++ {
		a, aID := hostedTenant(t, s)
		b, bID := hostedTenant(t, s)
		clients, ids := []*Client{a, b}, []string{aID, bID}
		product := fmt.Sprintf("race-%d-%d", round, time.Now().UnixNano())
		resps := make([][]*Response, len(clients))
		var wg sync.WaitGroup
		for i, c := range clients {
			resps[i] = make([]*Response, perTenant)
			for j := range perTenant {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var headers []string
					if j%2 == 1 {
						headers = []string{"Idempotency-Key", fmt.Sprintf("race-%s-%d", product, j)}
					}
					resps[i][j] = c.Do(http.MethodPost, "/v1/issue-license", lic(product), headers...)
				}()
			}
		}
		wg.Wait()
		winner := -1
		for i := range clients {
			if resps[i][0].Status == 200 {
				winner = i
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: no tenant owns %s: %s", round, product, resps[0][0].Body)
		}
		for i := range clients {
			for _, r := range resps[i] {
				if i == winner {
					r.Expect(t, 200)
				} else {
					r.ExpectError(t, 403, "product_id is owned by a different tenant")
				}
			}
		}
		var owner string
		if err := db.QueryRow(t.Context(), `SELECT tenant_id FROM licensing.products WHERE product_key = $1`, product).Scan(&owner); err != nil || owner != ids[winner] {
			t.Fatalf("round %d: owner %q (err %v), want the winner %s", round, owner, err, ids[winner])
		}
		var winners, losers int
		if err := db.QueryRow(t.Context(), `SELECT count(*) FILTER (WHERE tenant_id = $2), count(*) FILTER (WHERE tenant_id <> $2)
			FROM licensing.licenses WHERE product_id = $1`, product, ids[winner]).Scan(&winners, &losers); err != nil {
			t.Fatal(err)
		}
		if winners != perTenant || losers != 0 {
			t.Fatalf("round %d: %d licenses of the winner, %d of the loser, want %d and 0", round, winners, losers, perTenant)
		}
	}
}

// Hosted, an issuance refused after the ownership check (the Free plan's quota of 5, an
// Idempotency-Key reused with another request) claims nothing: the product it named
// stays free, and another tenant issues for it.
func TestHostedRefusedIssuanceLeavesTheProductFree(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	full, _ := hostedTenant(t, s)
	reuser, _ := hostedTenant(t, s)
	other, _ := hostedTenant(t, s)
	mine := product("refused-mine")
	for range 5 {
		issueLicense(t, full, lic(mine))
	}
	overQuota := product("refused-quota")
	full.Post("/v1/issue-license", lic(overQuota)).ExpectError(t, 403, "License issuance quota exceeded")
	issueLicense(t, other, lic(overQuota))

	idem := "refused-" + mine
	reuser.Do(http.MethodPost, "/v1/issue-license", lic(mine+"-r"), "Idempotency-Key", idem).Expect(t, 200)
	reused := product("refused-idem")
	reuser.Do(http.MethodPost, "/v1/issue-license", lic(reused), "Idempotency-Key", idem).
		ExpectError(t, 409, "Idempotency-Key reused with a different request")
	issueLicense(t, other, lic(reused))

	// The refused tenants own neither product: another tenant's, as always.
	full.Post("/v1/issue-license", lic(overQuota)).ExpectError(t, 403, "product_id is owned by a different tenant")
	reuser.Post("/v1/issue-license", lic(reused)).ExpectError(t, 403, "product_id is owned by a different tenant")
}

// Free plan: 5 active licenses, under concurrent issuance and reactivation.
func TestHostedFreeQuotaHoldsUnderConcurrency(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	a := newTenant(t, s)
	statuses := make([]int, 12)
	bodies := make([]string, 12)
	var wg sync.WaitGroup
	for i := range statuses {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := a.Post("/v1/issue-license", lic("quota"))
			statuses[i], bodies[i] = r.Status, string(r.Body)
		}()
	}
	wg.Wait()
	ok := 0
	for i, st := range statuses {
		switch {
		case st == 200:
			ok++
		case st != 403 || bodies[i] != `{"error":"License issuance quota exceeded"}`:
			t.Fatalf("status %d %s", st, bodies[i])
		}
	}
	if ok != 5 {
		t.Fatalf("%d licenses issued on Free, want 5", ok)
	}
	list := a.Get("/v1/list-licenses").JSON(t)
	if list["total"] != 5.0 {
		t.Fatalf("total %v", list["total"])
	}
	keys := []string{}
	for _, l := range list["licenses"].([]any) {
		keys = append(keys, l.(map[string]any)["key"].(string))
	}
	// Revoke two, issue one: one slot left; two concurrent reactivations → one wins.
	a.Post("/v1/revoke-license", map[string]any{"key": keys[0], "revoked": true}).Expect(t, 200)
	a.Post("/v1/revoke-license", map[string]any{"key": keys[1], "revoked": true}).Expect(t, 200)
	issueLicense(t, a, lic("quota"))
	var st [2]int
	for i := range st {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st[i] = a.Post("/v1/revoke-license", map[string]any{"key": keys[i], "revoked": false}).Status
		}()
	}
	wg.Wait()
	if !(st == [2]int{200, 403} || st == [2]int{403, 200}) {
		t.Fatalf("reactivations %v", st)
	}
	a.Post("/v1/issue-license", lic("quota")).ExpectError(t, 403, "License issuance quota exceeded")
	// Expired licenses hold no quota.
	b := newTenant(t, s)
	for i := 0; i < 5; i++ {
		issueLicense(t, b, lic("quota-b", "expires_at", "2020-01-01T00:00:00Z"))
	}
	issueLicense(t, b, lic("quota-b"))
}

// Self-hosted has no issuance quota.
func TestSelfHostedHasNoQuota(t *testing.T) {
	t.Parallel()
	a := admin(t, selfHosted(t))
	for i := 0; i < 8; i++ {
		issueLicense(t, a, lic("no-quota"))
	}
}

func TestIdempotencyKeyOnIssueLicense(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	a := newTenant(t, s)
	idem := fmt.Sprintf("order-%d", time.Now().UnixNano())
	body := lic("idem", "limits", map[string]any{"seats": 2, "users": 3})
	first := a.Do(http.MethodPost, "/v1/issue-license", body, "Idempotency-Key", idem).Expect(t, 200)
	// Same key, same body (keys in another order): the first answer, nothing new.
	again := a.Do(http.MethodPost, "/v1/issue-license",
		`{"limits":{"users":3,"seats":2},"issued_to":"Ada Lovelace <ada@example.com>","product_id":"idem","tier":"pro"}`,
		"Idempotency-Key", idem).Expect(t, 200)
	if string(again.Body) != string(first.Body) {
		t.Fatalf("replay %s, first %s", again.Body, first.Body)
	}
	a.Do(http.MethodPost, "/v1/issue-license", lic("idem", "tier", "enterprise"), "Idempotency-Key", idem).
		ExpectError(t, 409, "Idempotency-Key reused with a different request")
	// Another tenant's identical key is its own.
	b := newTenant(t, s)
	other := b.Do(http.MethodPost, "/v1/issue-license", lic("idem-b"), "Idempotency-Key", idem).Expect(t, 200)
	if string(other.Body) == string(first.Body) {
		t.Fatal("idempotency records leak between tenants")
	}
	// Concurrent retries of one request create one license.
	idem2 := idem + "-concurrent"
	bodies := make([]string, 8)
	var wg sync.WaitGroup
	for i := range bodies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			bodies[i] = string(a.Do(http.MethodPost, "/v1/issue-license", lic("idem"), "Idempotency-Key", idem2).Expect(t, 200).Body)
		}()
	}
	wg.Wait()
	for _, b := range bodies {
		if b != bodies[0] {
			t.Fatalf("concurrent replays differ: %v", bodies)
		}
	}
	if total := a.Get("/v1/list-licenses?product_id=idem").JSON(t)["total"]; total != 2.0 {
		t.Fatalf("%v licenses for two idempotency keys", total)
	}
}
