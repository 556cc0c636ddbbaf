package e2e

import (
	"strings"
	"testing"
	"time"
)

// The overview shows support what to look at first: the tenant's active licenses that
// expire within 30 days (not the later, the perpetual or the revoked ones) and the latest
// events; the licenses page lists every expiring one.
func TestConsoleOverviewShowsExpiringLicensesAndTheLatestEvents(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	api := newTenant(t, s)
	prod := product("overview")
	issue := func(customer string, expires any) string {
		return issueLicense(t, api, map[string]any{"tier": "pro", "product_id": prod, "issued_to": customer, "expires_at": expires})
	}
	inDays := func(d int) string { return time.Now().UTC().AddDate(0, 0, d).Format(time.RFC3339) }
	soon := issue("soon@example.com", inDays(3))
	later := issue("later@example.com", inDays(45))
	perpetual := issue("forever@example.com", nil)
	revoked := issue("revoked@example.com", inDays(5))
	api.Post("/v1/revoke-license", map[string]any{"key": revoked, "revoked": true}).Expect(t, 200)

	c := newWebClient(t, s)
	c.signIn(api.Token)
	var body string
	eventually(t, "the revocation in the overview's latest events", func() bool {
		body = c.get("/console/").expect(t, 200, "Expiring in the next 30 days", "Latest events").Body
		return strings.Contains(body, "license.revoked")
	})
	expiring := section(body, "expiring-title")
	if !strings.Contains(expiring, soon) || !strings.Contains(expiring, "soon@example.com") {
		t.Errorf("the license expiring in 3 days is not in the overview's expiring list: %s", expiring)
	}
	for name, key := range map[string]string{"in 45 days": later, "perpetual": perpetual, "revoked": revoked} {
		if strings.Contains(expiring, key) {
			t.Errorf("the %s license is in the expiring list", name)
		}
	}
	if events := section(body, "latest-events-title"); !strings.Contains(events, "license.issued") {
		t.Errorf("the latest events lack license.issued: %s", events)
	}

	list := c.get("/console/licenses?expiring_within_days=30").expect(t, 200, "expiring in the next 30 days").Body
	if !strings.Contains(list, soon) || strings.Contains(list, later) || strings.Contains(list, revoked) {
		t.Errorf("licenses?expiring_within_days=30 lists the wrong licenses")
	}
	c.get("/console/licenses?expiring_within_days=0").expect(t, 400, "expiring_within_days must be an integer from 1 to 3650")
}

// section returns the HTML of the card whose heading has the id.
func section(page, headingID string) string {
	_, rest, ok := strings.Cut(page, `id="`+headingID+`"`)
	if !ok {
		return ""
	}
	card, _, _ := strings.Cut(rest, "</section>")
	return card
}
