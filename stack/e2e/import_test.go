package e2e

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/stack"
)

// importedShapes are the key shapes of the systems vendors migrate from: Lemon Squeezy's
// UUIDs, Keygen's dashed hex groups with a version suffix, Gumroad's four groups of eight,
// and a lower-case key shaped like a Keyhouse key, which must still verify as given.
var importedShapes = []func(i int) string{
	func(i int) string { return fmt.Sprintf("%08X-5104-4067-A91D-%012X", i, time.Now().UnixNano()) },
	func(i int) string {
		return fmt.Sprintf("C1B6DE-%06X-DE1529-%06X-4AF593-V3", i, time.Now().UnixNano()&0xffffff)
	},
	func(i int) string {
		return fmt.Sprintf("85DB562A-%08X-A2335A6B-%08X", i, time.Now().UnixNano()&0xffffffff)
	},
	func(i int) string {
		return strings.ToLower(fmt.Sprintf("7kq2-m9xd-4hrt-0bwn-zc3e-%04d-%04X", i%10000, time.Now().UnixNano()&0xffff))
	},
}

// importItem is one license of an import body; every fourth is expired, every seventh
// revoked, every fifth carries usage.
func importItem(product string, i int, key string) map[string]any {
	item := map[string]any{
		"key": key, "product_id": product, "tier": "pro", "issued_to": fmt.Sprintf("buyer%d@example.com", i),
		"issued_at": "2024-03-01T10:00:00Z", "limits": map[string]any{"seats": 10},
		"max_activations": 3, "notes": "imported",
	}
	switch {
	case i%7 == 0:
		item["status"] = "revoked"
	case i%4 == 0:
		item["expires_at"] = "2025-01-01T00:00:00Z"
	default:
		item["expires_at"] = "2099-01-01T00:00:00Z"
	}
	if i%5 == 0 {
		item["usage"] = map[string]any{"seats": 4}
	}
	return item
}

func expectUnknownKey(t *testing.T, s *stack.Stack, key string) {
	t.Helper()
	anon(t, s).Post("/v1/verify-license", map[string]string{"key": key}).Expect(t, 404).ExpectBody(t, verifyNotFound)
}

func importBody(items []map[string]any, onConflict string) map[string]any {
	return map[string]any{"licenses": items, "on_conflict": onConflict}
}

// TestImportTenThousandLicensesVerifyAsGiven imports 10,000 licenses in calls of 1,000:
// each key verifies exactly as given, expired and revoked ones answer as api.md says, and
// importing the same licenses again changes nothing.
func TestImportTenThousandLicensesVerifyAsGiven(t *testing.T) {
	t.Parallel()
	// A stack of its own: its tens of thousands of license.issued events would otherwise
	// queue ahead of every event other tests on the shared stack wait for.
	s := startStack(t, nil)
	t.Cleanup(s.Stop)
	a := admin(t, s)
	product := product("import-10k")
	const total, batch = 10000, 1000
	items := make([]map[string]any, total)
	for i := range items {
		items[i] = importItem(product, i, importedShapes[i%len(importedShapes)](i))
	}
	for start := 0; start < total; start += batch {
		resp := a.Post("/v1/licenses/import", importBody(items[start:start+batch], "fail")).Expect(t, 200)
		if got := strings.Join(resp.Keys(t), ","); got != "imported,unchanged,skipped,invalid,results" {
			t.Fatalf("fields %s", got)
		}
		if body := resp.JSON(t); body["imported"] != float64(batch) || body["invalid"] != 0.0 {
			t.Fatalf("batch at %d: %.300s", start, resp.Body)
		}
	}
	list := a.Get("/v1/list-licenses?product_id="+product+"&limit=1").Expect(t, 200).JSON(t)
	if list["total"] != float64(total) {
		t.Fatalf("list-licenses total %v, want %d", list["total"], total)
	}

	// Every key, exactly as given, from clients of their own (the Validation tier is per IP).
	var wg sync.WaitGroup
	errs := make(chan string, total)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			var c *Client
			for i := w; i < total; i += 4 {
				if (i/4)%500 == 0 {
					c = anon(t, s)
				}
				r := c.Post("/v1/verify-license", map[string]string{"key": items[i]["key"].(string)})
				want, msg := 200, ""
				switch {
				case i%7 == 0:
					want, msg = 403, "License is not active"
				case i%4 == 0:
					want, msg = 403, "License has expired"
				}
				if r.Status != want || (msg != "" && !strings.Contains(string(r.Body), `"error":"`+msg+`"`)) {
					errs <- fmt.Sprintf("item %d (%s): %d %s", i, items[i]["key"], r.Status, r.Body)
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}

	// The imported terms and usage, as the admin sees them.
	d := a.Get("/v1/admin/license/"+items[5]["key"].(string)).Expect(t, 200).JSON(t)
	if d["issued_at"] != "2024-03-01T10:00:00Z" || d["max_activations"] != 3.0 || d["notes"] != "imported" ||
		fmt.Sprint(d["usage"]) != "map[seats:4]" || d["issued_to"] != "buyer5@example.com" {
		t.Fatalf("admin/license %v", d)
	}

	// A second import of the same file changes nothing.
	for start := 0; start < total; start += batch {
		body := a.Post("/v1/licenses/import", importBody(items[start:start+batch], "fail")).Expect(t, 200).JSON(t)
		if body["unchanged"] != float64(batch) || body["imported"] != 0.0 {
			t.Fatalf("second import at %d: %v imported, %v unchanged", start, body["imported"], body["unchanged"])
		}
	}
	if got := a.Get("/v1/list-licenses?product_id="+product+"&limit=1").Expect(t, 200).JSON(t)["total"]; got != float64(total) {
		t.Fatalf("total after second import %v", got)
	}
	d = a.Get("/v1/admin/license/"+items[5]["key"].(string)).Expect(t, 200).JSON(t)
	if fmt.Sprint(d["usage"]) != "map[seats:4]" {
		t.Fatalf("usage after second import %v", d["usage"])
	}
}

// TestImportOnConflictFailAppliesNothingAndSkipReportsTheItem pins on_conflict.
func TestImportOnConflictFailAppliesNothingAndSkipReportsTheItem(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a := admin(t, s)
	product := product("import-conflict")
	existing := importItem(product, 1, "EXISTING-"+product)
	a.Post("/v1/licenses/import", importBody([]map[string]any{existing}, "")).Expect(t, 200)

	changed := importItem(product, 1, "EXISTING-"+product)
	changed["tier"] = "enterprise"
	fresh := importItem(product, 2, "FRESH-"+product)
	a.Post("/v1/licenses/import", importBody([]map[string]any{fresh, changed}, "fail")).
		ExpectError(t, 409, `licenses[1].key already exists with other terms; on_conflict is "fail", so nothing was imported`)
	expectUnknownKey(t, s, "FRESH-"+product)

	resp := a.Post("/v1/licenses/import", importBody([]map[string]any{fresh, changed}, "skip")).Expect(t, 200)
	resp.ExpectBody(t, `{"imported":1,"unchanged":0,"skipped":1,"invalid":0,"results":[`+
		`{"index":0,"key":"FRESH-`+product+`","result":"imported"},`+
		`{"index":1,"key":"EXISTING-`+product+`","result":"skipped","error":"key already exists with other terms"}]}`)
	if tier := anon(t, s).Post("/v1/verify-license", map[string]string{"key": "EXISTING-" + product}).Expect(t, 200).JSON(t)["tier"]; tier != "pro" {
		t.Fatalf("skipped item changed the license: tier %v", tier)
	}
	a.Post("/v1/licenses/import", importBody([]map[string]any{fresh}, "sometimes")).
		ExpectError(t, 400, "on_conflict must be fail or skip")
}

// TestImportBadItemsGetErrorsNamingTheField: a bad item is reported, the others import.
func TestImportBadItemsGetErrorsNamingTheField(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a := admin(t, s)
	product := product("import-bad")
	good := importItem(product, 1, "GOOD-KEY-"+product)
	with := func(k string, v any) map[string]any {
		item := importItem(product, 2, fmt.Sprintf("BAD-%s-%s", k, product))
		if v == nil {
			delete(item, k)
		} else {
			item[k] = v
		}
		return item
	}
	bad := []struct {
		item map[string]any
		want string
	}{
		{with("key", "short"), "key must be 8 to 200 characters"},
		{with("key", strings.Repeat("K", 201)), "key must be 8 to 200 characters"},
		{with("key", "ключ-ключ-ключ"), "key must be printable ASCII (character 1 is not)"},
		{with("tier", nil), "tier is required"},
		{with("product_id", ""), "product_id is required"},
		{with("issued_to", nil), "issued_to is required"},
		{with("expires_at", "next year"), "expires_at must be an ISO 8601 timestamp (e.g. 2027-01-31T00:00:00Z) or null"},
		{with("issued_at", 12), "issued_at must be an ISO 8601 timestamp (e.g. 2027-01-31T00:00:00Z) or null"},
		{with("status", "suspended"), "status must be active or revoked"},
		{with("limits", map[string]any{"storage": 1}), "Unknown limit key: storage"},
		{with("usage", map[string]any{"users": 1}), "usage.users: the metric must be a key of limits"},
		{with("usage", map[string]any{"seats": -1}), "usage.seats must be a whole number of at least 0 and at most 9007199254740991"},
		{with("max_activations", 0), "max_activations must be a positive integer of at most 2147483647 or null (unlimited)"},
		{good, "key is the same key as item 0 of this request"},
		// A field of the wrong JSON type is this item's problem too, not the call's.
		{with("key", 12345678), "key must be a string"},
		{with("tier", 3), "tier must be a string"},
		{with("status", true), "status must be a string"},
		{with("limits", []any{"seats"}), "limits must be an object"},
		{with("usage", 4), "usage must be an object"},
		{with("issued_at", "2099-01-01T00:00:00Z"), "issued_at must not be later than the time of the import"},
	}
	items := []map[string]any{good}
	for _, b := range bad {
		items = append(items, b.item)
	}
	body := a.Post("/v1/licenses/import", importBody(items, "skip")).Expect(t, 200).JSON(t)
	if body["imported"] != 1.0 || body["invalid"] != float64(len(bad)) {
		t.Fatalf("counts %v", body)
	}
	results := body["results"].([]any)
	for i, b := range bad {
		r := results[i+1].(map[string]any)
		if r["result"] != "invalid" || r["error"] != b.want {
			t.Errorf("item %d: %v, want invalid %q", i+1, r, b.want)
		}
	}
	if r := results[len(bad)-4].(map[string]any); r["key"] != "BAD-tier-"+product {
		t.Errorf("a mistyped item's result names key %v, want the key as given", r["key"])
	}
	anon(t, s).Post("/v1/verify-license", map[string]string{"key": "GOOD-KEY-" + product}).Expect(t, 200)
	expectUnknownKey(t, s, "BAD-tier-"+product)
	expectUnknownKey(t, s, "BAD-issued_at-"+product)
	// Control characters are the input policy's, for the whole request.
	a.Post("/v1/licenses/import", importBody([]map[string]any{with("key", "tab\there-key")}, "skip")).
		ExpectError(t, 400, "key must not contain control characters")

	a.Post("/v1/licenses/import", map[string]any{"licenses": []any{}}).ExpectError(t, 400, "licenses is required (1 to 1000 licenses)")
	many := make([]map[string]any, 1001)
	for i := range many {
		many[i] = good
	}
	a.Post("/v1/licenses/import", importBody(many, "skip")).ExpectError(t, 400, "licenses: at most 1000 per call")
	anon(t, s).Post("/v1/licenses/import", importBody([]map[string]any{good}, "skip")).ExpectError(t, 403, "Unauthorized")
}

// TestImportHostedQuotaAndTenantIsolation: imports count against the issuance quota, a
// product belongs to the tenant that used it first, and another tenant's key stays unseen.
func TestImportHostedQuotaAndTenantIsolation(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	owner, other := newTenant(t, s), newTenant(t, s)
	product := product("import-hosted")
	items := func(n int, prefix string) []map[string]any {
		out := make([]map[string]any, n)
		for i := range out {
			out[i] = importItem(product, 1, fmt.Sprintf("%s-%02d-%s", prefix, i, product))
			out[i]["expires_at"] = "2099-01-01T00:00:00Z"
		}
		return out
	}
	// Free is 5 active licenses: 6 at once import nothing.
	owner.Post("/v1/licenses/import", importBody(items(6, "Q"), "fail")).ExpectError(t, 403, "License issuance quota exceeded")
	expectUnknownKey(t, s, "Q-00-"+product)
	// Expired and revoked ones hold no quota.
	batch := items(5, "Q")
	expired := importItem(product, 1, "EXPIRED-"+product)
	expired["expires_at"] = "2020-01-01T00:00:00Z"
	revoked := importItem(product, 7, "REVOKED-"+product)
	body := owner.Post("/v1/licenses/import", importBody(append(batch, expired, revoked), "fail")).Expect(t, 200).JSON(t)
	if body["imported"] != 7.0 {
		t.Fatalf("import within quota: %v", body)
	}
	owner.Post("/v1/licenses/import", importBody(items(1, "MORE"), "fail")).ExpectError(t, 403, "License issuance quota exceeded")

	// The product is the owner's; the owner's keys are not the other tenant's.
	resp := other.Post("/v1/licenses/import", importBody(items(1, "OTHER"), "skip")).Expect(t, 200)
	resp.ExpectBody(t, `{"imported":0,"unchanged":0,"skipped":0,"invalid":1,"results":[`+
		`{"index":0,"key":"OTHER-00-`+product+`","result":"invalid","error":"product_id is owned by a different tenant"}]}`)
	other.Get("/v1/admin/license/Q-00-"+product).ExpectError(t, 404, "License key not found")
	mine := importItem("other-"+product, 1, "Q-00-"+product)
	mine["expires_at"] = "2099-01-01T00:00:00Z"
	// Said plainly: the key is not this tenant's license with other terms.
	other.Post("/v1/licenses/import", importBody([]map[string]any{mine}, "skip")).Expect(t, 200).
		ExpectBody(t, `{"imported":0,"unchanged":0,"skipped":1,"invalid":0,"results":[`+
			`{"index":0,"key":"Q-00-`+product+`","result":"skipped","error":"key is held by another tenant"}]}`)
	other.Post("/v1/licenses/import", importBody([]map[string]any{mine}, "fail")).
		ExpectError(t, 409, `licenses[0].key is held by another tenant; on_conflict is "fail", so nothing was imported`)
}

// Hosted, an import claims the products of the licenses it writes and no other: a call
// refused (409 under on_conflict fail, 403 over the quota) or an item skipped leaves the
// product it named free for another tenant.
func TestImportRefusedLeavesTheProductsFree(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	a, _ := hostedTenant(t, s)
	b, _ := hostedTenant(t, s)
	active := func(product, key string) map[string]any {
		item := importItem(product, 1, key)
		item["expires_at"] = "2099-01-01T00:00:00Z"
		return item
	}
	mine := product("import-refused-mine")
	kept := "KEPT-" + mine
	a.Post("/v1/licenses/import", importBody([]map[string]any{active(mine, kept)}, "fail")).Expect(t, 200)

	conflicted := product("import-refused-409")
	a.Post("/v1/licenses/import", importBody([]map[string]any{active(conflicted, "NEW-"+conflicted), active(conflicted, kept)}, "fail")).
		ExpectError(t, 409, `licenses[1].key already exists with other terms; on_conflict is "fail", so nothing was imported`)
	skipped := product("import-refused-skip")
	a.Post("/v1/licenses/import", importBody([]map[string]any{active(skipped, kept)}, "skip")).Expect(t, 200).
		ExpectBody(t, `{"imported":0,"unchanged":0,"skipped":1,"invalid":0,"results":[{"index":0,"key":"`+kept+`","result":"skipped","error":"key already exists with other terms"}]}`)
	overQuota := product("import-refused-quota")
	var five []map[string]any
	for i := range 5 {
		five = append(five, active(overQuota, fmt.Sprintf("Q%d-%s", i, overQuota)))
	}
	a.Post("/v1/licenses/import", importBody(five, "fail")).ExpectError(t, 403, "License issuance quota exceeded")

	for _, p := range []string{conflicted, skipped, overQuota} {
		issueLicense(t, b, lic(p))
		a.Post("/v1/licenses/import", importBody([]map[string]any{active(p, "LATE-"+p)}, "fail")).Expect(t, 200).
			ExpectBody(t, `{"imported":0,"unchanged":0,"skipped":0,"invalid":1,"results":[{"index":0,"key":"LATE-`+p+`","result":"invalid","error":"product_id is owned by a different tenant"}]}`)
	}
}

// TestImportConcurrentCallsKeepTheQuotaAndNeverFail: concurrent imports of a hosted
// tenant (each of a license of its own, and all of one shared license) never pass the
// Free quota of 5 and never answer anything but 200 or the quota's 403; the shared key
// ends up one license, imported once and unchanged for every other call.
func TestImportConcurrentCallsKeepTheQuotaAndNeverFail(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	tenant := newTenant(t, s)
	product := product("import-race")
	shared := importItem(product, 1, "SHARED-"+product)
	shared["expires_at"] = "2099-01-01T00:00:00Z"
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	results := map[string]int{}
	for i := 0; i < 12; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			own := importItem(product, 1, fmt.Sprintf("OWN-%02d-%s", i, product))
			own["expires_at"] = "2099-01-01T00:00:00Z"
			items := []map[string]any{own}
			if i%2 == 0 {
				items = []map[string]any{shared}
			}
			r := tenant.Post("/v1/licenses/import", importBody(items, "fail"))
			mu.Lock()
			defer mu.Unlock()
			statuses[r.Status]++
			if r.Status == 200 {
				for _, res := range r.JSON(t)["results"].([]any) {
					results[res.(map[string]any)["result"].(string)]++
				}
			}
		}(i)
	}
	wg.Wait()
	if statuses[200]+statuses[403] != 12 {
		t.Fatalf("statuses %v, want only 200 and 403", statuses)
	}
	list := tenant.Get("/v1/list-licenses?product_id="+product+"&status=active").Expect(t, 200).JSON(t)
	if list["total"] != 5.0 {
		t.Fatalf("%v active licenses after concurrent imports, want the Free quota of 5 (statuses %v, results %v)", list["total"], statuses, results)
	}
	if results["imported"] != 5 {
		t.Fatalf("results %v, want 5 imported", results)
	}
}

// A key the tenant deleted is refused per item, naming why, and nothing is written under
// it: before, the import answered imported and the license verified, but activations
// remembers the deletion for good, so activate answered 404 and the old token's lease
// 403. The refusal holds however the deleted key is spelled and whatever the batch.
func TestImportRefusesAKeyTheTenantDeleted(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a, c := admin(t, s), anon(t, s)
	product := product("import-deleted")
	gone := importItem(product, 1, "GONE-"+product)
	a.Post("/v1/licenses/import", importBody([]map[string]any{gone}, "fail")).Expect(t, 200)
	seat(t, c, "GONE-"+product, "old-machine")
	a.Delete("/v1/delete-license", map[string]string{"key": "GONE-" + product}).Expect(t, 200)

	fresh := importItem(product, 2, "FRESH-"+product)
	a.Post("/v1/licenses/import", importBody([]map[string]any{gone, fresh}, "fail")).Expect(t, 200).
		ExpectBody(t, `{"imported":1,"unchanged":0,"skipped":0,"invalid":1,"results":[`+
			`{"index":0,"key":"GONE-`+product+`","result":"invalid","error":"key was deleted in Keyhouse and cannot be imported again; import the license under a new key"},`+
			`{"index":1,"key":"FRESH-`+product+`","result":"imported"}]}`)
	expectUnknownKey(t, s, "GONE-"+product)
	c.Post("/v1/activate-license", map[string]string{"key": "GONE-" + product, "instance_id": "new-machine"}).ExpectError(t, 404, "License key not found")
	c.Post("/v1/validate-license", map[string]string{"key": "GONE-" + product, "instance_id": "old-machine"}).Expect(t, 200).ExpectBody(t, `{"valid":false}`)
	seat(t, c, "FRESH-"+product, "new-machine")
}

// A re-import keeps the usage totals Keyhouse has (the item answers unchanged), and the
// documented way to correct one works: reset-usage clears the license's totals, and
// sending the item again writes its own (docs/import.md, Usage).
func TestImportUsageCorrectionThroughResetUsage(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a := admin(t, s)
	product := product("import-usage-fix")
	item := importItem(product, 1, "USE-"+product)
	item["usage"] = map[string]any{"seats": 4}
	a.Post("/v1/licenses/import", importBody([]map[string]any{item}, "fail")).Expect(t, 200)
	item["usage"] = map[string]any{"seats": 9}
	if body := a.Post("/v1/licenses/import", importBody([]map[string]any{item}, "fail")).Expect(t, 200).JSON(t); body["unchanged"] != 1.0 {
		t.Fatalf("re-import with other usage: %v", body)
	}
	usage := func() string {
		return fmt.Sprint(a.Get("/v1/admin/license/USE-"+product).Expect(t, 200).JSON(t)["usage"])
	}
	if u := usage(); u != "map[seats:4]" {
		t.Fatalf("usage after a re-import %s, want the total kept (4)", u)
	}
	a.Post("/v1/admin/reset-usage", map[string]string{"key": "USE-" + product}).Expect(t, 200)
	a.Post("/v1/licenses/import", importBody([]map[string]any{item}, "fail")).Expect(t, 200)
	if u := usage(); u != "map[seats:9]" {
		t.Fatalf("usage after reset-usage and the import again %s, want 9", u)
	}
}

// TestImportKeepsWhatItCannotStoreOut: a usage total beyond 2^53-1 would be stored as a
// nearby double (9007199254740993 as 9007199254740992), so the item is refused naming the
// field and the bound, as issue-license refuses such a limit; the largest exact total
// imports. issued_at 0001-01-01T00:00:00Z is an instant like any other (it had been taken
// for "absent" and replaced by the import's time), and timestamps are RFC 3339's.
func TestImportKeepsWhatItCannotStoreOut(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a := admin(t, s)
	product := product("import-exact")
	item := func(key, extra string) string {
		return fmt.Sprintf(`{"key":%q,"product_id":%q,"tier":"pro","issued_to":"x","limits":{"seats":100}%s}`, key+"-"+product, product, extra)
	}
	body := `{"on_conflict":"skip","licenses":[` + strings.Join([]string{
		item("HUGE-USAGE-1", `,"usage":{"seats":9007199254740993}`),
		item("HUGE-USAGE-2", `,"usage":{"seats":18446744073709551616}`),
		item("MAX-USAGE", `,"usage":{"seats":9007199254740991}`),
		item("YEAR-ONE", `,"issued_at":"0001-01-01T00:00:00Z"`),
		item("LOWER-CASE", `,"issued_at":"2024-03-01t10:00:00z","expires_at":"2099-01-01t00:00:00z"`),
		item("OFFSET-24", `,"issued_at":"2024-03-01T10:00:00+24:00"`),
	}, ",") + `]}`
	huge := "usage.seats must be a whole number of at least 0 and at most 9007199254740991"
	a.Post("/v1/licenses/import", body).Expect(t, 200).ExpectBody(t, `{"imported":3,"unchanged":0,"skipped":0,"invalid":3,"results":[`+
		`{"index":0,"key":"HUGE-USAGE-1-`+product+`","result":"invalid","error":"`+huge+`"},`+
		`{"index":1,"key":"HUGE-USAGE-2-`+product+`","result":"invalid","error":"`+huge+`"},`+
		`{"index":2,"key":"MAX-USAGE-`+product+`","result":"imported"},`+
		`{"index":3,"key":"YEAR-ONE-`+product+`","result":"imported"},`+
		`{"index":4,"key":"LOWER-CASE-`+product+`","result":"imported"},`+
		`{"index":5,"key":"OFFSET-24-`+product+`","result":"invalid","error":"issued_at must be an ISO 8601 timestamp (e.g. 2027-01-31T00:00:00Z) or null"}]}`)
	expectUnknownKey(t, s, "HUGE-USAGE-1-"+product)
	expectUnknownKey(t, s, "OFFSET-24-"+product)
	if got := string(a.Get("/v1/admin/license/MAX-USAGE-"+product).Expect(t, 200).Body); !strings.Contains(got, `"usage":{"seats":9007199254740991}`) {
		t.Fatalf("the largest exact usage total: %s", got)
	}
	if d := a.Get("/v1/admin/license/YEAR-ONE-"+product).Expect(t, 200).JSON(t); d["issued_at"] != "0001-01-01T00:00:00Z" {
		t.Fatalf("issued_at 0001-01-01T00:00:00Z imported as %v", d["issued_at"])
	}
	if d := a.Get("/v1/admin/license/LOWER-CASE-"+product).Expect(t, 200).JSON(t); d["issued_at"] != "2024-03-01T10:00:00Z" || d["expires_at"] != "2099-01-01T00:00:00Z" {
		t.Fatalf("lowercase t and z: issued_at %v, expires_at %v", d["issued_at"], d["expires_at"])
	}
	// Imported again, year one is compared as any issued_at is: the same is unchanged,
	// year one against another date is other terms.
	again := `{"on_conflict":"skip","licenses":[` + item("YEAR-ONE", `,"issued_at":"0001-01-01T00:00:00Z"`) + `,` +
		item("LOWER-CASE", `,"issued_at":"0001-01-01T00:00:00Z","expires_at":"2099-01-01T00:00:00Z"`) + `]}`
	a.Post("/v1/licenses/import", again).Expect(t, 200).ExpectBody(t, `{"imported":0,"unchanged":1,"skipped":1,"invalid":0,"results":[`+
		`{"index":0,"key":"YEAR-ONE-`+product+`","result":"unchanged"},`+
		`{"index":1,"key":"LOWER-CASE-`+product+`","result":"skipped","error":"key already exists with other terms"}]}`)
}
