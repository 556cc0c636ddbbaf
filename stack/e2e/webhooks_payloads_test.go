package e2e

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// documentedDataFields reads docs/events.md's table of event types: each type's data
// field names, as the page lists them (explanations in parentheses and after a colon,
// semicolon or full stop are not fields).
func documentedDataFields(t *testing.T) map[string][]string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(filepath.Join(root, "docs", "events.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `([a-z_.]+)` \\| (.*) \\|$")
	parens := regexp.MustCompile(`\([^()]*\)`)
	field := regexp.MustCompile("`([a-z_]+)`")
	out := map[string][]string{}
	for _, m := range row.FindAllStringSubmatch(string(page), -1) {
		cell := m[2]
		for parens.MatchString(cell) {
			cell = parens.ReplaceAllString(cell, "")
		}
		if i := strings.IndexAny(cell, ":;."); i >= 0 {
			cell = cell[:i]
		}
		fields := []string{}
		for _, f := range field.FindAllStringSubmatch(cell, -1) {
			fields = append(fields, f[1])
		}
		out[m[1]] = fields
	}
	if len(out) < 20 {
		t.Fatalf("docs/events.md lists %d event types: %v", len(out), out)
	}
	return out
}

// What a vendor's receiver gets for each event type it can make happen through the API,
// compared with docs/events.md: the data fields the page lists, no more and no fewer, in
// alphabetical order as the page says; and the body the event log lists for the same
// event, byte for byte, as webhooks.md says.
func TestEveryDeliveredEventHasTheDataFieldsEventsMdLists(t *testing.T) {
	t.Parallel()
	documented := documentedDataFields(t)
	// A tenant of its own (its lease key rotates; every event of the stack is its own),
	// and a receiver on this machine.
	s := startStack(t, map[string]string{"MULTI_TENANT": "true", "WEBHOOK_ALLOW_PRIVATE_NETWORKS": "true"})
	a, c := newTenant(t, s), anon(t, s)
	rc := newWebhookReceiver(t)
	id := a.Post("/v1/webhook-endpoints", map[string]any{"url": rc.URL + "/hook", "events": []string{"*"}}).Expect(t, 200).JSON(t)["id"].(string)

	prod := product("payloads")
	key := issueLicense(t, a, lic(prod, "max_activations", 3, "limits", map[string]any{"projects": 2}))
	a.Post("/v1/revoke-license", map[string]any{"key": key, "revoked": true}).Expect(t, 200)
	a.Post("/v1/revoke-license", map[string]any{"key": key, "revoked": false}).Expect(t, 200)
	a.Post("/v1/admin/update-license-terms", map[string]any{"key": key, "max_activations": 4}).Expect(t, 200)
	a.Post("/v1/admin/update-notes", map[string]any{"key": key, "notes": "vip"}).Expect(t, 200)
	tok := seat(t, c, key, "host-a")
	trackUsage(c, key, tok, "projects", "increment", 2).Expect(t, 200)
	a.Post("/v1/admin/reset-usage", map[string]any{"key": key}).Expect(t, 200)
	a.Post("/v1/admin/reissue-token", map[string]any{"key": key, "instance_id": "host-a"}).Expect(t, 200)
	a.Post("/v1/admin/deactivate-by-instance-id", map[string]any{"key": key, "instance_id": "host-a"}).Expect(t, 200)
	rel := a.Post("/v1/register-release", map[string]any{"product_id": prod, "version": "1.2.3", "platform": "linux",
		"artifact_url": "https://example.com/a", "checksum": "sha256:00"}).Expect(t, 200).JSON(t)["id"]
	a.Post("/v1/unpublish-release", map[string]any{"id": rel}).Expect(t, 200)
	a.Post("/v1/lease-keys/rotate", map[string]any{}).Expect(t, 200)
	ak := a.Post("/v1/api-keys", map[string]any{"name": "payloads", "scope": "read"}).Expect(t, 200).JSON(t)["id"].(string)
	a.Delete("/v1/api-keys/"+ak, nil).Expect(t, 200)
	a.Delete("/v1/delete-license", map[string]string{"key": key}).Expect(t, 200)
	a.Post("/v1/webhook-endpoints/"+id+"/ping", map[string]any{}).Expect(t, 200)
	fresh := a.Post("/v1/rotate-api-key", nil).Expect(t, 200).JSON(t)["apiKey"].(string)
	a = newClient(t, a.Base, fresh)

	want := []string{"api_key.created", "api_key.deleted", "api_key.rotated", "lease_key.rotated", "license.deleted",
		"license.issued", "license.notes_updated", "license.reactivated", "license.revoked", "license.terms_updated",
		"ping", "release.published", "release.unpublished", "seat.activated", "seat.deactivated", "seat.token_reissued",
		"usage.limit_reached", "usage.reset"}
	got := map[string]receivedDelivery{}
	eventually(t, "a delivery of every type made", func() bool {
		for _, d := range rc.deliveries() {
			var e struct{ Type string }
			if err := json.Unmarshal(d.body, &e); err != nil {
				t.Fatalf("%v: %s", err, d.body)
			}
			got[e.Type] = d
		}
		return len(got) >= len(want)
	})
	if types := slices.Sorted(maps.Keys(got)); !slices.Equal(types, want) {
		t.Fatalf("delivered types %v, want %v", types, want)
	}
	for typ, d := range got {
		var e struct {
			ID   string          `json:"id"`
			Data json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal(d.body, &e); err != nil {
			t.Fatal(err)
		}
		fields, ok := documented[typ]
		if !ok {
			t.Errorf("%s is delivered, and not in docs/events.md's table", typ)
			continue
		}
		wantKeys := slices.Sorted(slices.Values(fields))
		if keys := (&Response{Body: e.Data}).Keys(t); !slices.Equal(keys, wantKeys) {
			t.Errorf("%s data fields %v, docs/events.md lists %v (in alphabetical order)", typ, keys, wantKeys)
		}
		var data map[string]any
		if err := json.Unmarshal(e.Data, &data); err != nil {
			t.Fatal(err)
		}
		for k, v := range data {
			if want := documentedJSONType(typ, k); !hasJSONType(v, want) {
				t.Errorf("%s data %s is %#v, docs/events.md says %s", typ, k, v, want)
			}
		}
		if typ != "ping" {
			if logged := a.Get("/v1/events/"+e.ID).Expect(t, 200).Body; string(logged) != string(d.body) {
				t.Errorf("%s delivered %s\nthe log lists %s", typ, d.body, logged)
			}
		}
	}
}

// documentedJSONType is the JSON type docs/events.md gives a data field ("or null" where
// the page's table says so: a value of those is null or of the type).
func documentedJSONType(typ, field string) string {
	switch {
	case field == "used" || field == "limit" || field == "max_activations":
		return "number"
	case field == "id" && strings.HasPrefix(typ, "release."):
		return "number"
	case field == "limits":
		return "object of numbers"
	}
	return "string"
}

func hasJSONType(v any, want string) bool {
	if v == nil {
		return true // the table's "or null"; the field list above holds which fields
	}
	switch want {
	case "number":
		_, ok := v.(float64)
		return ok
	case "object of numbers":
		m, ok := v.(map[string]any)
		for _, x := range m {
			if _, num := x.(float64); !num {
				return false
			}
		}
		return ok
	}
	_, ok := v.(string)
	return ok
}
