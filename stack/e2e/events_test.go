package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// logEvent is an event as GET /v1/events lists it.
type logEvent struct {
	ID        string         `json:"id"`
	Type      string         `json:"type"`
	CreatedAt string         `json:"created_at"`
	Actor     map[string]any `json:"actor"`
	Data      map[string]any `json:"data"`
}

type eventPage struct {
	Events  []logEvent `json:"events"`
	HasMore bool       `json:"has_more"`
}

func listEvents(t testing.TB, c *Client, query url.Values) eventPage {
	t.Helper()
	return pageOf(t, c.Get("/v1/events?"+query.Encode()))
}

// pageOf decodes a 200 answer of the event log.
func pageOf(t testing.TB, resp *Response) eventPage {
	t.Helper()
	resp.Expect(t, 200)
	var p eventPage
	if err := json.Unmarshal(resp.Body, &p); err != nil {
		t.Fatalf("%v: %s", err, resp.Body)
	}
	return p
}

// inMadeOrder sorts events of a log page (newest first by their place in the log) oldest
// first by created_at: the log places an event that reached it late above those already
// listed (docs/events.md), so the order the changes were made in is created_at's. Six
// fractional digits: the strings sort as the times do.
func inMadeOrder(evs []logEvent) {
	slices.Reverse(evs)
	slices.SortStableFunc(evs, func(x, y logEvent) int { return strings.Compare(x.CreatedAt, y.CreatedAt) })
}

// eventsOf waits until the log holds want events about license key (the log is filled
// from the event stream, a few milliseconds after the change) and returns them oldest
// first: by created_at, the order the changes were made in (the log lists them in the
// order they reached it, which events of several services can reach in another order;
// docs/events.md). More than want fails at once: every change is exactly one event. While it waits,
// a 503 that says to retry is asked again, as a client would: the events service may be
// out of reach for a moment (after a restart, or while its database probe fails on a
// loaded machine), which the test that waits is not about.
func eventsOf(t testing.TB, c *Client, key string, want int) []logEvent {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		// Each look from an address of its own: waiting must not spend the caller's
		// Admin-Info budget.
		resp := newClient(t, c.Base, c.Token).Get("/v1/events?" + url.Values{"license_key": {key}, "limit": {"1000"}}.Encode())
		if saysRetry(resp) && time.Now().Before(deadline) {
			t.Logf("events of %s: %d %s; asking again", key, resp.Status, resp.Body)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		p := pageOf(t, resp)
		if len(p.Events) > want {
			t.Fatalf("%d events about %s, want %d: %v", len(p.Events), key, want, types(p.Events))
		}
		if len(p.Events) == want {
			inMadeOrder(p.Events)
			return p.Events
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d events about %s after 60 s, want %d: %v", len(p.Events), key, want, types(p.Events))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// saysRetry reports a 503 whose error tells the client to ask again ("… unavailable,
// retry": a service or the database out of reach, or admission control's refusal).
func saysRetry(r *Response) bool {
	return r.Status == http.StatusServiceUnavailable && bytes.HasSuffix(r.Body, []byte(` unavailable, retry"}`))
}

func types(evs []logEvent) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Type
	}
	return out
}

// Every kind of change of a license, its seats and its usage is exactly one event in the
// log, with the change's data and who made it (the admin key, the client on the public
// routes, the system for the purge), in the order made.
func TestEveryChangeIsOneEventInTheLog(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a, c := admin(t, s), anon(t, s)
	prod := product("events")
	key := issueLicense(t, a, lic(prod, "max_activations", 3, "limits", map[string]any{"projects": 3}))
	a.Post("/v1/revoke-license", map[string]any{"key": key, "revoked": true}).Expect(t, 200)
	a.Post("/v1/revoke-license", map[string]any{"key": key, "revoked": false}).Expect(t, 200)
	a.Post("/v1/admin/update-license-terms", map[string]any{"key": key, "expires_at": "2031-01-02T03:04:05Z"}).Expect(t, 200)
	a.Post("/v1/admin/update-notes", map[string]any{"key": key, "notes": "vip"}).Expect(t, 200)
	tok := c.Do("POST", "/v1/activate-license", map[string]string{"key": key, "instance_id": "host-a"}, "X-Request-Id", "req-activate-a").Expect(t, 200).JSON(t)["token"].(string)
	seat(t, c, key, "host-b")
	c.Post("/v1/activate-license", map[string]string{"key": key, "instance_id": "host-b"}).Expect(t, 200) // already: no event
	for range 4 {
		trackUsage(c, key, tok, "projects") // the third lands on the limit, the fourth is refused
	}
	a.Post("/v1/admin/reset-usage", map[string]any{"key": key, "metric": "projects"}).Expect(t, 200)
	a.Post("/v1/admin/reissue-token", map[string]any{"key": key, "instance_id": "host-b"}).Expect(t, 200)
	a.Post("/v1/admin/deactivate-by-instance-id", map[string]any{"key": key, "instance_id": "host-b"}).Expect(t, 200)
	c.Post("/v1/deactivate-license", map[string]any{"key": key, "token": tok}).Expect(t, 200)
	c.Post("/v1/deactivate-license", map[string]any{"key": key, "token": tok}).Expect(t, 200) // gone: no event
	seat(t, c, key, "host-c")
	a.Delete("/v1/delete-license", map[string]string{"key": key}).Expect(t, 200)

	want := []string{"license.issued", "license.revoked", "license.reactivated", "license.terms_updated",
		"license.notes_updated", "seat.activated", "seat.activated", "usage.limit_reached", "usage.reset",
		"seat.token_reissued", "seat.deactivated", "seat.deactivated", "seat.activated", "license.deleted",
		"seat.deactivated"}
	evs := eventsOf(t, a, key, len(want))
	// The purge's seat.deactivated follows license.deleted; the rest is in call order.
	if got := types(evs); !slices.Equal(got, want) {
		t.Fatalf("events %v\nwant    %v", got, want)
	}
	actors := make([]string, len(evs))
	for i, e := range evs {
		actors[i] = fmt.Sprint(e.Actor["type"])
		if e.Data["key"] != key || e.Data["product_id"] != prod || !strings.HasPrefix(e.ID, "evt_") {
			t.Errorf("event %d: %+v", i, e)
		}
	}
	wantActors := []string{"admin", "admin", "admin", "admin", "admin", "client", "client", "client", "admin",
		"admin", "admin", "client", "client", "admin", "system"}
	if !slices.Equal(actors, wantActors) {
		t.Errorf("actors %v\nwant   %v", actors, wantActors)
	}
	if evs[5].Actor["request_id"] != "req-activate-a" || evs[5].Data["instance_id"] != "host-a" {
		t.Errorf("seat.activated %+v", evs[5])
	}
	if d := evs[0].Data; d["tier"] != "pro" || d["max_activations"] != float64(3) || d["expires_at"] != nil ||
		fmt.Sprint(d["limits"]) != "map[projects:3]" || d["issued_to"] != "Ada Lovelace <ada@example.com>" {
		t.Errorf("license.issued data %v", d)
	}
	if d := evs[3].Data; d["expires_at"] != "2031-01-02T03:04:05Z" || d["max_activations"] != float64(3) {
		t.Errorf("license.terms_updated data %v", d)
	}
	if d := evs[7].Data; d["metric"] != "projects" || d["used"] != float64(3) || d["limit"] != float64(3) {
		t.Errorf("usage.limit_reached data %v", d)
	}
	reasons := []string{}
	for _, e := range evs {
		if e.Type == "seat.deactivated" {
			reasons = append(reasons, fmt.Sprint(e.Data["instance_id"], ":", e.Data["reason"]))
		}
	}
	if want := []string{"host-b:admin", "host-a:client", "host-c:license_deleted"}; !slices.Equal(reasons, want) {
		t.Errorf("seat.deactivated %v, want %v", reasons, want)
	}
	// No secret in any event: the token never appears.
	all := a.Get("/v1/events?limit=1000&license_key="+url.QueryEscape(key)).Expect(t, 200)
	if strings.Contains(string(all.Body), tok) {
		t.Fatal("an event holds an activation token")
	}
	// One event by id: the same bytes as in the list.
	one := a.Get("/v1/events/"+evs[0].ID).Expect(t, 200)
	if !strings.Contains(string(all.Body), string(one.Body)) {
		t.Fatalf("GET /v1/events/{id} %s is not the listed event", one.Body)
	}
	if keys := one.Keys(t); !slices.Equal(keys, []string{"id", "type", "created_at", "actor", "data"}) {
		t.Fatalf("envelope keys %v", keys)
	}
}

// Releases publish and unpublish, each once.
func TestReleaseChangesAreEvents(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a := admin(t, s)
	prod := product("events-rel")
	id := a.Post("/v1/register-release", map[string]any{"product_id": prod, "version": "1.2.3", "platform": "linux",
		"artifact_url": "https://example.com/a", "checksum": "sha256:00"}).Expect(t, 200).JSON(t)["id"]
	a.Post("/v1/unpublish-release", map[string]any{"id": id}).Expect(t, 200)
	a.Post("/v1/unpublish-release", map[string]any{"id": id}).Expect(t, 200)
	deadline := time.Now().Add(30 * time.Second)
	for {
		var mine []logEvent
		for _, e := range listEvents(t, a, url.Values{"type": {"release."}, "limit": {"1000"}}).Events {
			if e.Data["product_id"] == prod {
				mine = append(mine, e)
			}
		}
		if len(mine) == 2 {
			inMadeOrder(mine)
			if mine[0].Type != "release.published" || mine[1].Type != "release.unpublished" ||
				mine[0].Data["id"] != id || mine[0].Data["version"] != "1.2.3" || mine[0].Data["channel"] != "stable" {
				t.Fatalf("release events %+v", mine)
			}
			return
		}
		if len(mine) > 2 || time.Now().After(deadline) {
			t.Fatalf("release events %v", types(mine))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The log pages newest first with starting_after, filters by type (exact and prefix) and
// time, and refuses bad parameters with a message naming them.
func TestEventLogPagesAndFilters(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a := admin(t, s)
	key := issueLicense(t, a, lic(product("events-page")))
	for i := range 6 {
		a.Post("/v1/admin/update-notes", map[string]any{"key": key, "notes": fmt.Sprint("n", i)}).Expect(t, 200)
	}
	all := eventsOf(t, a, key, 7)
	slices.Reverse(all) // newest first
	// The pages are the one page of the whole listing, in its order.
	listed := listEvents(t, a, url.Values{"license_key": {key}, "limit": {"1000"}}).Events
	var paged []logEvent
	q := url.Values{"license_key": {key}, "limit": {"3"}}
	for range 4 {
		p := listEvents(t, a, q)
		paged = append(paged, p.Events...)
		if !p.HasMore {
			break
		}
		q.Set("starting_after", p.Events[len(p.Events)-1].ID)
	}
	if len(paged) != 7 || !slices.EqualFunc(paged, listed, func(x, y logEvent) bool { return x.ID == y.ID }) {
		t.Fatalf("pages %v, want %v", types(paged), types(listed))
	}
	if p := listEvents(t, a, url.Values{"license_key": {key}, "type": {"license.notes_updated"}}); len(p.Events) != 6 {
		t.Fatalf("exact type: %v", types(p.Events))
	}
	if p := listEvents(t, a, url.Values{"license_key": {key}, "type": {"license."}}); len(p.Events) != 7 {
		t.Fatalf("prefix: %v", types(p.Events))
	}
	if p := listEvents(t, a, url.Values{"license_key": {key}, "type": {"seat."}}); len(p.Events) != 0 {
		t.Fatalf("another prefix: %v", types(p.Events))
	}
	if p := listEvents(t, a, url.Values{"license_key": {key}, "since": {all[0].CreatedAt}}); len(p.Events) != 1 || p.Events[0].ID != all[0].ID {
		t.Fatalf("since the newest: %v", types(p.Events))
	}
	if p := listEvents(t, a, url.Values{"license_key": {key}, "until": {all[6].CreatedAt}}); len(p.Events) != 1 || p.Events[0].ID != all[6].ID {
		t.Fatalf("until the oldest: %v", types(p.Events))
	}
	// The bounds are inclusive at any precision: created_at holds microseconds, so a since
	// 1 ns or 999 ns after the newest event lists nothing, an until as far after the
	// oldest lists it. RFC 3339's lowercase t and z are taken.
	newest, err := time.Parse(time.RFC3339Nano, all[0].CreatedAt)
	if err != nil {
		t.Fatal(err)
	}
	oldest, err := time.Parse(time.RFC3339Nano, all[6].CreatedAt)
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []time.Duration{1, 999} {
		if p := listEvents(t, a, url.Values{"license_key": {key}, "since": {newest.Add(ns).Format(time.RFC3339Nano)}}); len(p.Events) != 0 {
			t.Fatalf("since %d ns after the newest: %v", ns, types(p.Events))
		}
		if p := listEvents(t, a, url.Values{"license_key": {key}, "until": {oldest.Add(ns).Format(time.RFC3339Nano)}}); len(p.Events) != 1 {
			t.Fatalf("until %d ns after the oldest: %v", ns, types(p.Events))
		}
	}
	if p := listEvents(t, a, url.Values{"license_key": {key}, "since": {strings.ToLower(all[0].CreatedAt)}}); len(p.Events) != 1 || p.Events[0].ID != all[0].ID {
		t.Fatalf("since the newest in lowercase: %v", types(p.Events))
	}
	for _, tc := range []struct{ query, msg string }{
		{"since=2030-01-02T03:04:05%2B24:00", "since must be an RFC 3339 time"},
		{"until=2030-01-02T03:04:05,5Z", "until must be an RFC 3339 time"},
		{"limit=0", "limit must be an integer between 1 and 1000"},
		{"limit=1001", "limit must be an integer between 1 and 1000"},
		{"type=license", `type must be an event type or a prefix of one ending in "."`},
		{"type=nope.", `type must be an event type or a prefix of one ending in "."`},
		// What no log holds, as an endpoint's events list refuses it.
		{"type=ping", `type must be an event type or a prefix of one ending in "."`},
		{"type=tenant.deleted", `type must be an event type or a prefix of one ending in "."`},
		{"type=tenant.", `type must be an event type or a prefix of one ending in "."`},
		{"since=yesterday", "since must be an RFC 3339 time"},
		{"until=2026-13-01T00:00:00Z", "until must be an RFC 3339 time"},
		{"starting_after=evt_nope", "starting_after must be the id of an event in the log"},
		{"starting_after=evt_aaaaaaaaaaaaaaaaaaaaaaaaaa", "starting_after must be the id of an event in the log"},
	} {
		a.Get("/v1/events?"+tc.query).ExpectError(t, 400, tc.msg)
	}
	anon(t, s).Get("/v1/events").Expect(t, 403)
	a.Get("/v1/events/evt_aaaaaaaaaaaaaaaaaaaaaaaaaa").ExpectError(t, 404, "Event not found")
	a.Get("/v1/events/nope").ExpectError(t, 404, "Event not found")
}

// Hosted: a tenant sees its own events only; another tenant's event is 404, and the
// admin key is not a tenant credential.
func TestEventLogIsTenantScoped(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	t1, t2 := newTenant(t, s), newTenant(t, s)
	key := issueLicense(t, t1, lic(product("events-tenant")))
	evs := eventsOf(t, t1, key, 1)
	if evs[0].Actor["type"] != "api_key" {
		t.Fatalf("actor %v", evs[0].Actor)
	}
	t2.Get("/v1/events/"+evs[0].ID).ExpectError(t, 404, "Event not found")
	if p := listEvents(t, t2, url.Values{"license_key": {key}}); len(p.Events) != 0 {
		t.Fatalf("another tenant lists %v", types(p.Events))
	}
	t2.Get("/v1/events?starting_after="+evs[0].ID).ExpectError(t, 400, "starting_after must be the id of an event in the log")
	admin(t, s).Get("/v1/events").Expect(t, 403)
	t1.Get("/v1/events/"+evs[0].ID).Expect(t, 200)
}

// A storefront sale is a storefront.delivery event (actor storefront) and the license it
// issued a license.issued event made by the storefront, each once.
func TestStorefrontSaleIsOneDeliveryEventAndOneIssue(t *testing.T) {
	t.Parallel()
	s, _ := storefrontStack(t)
	c := newTenant(t, s)
	sh := connectShop(t, c)
	prod, link := product("events-sf"), uniq("plink_")
	sh.mapping(map[string]any{"payment_link": link, "product_id": prod, "tier": "pro"})
	sess := newSession(link, uniq("buyer")+"@example.com")
	evID := uniq("evt_")
	sh.deliver(event(evID, "checkout.session.completed", sess)).ExpectBody(t, `{"received":true}`)
	d := sh.await(evID, outcome("issued", "sent"))
	key := d["license_key"].(string)
	sh.deliver(event(evID, "checkout.session.completed", sess)).ExpectBody(t, `{"received":true}`) // a duplicate: nothing moves

	evs := eventsOf(t, c, key, 2)
	if evs[0].Type != "license.issued" || evs[0].Actor["type"] != "storefront" || evs[0].Data["product_id"] != prod {
		t.Fatalf("issue event %+v", evs[0])
	}
	if e := evs[1]; e.Type != "storefront.delivery" || e.Actor["type"] != "storefront" || e.Data["outcome"] != "issued" ||
		e.Data["checkout_session_id"] != sess.ID || e.Data["license_key"] != key || e.Data["delivery_id"] != fmt.Sprint(d["id"]) {
		t.Fatalf("delivery event %+v", e)
	}
}

// Hosted billing: a plan moved by Stripe's event is billing.plan_changed (actor system),
// a key rotation api_key.rotated (the tenant's key), each once; the key is in neither.
func TestBillingAndKeyChangesAreEvents(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	c, tenant := hostedTenant(t, s)
	upgrade(t, s, tenant)
	old := c.Token
	fresh, _ := c.Post("/v1/rotate-api-key", nil).Expect(t, 200).JSON(t)["apiKey"].(string)
	c.Token = fresh
	deadline := time.Now().Add(60 * time.Second)
	for {
		p := listEvents(t, newClient(t, c.Base, c.Token), url.Values{"type": {"billing.plan_changed"}})
		k := listEvents(t, newClient(t, c.Base, c.Token), url.Values{"type": {"api_key.rotated"}})
		if len(p.Events) > 1 || len(k.Events) > 1 {
			t.Fatalf("plan events %v, key events %v", types(p.Events), types(k.Events))
		}
		if len(p.Events) == 1 && len(k.Events) == 1 {
			if e := p.Events[0]; e.Actor["type"] != "system" || e.Data["plan"] != "pro" || e.Data["status"] != "active" {
				t.Fatalf("plan event %+v", e)
			}
			if e := k.Events[0]; e.Actor["type"] != "api_key" || len(e.Data) != 0 {
				t.Fatalf("key event %+v", e)
			}
			body := string(c.Get("/v1/events?limit=1000").Expect(t, 200).Body)
			if strings.Contains(body, old) || strings.Contains(body, fresh) {
				t.Fatal("an event holds an API key")
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 60 s: plan events %v, key events %v", types(p.Events), types(k.Events))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// An imported revoked license is license.issued then license.revoked, in that order, by the
// import's actor and request, so a consumer of the events (a CRM fed by webhooks) reaches
// the state the license is in; importing it again records nothing.
func TestImportedRevokedLicenseIsIssuedThenRevoked(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a := admin(t, s)
	prod := product("events-import")
	item := map[string]any{"key": uniq("IMPORT-REVOKED-"), "product_id": prod, "tier": "pro", "issued_to": "z@example.com", "status": "revoked"}
	a.Do("POST", "/v1/licenses/import", map[string]any{"licenses": []any{item}}, "X-Request-Id", "req-import-revoked").Expect(t, 200)
	key := item["key"].(string)
	if st := a.Get("/v1/admin/license/"+url.PathEscape(key)).Expect(t, 200).JSON(t)["status"]; st != "revoked" {
		t.Fatalf("imported license status %v", st)
	}
	if r := a.Post("/v1/licenses/import", map[string]any{"licenses": []any{item}}).Expect(t, 200).JSON(t); r["unchanged"] != float64(1) {
		t.Fatalf("import again: %v", r)
	}
	// A change after the second import: its event is the third, so an event of the second
	// import would be in the list before it.
	a.Post("/v1/admin/update-notes", map[string]any{"key": key, "notes": "after the import"}).Expect(t, 200)
	evs := eventsOf(t, a, key, 3)
	if got := types(evs); !slices.Equal(got, []string{"license.issued", "license.revoked", "license.notes_updated"}) {
		t.Fatalf("events %v", got)
	}
	for _, e := range evs[:2] {
		if e.Actor["type"] != "admin" || e.Actor["request_id"] != "req-import-revoked" || e.Data["key"] != key || e.Data["product_id"] != prod {
			t.Errorf("%s: actor %v data %v", e.Type, e.Actor, e.Data)
		}
	}
}

// The log's license_key filter finds a license's events by every spelling that finds the
// license (licensing.md): lowercase, without dashes, O for 0; and an imported key shaped
// like a Keyhouse key by the string imported, though it is stored in its issued form.
func TestEventLogFindsALicenseByEverySpellingOfItsKey(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a := admin(t, s)
	prod := product("events-spelling")
	key := issueLicense(t, a, lic(prod))
	eventsOf(t, a, key, 1)
	imported := "IMPORTREV-" + strconv.FormatInt(time.Now().UnixNano(), 10)[:19]
	a.Post("/v1/licenses/import", map[string]any{"licenses": []any{map[string]any{"key": imported, "product_id": prod, "tier": "pro", "issued_to": "z@example.com"}}}).Expect(t, 200)
	stored := a.Get("/v1/admin/license/"+imported).Expect(t, 200).JSON(t)["key"].(string)
	if stored == imported {
		t.Fatalf("the imported key %s was stored as given; the test wants one licensing rewrites", imported)
	}
	eventsOf(t, a, stored, 1)
	for _, spelling := range []string{strings.ToLower(key), strings.ReplaceAll(key, "-", ""), strings.ReplaceAll(key, "0", "O"), imported, strings.ToLower(imported)} {
		a.Get("/v1/admin/license/"+url.PathEscape(spelling)).Expect(t, 200)
		if p := listEvents(t, a, url.Values{"license_key": {spelling}}); len(p.Events) != 1 || p.Events[0].Type != "license.issued" {
			t.Errorf("license_key=%s: %v", spelling, types(p.Events))
		}
	}
}

// A write that changes nothing records nothing (events.md), and answers as a change
// would: terms, limits and expiry the license has, the notes it has, a reset of usage
// nothing used.
func TestWritesThatChangeNothingRecordNothing(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a := admin(t, s)
	key := issueLicense(t, a, lic(product("events-noop"), "max_activations", 3, "limits", map[string]any{"projects": 2}, "notes", "same"))
	terms := a.Post("/v1/admin/update-license-terms", map[string]any{"key": key, "max_activations": 3}).Expect(t, 200).JSON(t)
	if terms["max_activations"] != float64(3) || fmt.Sprint(terms["limits"]) != "map[projects:2]" || terms["expires_at"] != nil {
		t.Fatalf("update-license-terms answered %v", terms)
	}
	a.Post("/v1/admin/update-license-terms", map[string]any{"key": key, "limits": map[string]any{"projects": 2}, "expires_at": nil}).Expect(t, 200)
	a.Post("/v1/admin/update-notes", map[string]any{"key": key, "notes": "same"}).Expect(t, 200).ExpectBody(t, `{"key":"`+key+`","notes":"same"}`)
	a.Post("/v1/admin/reset-usage", map[string]any{"key": key}).Expect(t, 200)
	if u := a.Post("/v1/admin/reset-usage", map[string]any{"key": key, "metric": "projects"}).Expect(t, 200).JSON(t)["usage"]; fmt.Sprint(u) != "map[projects:0]" {
		t.Fatalf("reset-usage of projects answered usage %v", u)
	}
	// A change: its event comes after any the writes above recorded.
	a.Post("/v1/admin/update-notes", map[string]any{"key": key, "notes": "changed"}).Expect(t, 200)
	if got := types(eventsOf(t, a, key, 2)); !slices.Equal(got, []string{"license.issued", "license.notes_updated"}) {
		t.Fatalf("events %v", got)
	}
}
