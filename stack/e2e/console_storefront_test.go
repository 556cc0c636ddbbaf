package e2e

import (
	"encoding/json"
	"strings"
	"testing"
)

// The console's mappings show every term the API takes (a one-time purchase's duration, a
// subscription's grace and first expiry, what a refund or dispute does) and its form sets
// them, a refused value's message beside its field.
func TestConsoleStorefrontMappingsShowAndTakeEveryTerm(t *testing.T) {
	s := hosted(t)
	tenant := newTenant(t, s)
	prod, apiRef, ref := product("console-mappings"), uniq("api-ref-"), uniq("console-ref-")
	tenant.Post("/v1/storefront/mappings", map[string]any{"service_ref": apiRef, "product_id": prod, "tier": "pro", "duration_days": 30}).Expect(t, 200)
	out := browse(t, "storefrontMappings", map[string]any{"base": s.URL, "key": tenant.Token, "ip": browserIP(t, s),
		"product": prod, "apiRef": apiRef, "ref": ref})
	for _, want := range []string{"expires after 30 days", "paid period + 3 days of grace", "30 days until the first invoice", "revokes the license"} {
		if !strings.Contains(str(out, "listed"), want) {
			t.Errorf("the mapping made through the API lists as %q, missing %q", str(out, "listed"), want)
		}
	}
	for _, want := range []string{"perpetual", "paid period + 7 days of grace", "31 days until the first invoice", "keeps the license"} {
		if !strings.Contains(str(out, "added"), want) {
			t.Errorf("the mapping added in the console lists as %q, missing %q", str(out, "added"), want)
		}
	}
	var listed struct {
		Mappings []map[string]any `json:"mappings"`
	}
	if err := json.Unmarshal(tenant.Get("/v1/storefront/mappings").Expect(t, 200).Body, &listed); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, m := range listed.Mappings {
		if m["service_ref"] == ref {
			found = true
			if m["renewal_grace_days"] != 7.0 || m["on_refund"] != "keep" || m["duration_days"] != nil {
				t.Errorf("the mapping the console added reads %v", m)
			}
		}
	}
	if !found || len(listed.Mappings) != 2 {
		t.Errorf("mappings after the console: %v", listed.Mappings)
	}
}
