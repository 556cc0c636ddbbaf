package e2e

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// documentedErrors reads the error strings the served OpenAPI document (api.md's source)
// lists for a route and status: the description's "; "-separated strings, without their
// parenthesized explanations.
func documentedErrors(t *testing.T, c *Client, path, method, status string) []string {
	t.Helper()
	var doc struct {
		Paths map[string]map[string]struct {
			Responses map[string]struct{ Description string } `json:"responses"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(c.Get("/v1/openapi.json").Expect(t, 200).Body, &doc); err != nil {
		t.Fatal(err)
	}
	desc := regexp.MustCompile(`\s*\([^)]*\)`).ReplaceAllString(doc.Paths[path][method].Responses[status].Description, "")
	return strings.Split(strings.TrimSuffix(desc, "."), "; ")
}

// POST /v1/leases's reference lists exactly the 403 and 404 errors the route answers: each
// one a client meets here is listed under its status, and each one listed is met here,
// but Seat lease has expired, which needs a floating seat to lapse
// (TestFloatingSeatLivesOnlyWhileLeased meets it) and addendum §12 promises. A reinstall by
// an instance_id no seat has is 403 Invalid activation token, not a 404.
func TestLeaseErrorsAreTheDocumentedOnes(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a, c := admin(t, s), anon(t, s)
	p := product("lease-documented")
	putPolicy(t, a, p, "*", map[string]any{"fingerprint_match": "all"})
	key := issueLicense(t, a, lic(p))
	tok := seat(t, c, key, "box")
	machine := map[string]string{"disk": "d1"}
	lease(c, map[string]any{"key": key, "token": tok, "components": machine}).Expect(t, 200)

	met := map[int][]string{}
	meet := func(status int, want string, body map[string]any) {
		t.Helper()
		lease(c, body).ExpectError(t, status, want)
		met[status] = append(met[status], want)
	}
	meet(404, errNotFound, map[string]any{"key": "AAAA-BBBB-CCCC-DDDD-EEEE-FFFF-GGGG", "token": tok})
	meet(403, errBadToken, map[string]any{"key": key, "token": "act_nope"})
	meet(403, errBadToken, map[string]any{"key": key, "instance_id": "never-activated", "components": machine})
	meet(403, errFingerprint, map[string]any{"key": key, "token": tok, "components": map[string]string{"disk": "d2"}})
	a.Post("/v1/admin/update-license-terms", map[string]any{"key": key, "expires_at": "2021-01-01T00:00:00Z"}).Expect(t, 200)
	meet(403, errHasExpired, map[string]any{"key": key, "token": tok, "components": machine})
	a.Post("/v1/admin/update-license-terms", map[string]any{"key": key, "expires_at": nil}).Expect(t, 200)
	a.Post("/v1/revoke-license", map[string]any{"key": key, "revoked": true}).Expect(t, 200)
	meet(403, errNotActive, map[string]any{"key": key, "token": tok, "components": machine})

	for status, name := range map[int]string{403: "403", 404: "404"} {
		listed := documentedErrors(t, c, "/v1/leases", "post", name)
		for _, e := range met[status] {
			if !slices.Contains(listed, e) {
				t.Errorf("%d %q is answered but not listed (listed: %q)", status, e, listed)
			}
		}
		for _, e := range listed {
			if !slices.Contains(met[status], e) && (status != 403 || e != errLeaseLapsed) {
				t.Errorf("%d %q is listed but never answered", status, e)
			}
		}
		if status == 403 && !slices.Contains(listed, errLeaseLapsed) {
			t.Errorf("403 %q (addendum §12) is not listed: %q", errLeaseLapsed, listed)
		}
	}
}
