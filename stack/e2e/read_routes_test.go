package e2e

import (
	"encoding/json"
	"net/url"
	"slices"
	"testing"
)

// The reading counterparts of the webhook, policy and event routes (addendum §11, §12):
// one endpoint, one policy, one event's deliveries, each tenant-scoped (another tenant's
// object is the same 404 as an unknown one) and open to a read key.

// readClients returns the owner, a read key of the owner and (hosted) another tenant, and
// a webhook URL the mode accepts.
func readClients(t *testing.T, mode string) (owner, reader, other *Client, hookURL string) {
	t.Helper()
	s := sharedStack(t, mode)
	owner, hookURL = admin(t, s), "http://127.0.0.1:9/read-routes"
	if mode == "hosted" {
		owner, other, hookURL = newTenant(t, s), newTenant(t, s), "https://192.0.2.10/read-routes"
	}
	reader, readerID := createAPIKey(t, owner, "read routes", "read")
	t.Cleanup(func() { owner.Delete("/v1/api-keys/"+readerID, nil) })
	return owner, reader, other, hookURL
}

func TestWebhookEndpointIsReadOnItsOwn(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"self", "hosted"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			owner, reader, other, hookURL := readClients(t, mode)
			created := owner.Post("/v1/webhook-endpoints", map[string]any{"url": hookURL, "events": []string{"license."}, "description": "read me"}).Expect(t, 200).JSON(t)
			id := created["id"].(string)
			t.Cleanup(func() { owner.Delete("/v1/webhook-endpoints/"+id, nil) })
			// The endpoint as the list shows it, field for field: never its secret.
			var list struct{ Endpoints []json.RawMessage }
			if err := json.Unmarshal(owner.Get("/v1/webhook-endpoints").Expect(t, 200).Body, &list); err != nil {
				t.Fatal(err)
			}
			var listed string
			for _, raw := range list.Endpoints {
				var ep struct{ ID string }
				if json.Unmarshal(raw, &ep) == nil && ep.ID == id {
					listed = string(raw)
				}
			}
			got := owner.Get("/v1/webhook-endpoints/"+id).Expect(t, 200)
			got.ExpectBody(t, listed)
			if _, ok := got.JSON(t)["secret"]; ok {
				t.Fatalf("GET shows the secret: %s", got.Body)
			}
			reader.Get("/v1/webhook-endpoints/"+id).ExpectBody(t, listed)
			owner.Get("/v1/webhook-endpoints/we_000000000000000000000000").ExpectError(t, 404, "Webhook endpoint not found")
			if other != nil {
				other.Get("/v1/webhook-endpoints/"+id).ExpectError(t, 404, "Webhook endpoint not found")
			}
		})
	}
}

func TestLeasePolicyIsReadOnItsOwn(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"self", "hosted"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			owner, reader, other, _ := readClients(t, mode)
			p := product("one-policy")
			path := "/v1/products/" + p + "/policies/"
			// A product no tenant owns: no policy, and reading claims nothing.
			owner.Get(path+"pro").ExpectError(t, 404, "Policy not found")
			put := owner.Do("PUT", path+"pro", map[string]any{"floating": true, "lease_ttl_seconds": 3600, "entitlements": []string{"export"}}).Expect(t, 200)
			owner.Get(path+"pro").ExpectBody(t, string(put.Body))
			reader.Get(path+"pro").ExpectBody(t, string(put.Body))
			// A tier's own policy only, not the default it would fall back to.
			owner.Do("PUT", path+"*", map[string]any{}).Expect(t, 200)
			owner.Get(path+"enterprise").ExpectError(t, 404, "Policy not found")
			if m := owner.Get(path+"*").Expect(t, 200).JSON(t); m["tier"] != "*" || m["lease_ttl_seconds"] != float64(7*86400) {
				t.Fatalf("the default policy: %v", m)
			}
			owner.Get("/v1/products/"+p+"/policies/%20").ExpectError(t, 400, "tier is required")
			if other != nil {
				other.Get(path+"pro").ExpectError(t, 404, errProductUnknown)
			}
			owner.Delete(path+"pro", nil).Expect(t, 200)
			owner.Get(path+"pro").ExpectError(t, 404, "Policy not found")
		})
	}
}

func TestEventDeliveriesArePagedNewestFirst(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"self", "hosted"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			owner, reader, other, hookURL := readClients(t, mode)
			p := product("event-deliveries")
			var endpoints []string
			for range 2 {
				id := owner.Post("/v1/webhook-endpoints", map[string]any{"url": hookURL, "events": []string{"license.revoked"}}).Expect(t, 200).JSON(t)["id"].(string)
				t.Cleanup(func() { owner.Delete("/v1/webhook-endpoints/"+id, nil) })
				endpoints = append(endpoints, id)
			}
			key := issueLicense(t, owner, lic(p))
			owner.Post("/v1/revoke-license", map[string]any{"key": key, "revoked": true}).Expect(t, 200)
			eventID := eventsOf(t, owner, key, 2)[1].ID
			path := "/v1/events/" + eventID + "/deliveries"
			type page struct {
				Deliveries []struct {
					ID         string `json:"id"`
					EventID    string `json:"event_id"`
					EndpointID string `json:"endpoint_id"`
				} `json:"deliveries"`
				HasMore bool `json:"has_more"`
			}
			read := func(c *Client, query url.Values) page {
				t.Helper()
				var out page
				if err := json.Unmarshal(c.Get(path+"?"+query.Encode()).Expect(t, 200).Body, &out); err != nil {
					t.Fatal(err)
				}
				return out
			}
			eventually(t, "the event's two deliveries", func() bool { return len(read(owner, nil).Deliveries) == 2 })
			// A redelivery is the newest.
			redelivered := owner.Post("/v1/events/"+eventID+"/redeliver", map[string]any{"endpoint_id": endpoints[0]}).Expect(t, 200).JSON(t)["id"].(string)
			all := read(reader, url.Values{"limit": {"1000"}})
			if len(all.Deliveries) != 3 || all.HasMore || all.Deliveries[0].ID != redelivered {
				t.Fatalf("the event's deliveries %+v: want 3, the redelivery first", all)
			}
			var ids, ends []string
			for _, d := range all.Deliveries {
				if d.EventID != eventID {
					t.Fatalf("a delivery of another event listed: %+v", d)
				}
				ids, ends = append(ids, d.ID), append(ends, d.EndpointID)
			}
			slices.Sort(ends)
			if want := slices.Sorted(slices.Values([]string{endpoints[0], endpoints[0], endpoints[1]})); !slices.Equal(ends, want) {
				t.Fatalf("endpoints %v, want %v", ends, want)
			}
			first := read(owner, url.Values{"limit": {"2"}})
			rest := read(owner, url.Values{"limit": {"2"}, "starting_after": {first.Deliveries[1].ID}})
			if !first.HasMore || rest.HasMore || len(first.Deliveries) != 2 || len(rest.Deliveries) != 1 ||
				first.Deliveries[0].ID != ids[0] || first.Deliveries[1].ID != ids[1] || rest.Deliveries[0].ID != ids[2] {
				t.Fatalf("pages %+v then %+v, want %v in two pages", first, rest, ids)
			}
			owner.Get(path+"?limit=0").ExpectError(t, 400, "limit must be an integer between 1 and 1000")
			owner.Get(path+"?status=lost").ExpectError(t, 400, "status must be pending, succeeded or failed")
			owner.Get(path+"?starting_after=whd_none").ExpectError(t, 400, "starting_after must be a delivery of this event")
			owner.Get("/v1/events/evt_none/deliveries").ExpectError(t, 404, "Event not found")
			ping := owner.Post("/v1/webhook-endpoints/"+endpoints[1]+"/ping", nil).Expect(t, 200).JSON(t)["event_id"].(string)
			owner.Get("/v1/events/"+ping+"/deliveries").ExpectError(t, 404, "Event not found")
			if other != nil {
				other.Get(path).ExpectError(t, 404, "Event not found")
			}
		})
	}
}
