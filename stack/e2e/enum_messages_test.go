package e2e

import (
	"encoding/json"
	"net/http"
	"testing"
)

// TestOutOfSetValuesShareOneWording sends a value outside its fixed set to every route
// that has such a field, in each mode the route exists in, and holds the exact 400: one
// wording, "<field> must be a, b or c" (input.NotOneOf), which is the contract's own
// (on_refund). The two contract messages in other words stay as the contract has them:
// scope's quoted values and "Unknown limit key: <key>".
func TestOutOfSetValuesShareOneWording(t *testing.T) {
	t.Parallel()
	const eventTypeOrPrefix = ` must be an event type or a prefix of one ending in "."`
	type enumCase struct {
		name         string
		method, path string
		body         any
		want         string
		hostedOnly   bool // self-hosted, the route answers that billing is for hosted deployments
		importResult bool // an import item's error: in its result, the call answering 200
	}
	cases := func(p string) []enumCase {
		item := importItem(p, 1, "ENUM-ITEM-"+p)
		item["status"] = "suspended"
		return []enumCase{
			{name: "list-licenses status", method: http.MethodGet, path: "/v1/list-licenses?status=suspended",
				want: "status must be active or revoked"},
			{name: "list-releases status", method: http.MethodGet, path: "/v1/list-releases?status=draft",
				want: "status must be published or unpublished"},
			{name: "endpoint deliveries status", method: http.MethodGet, path: "/v1/webhook-endpoints/we_none/deliveries?status=lost",
				want: "status must be pending, succeeded or failed"},
			{name: "event deliveries status", method: http.MethodGet, path: "/v1/events/evt_none/deliveries?status=lost",
				want: "status must be pending, succeeded or failed"},
			{name: "events type", method: http.MethodGet, path: "/v1/events?type=license.exploded",
				want: "type" + eventTypeOrPrefix},
			// 192.0.2.0/24 is documentation space: public by every rule, and the request is
			// refused before anything is sent anywhere.
			{name: "create endpoint events", method: http.MethodPost, path: "/v1/webhook-endpoints",
				body: map[string]any{"url": "https://192.0.2.10/hook", "events": []string{"license.", "license.exploded"}},
				want: "events[1]" + eventTypeOrPrefix},
			{name: "update endpoint events", method: http.MethodPost, path: "/v1/webhook-endpoints/we_none/update",
				body: map[string]any{"events": []string{"ping"}},
				want: "events[0]" + eventTypeOrPrefix},
			{name: "storefront deliveries outcome", method: http.MethodGet, path: "/v1/storefront/deliveries?outcome=shipped",
				want: "outcome must be issued, processing, awaiting_payment, unmapped, over_quota, invalid_input, error, held, " +
					"expiry_set, renewed, canceled, revoked_refund, revoked_dispute, reactivated, kept or ignored"},
			{name: "storefront webhook provider", method: http.MethodPost, path: "/v1/storefront/webhooks",
				body: map[string]any{"provider": "paddle"},
				want: "provider must be stripe"},
			{name: "storefront mapping on_refund (addendum)", method: http.MethodPost, path: "/v1/storefront/mappings",
				body: map[string]any{"service_ref": "ref-" + p, "product_id": p, "tier": "pro", "on_refund": "maybe"},
				want: "on_refund must be revoke or keep"},
			{name: "checkout plan", method: http.MethodPost, path: "/v1/billing/checkout",
				body: map[string]any{"plan": "enterprise"}, want: "plan must be free or pro", hostedOnly: true},
			{name: "checkout interval", method: http.MethodPost, path: "/v1/billing/checkout",
				body: map[string]any{"plan": "pro", "interval": "weekly"}, want: "interval must be monthly or annual", hostedOnly: true},
			{name: "api key scope (addendum)", method: http.MethodPost, path: "/v1/api-keys",
				body: map[string]any{"name": "ci", "scope": "admin"}, want: `scope must be "full" or "read"`},
			{name: "import on_conflict", method: http.MethodPost, path: "/v1/licenses/import",
				body: importBody([]map[string]any{importItem(p, 2, "ENUM-CALL-"+p)}, "sometimes"),
				want: "on_conflict must be fail or skip"},
			{name: "import item status", method: http.MethodPost, path: "/v1/licenses/import",
				body: importBody([]map[string]any{item}, "fail"),
				want: "status must be active or revoked", importResult: true},
			{name: "policy fingerprint_match", method: http.MethodPut, path: "/v1/products/" + p + "/policies/pro",
				body: map[string]any{"fingerprint_match": "some"},
				want: "fingerprint_match must be none, any, most or all"},
			{name: "reset-usage metric", method: http.MethodPost, path: "/v1/admin/reset-usage",
				body: map[string]any{"key": "ENUM-NO-SUCH-KEY", "metric": "storage"},
				want: "metric must be users, seats, admins, projects, environments, tenants, api_calls_per_day, " +
					"rate_limit_rps, concurrent_sessions or features"},
			{name: "issue-license limits (api.md)", method: http.MethodPost, path: "/v1/issue-license",
				body: map[string]any{"product_id": p, "tier": "pro", "issued_to": "a@example.com", "limits": map[string]any{"storage": 1}},
				want: "Unknown limit key: storage"},
		}
	}
	for _, mode := range []string{"self", "hosted"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			c := tenantClient(t, mode)
			for _, tc := range cases(product("enum-" + mode)) {
				if tc.hostedOnly && mode == "self" {
					continue
				}
				t.Run(tc.name, func(t *testing.T) {
					r := c.Do(tc.method, tc.path, tc.body)
					if !tc.importResult {
						r.ExpectError(t, http.StatusBadRequest, tc.want)
						return
					}
					var got struct {
						Results []struct {
							Error string `json:"error"`
						} `json:"results"`
					}
					if err := json.Unmarshal(r.Expect(t, http.StatusOK).Body, &got); err != nil || len(got.Results) != 1 || got.Results[0].Error != tc.want {
						t.Fatalf("import answered %s, want the item's error %q", r.Body, tc.want)
					}
				})
			}
		})
	}
}
