package e2e

import (
	"net/url"
	"testing"
)

// Revoking a license and deactivating a seat in the console ask first, on a page that
// needs no script: a form posted without the confirmation's "confirm" field changes
// nothing and shows the question; the confirmation's own form acts.
func TestConsoleRevokeAndSeatDeactivationAskFirst(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	api := admin(t, s)
	key := issueLicense(t, api, map[string]any{"tier": "pro", "product_id": product("confirm"), "issued_to": "support@example.com", "max_activations": 2})
	anon(t, s).Post("/v1/activate-license", map[string]any{"key": key, "instance_id": "laptop-1"}).Expect(t, 200)
	status := func() string {
		return api.Get("/v1/admin/license/"+key).Expect(t, 200).JSON(t)["status"].(string)
	}
	seats := func() int {
		acts, _ := api.Get("/v1/list-activations/"+key).Expect(t, 200).JSON(t)["activations"].([]any)
		return len(acts)
	}

	c := newWebClient(t, s)
	csrf := c.signIn(s.AdminKey)
	licensePath := "/console/licenses/" + key

	// The license page links to the question; it does not post.
	c.get(licensePath).expect(t, 200, `href="`+licensePath+`/revoke">Revoke…</a>`, `href="`+licensePath+`/seats/deactivate?instance_id=laptop-1"`)
	c.get(licensePath+"/revoke").expect(t, 200, "Revoke this license?", `name="confirm" value="yes"`)
	if got := status(); got != "active" {
		t.Fatalf("after opening the question the license is %s", got)
	}
	// A post without the confirmation (an old page, a stray click) only asks again.
	c.post(licensePath+"/revoke", url.Values{"csrf": {csrf}, "revoked": {"true"}}).expect(t, 200, "Revoke this license?")
	if got := status(); got != "active" {
		t.Fatalf("an unconfirmed revoke left the license %s", got)
	}
	c.post(licensePath+"/revoke", url.Values{"csrf": {csrf}, "revoked": {"true"}, "confirm": {"yes"}}).redirectsTo(t, licensePath+"?notice=revoked")
	if got := status(); got != "revoked" {
		t.Fatalf("a confirmed revoke left the license %s", got)
	}
	// Reactivating undoes nothing for good: it needs no question.
	c.post(licensePath+"/revoke", url.Values{"csrf": {csrf}, "revoked": {"false"}}).redirectsTo(t, licensePath+"?notice=reactivated")

	c.get(licensePath+"/seats/deactivate?instance_id=laptop-1").expect(t, 200, "Deactivate the seat", "laptop-1")
	c.post(licensePath+"/seats/deactivate", url.Values{"csrf": {csrf}, "instance_id": {"laptop-1"}}).expect(t, 200, "Deactivate the seat")
	if n := seats(); n != 1 {
		t.Fatalf("an unconfirmed deactivation left %d seats, want 1", n)
	}
	c.post(licensePath+"/seats/deactivate", url.Values{"csrf": {csrf}, "instance_id": {"laptop-1"}, "confirm": {"yes"}}).redirectsTo(t, licensePath+"?notice=seat-deactivated")
	if n := seats(); n != 0 {
		t.Fatalf("a confirmed deactivation left %d seats", n)
	}
}
