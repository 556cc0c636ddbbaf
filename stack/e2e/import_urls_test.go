package e2e

import (
	"encoding/base64"
	"fmt"
	"html"
	"mime"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/stack"
)

// pathKeys are imported keys (any printable ASCII, import.md) that a URL path carries
// only escaped: a "/" (base64), "%" "?" "#" "&", a quote, a backslash and ";" (which
// also break a quoted file name), and dot segments. Each is made unique per call.
func pathKeys() []string {
	n := fmt.Sprintf("%X", time.Now().UnixNano()&0xffffff)
	return []string{
		"aGVsbG8/d29y+bGQ=529843" + n,
		`PCT%41?Q#F&x` + n,
		`QU"OTE\KEY;1` + n,
		"../../x" + n,
	}
}

// importKeys imports each key as an active license of product with one seat taken.
func importKeys(t *testing.T, s *stack.Stack, api *Client, product string, keys []string) {
	t.Helper()
	items := make([]map[string]any, len(keys))
	for i, k := range keys {
		items[i] = map[string]any{"key": k, "product_id": product, "tier": "pro", "issued_to": "holder@example.com",
			"limits": map[string]any{"seats": 5}, "max_activations": 3, "expires_at": "2099-01-01T00:00:00Z"}
	}
	resp := api.Post("/v1/licenses/import", importBody(items, "fail")).Expect(t, 200).JSON(t)
	if resp["imported"] != float64(len(keys)) {
		t.Fatalf("import: %v", resp)
	}
	for _, k := range keys {
		anon(t, s).Post("/v1/activate-license", map[string]string{"key": k, "instance_id": "laptop"}).Expect(t, 200)
	}
}

// Every route with {key} in its path (http.yaml's and the .lic download) finds an
// imported key sent as one escaped segment, in both modes; a "/" sent unescaped still
// separates segments; the .lic file's Content-Disposition names the file well for any
// key; and list-licenses?key= finds the key as given.
func TestImportedKeysReachEveryKeyInPathRoute(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"self", "hosted"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			s := sharedStack(t, mode)
			api := admin(t, s)
			if mode == "hosted" {
				api = newTenant(t, s)
			}
			keys := pathKeys()
			importKeys(t, s, api, product("urlkeys-"+mode), keys)
			pub := anon(t, s)
			for _, key := range keys {
				seg := url.PathEscape(key)
				if d := api.Get("/v1/admin/license/"+seg).Expect(t, 200).JSON(t); d["key"] != key {
					t.Errorf("admin/license/%s answered key %v, want %q", seg, d["key"], key)
				}
				acts, _ := api.Get("/v1/list-activations/"+seg).Expect(t, 200).JSON(t)["activations"].([]any)
				if len(acts) != 1 || acts[0].(map[string]any)["instance_id"] != "laptop" {
					t.Errorf("list-activations/%s: %v", seg, acts)
				}
				exp := pub.Get("/v1/export-license/"+seg).Expect(t, 200)
				if exp.JSON(t)["key"] != key {
					t.Errorf("export-license/%s: %s", seg, exp.Body)
				}
				pub.Post("/v1/verify-license-file", string(exp.Body)).Expect(t, 200)
				off := pub.Get("/v1/export-license/"+seg+"/offline").Expect(t, 200).JSON(t)
				if lic, _ := off["license"].(map[string]any); lic["key"] != key {
					t.Errorf("export-license/%s/offline: %v", seg, off)
				}
				file := pub.Get("/v1/export-license/"+seg+"/file").Expect(t, 200)
				checkLicenseFile(t, pub, key, file)

				// list-licenses?key= (the console's search) finds it as given.
				found := api.Get("/v1/list-licenses?key="+url.QueryEscape(key)).Expect(t, 200).JSON(t)
				if rows, _ := found["licenses"].([]any); found["total"] != float64(1) || len(rows) != 1 || rows[0].(map[string]any)["key"] != key {
					t.Errorf("list-licenses?key=%s: %v", url.QueryEscape(key), found)
				}
			}
			// A "/" the client sent is a segment boundary: the key with its "/" unescaped
			// names no route, and its dot segments are refused as any path's are.
			api.Get("/v1/admin/license/"+strings.Replace(url.PathEscape(keys[0]), "%2F", "/", 1)).ExpectError(t, 404, "Not found")
			api.Get("/v1/export-license/"+strings.ReplaceAll(url.PathEscape(keys[3]), "%2F", "/")+"/offline").
				ExpectError(t, 400, "Invalid URL: the path has an empty, . or .. segment")
		})
	}
}

// checkLicenseFile: the .lic download of key is attachment; its file name is
// license-<key>.lic (filename*, with a plain quoted fallback), and the file verifies.
func checkLicenseFile(t *testing.T, pub *Client, key string, file *Response) {
	t.Helper()
	cd := file.Header.Get("Content-Disposition")
	kind, params, err := mime.ParseMediaType(cd)
	if err != nil || kind != "attachment" || params["filename"] != "license-"+key+".lic" {
		t.Errorf("key %q: Content-Disposition %s reads as %q %v (%v)", key, cd, kind, params, err)
	}
	if m := regexp.MustCompile(`^attachment; filename="([A-Za-z0-9._~+=-]+)"(; filename\*=UTF-8''[A-Za-z0-9%!#$&+.^_` + "`" + `|~-]+)?$`).FindStringSubmatch(cd); m == nil {
		t.Errorf("key %q: Content-Disposition %s is not a safe fallback plus filename*", key, cd)
	}
	v, _ := pub.Post("/v1/verify-license-file-base64", map[string]string{"license_file": base64.StdEncoding.EncodeToString(file.Body)}).
		Expect(t, 200).JSON(t)["valid"].(bool)
	if !v {
		t.Errorf("key %q: the .lic file does not verify", key)
	}
}

// list-licenses?key= takes a Keyhouse key in any spelling the other routes take (lower
// case, no dashes, as the event log's license_key filter does), and still part of one.
func TestListLicensesFindsAKeyhouseKeyByAnySpelling(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	api := admin(t, s)
	key := issueLicense(t, api, map[string]any{"tier": "pro", "product_id": product("spelling"), "issued_to": "x@example.com"})
	for _, spelling := range []string{key, strings.ToLower(key), strings.ReplaceAll(key, "-", ""),
		strings.ToLower(strings.ReplaceAll(key, "-", "")), strings.ReplaceAll(key, "-", " "), key[5:14]} {
		found := api.Get("/v1/list-licenses?key="+url.QueryEscape(spelling)).Expect(t, 200).JSON(t)
		rows, _ := found["licenses"].([]any)
		if found["total"] != float64(1) || len(rows) != 1 || rows[0].(map[string]any)["key"] != key {
			t.Errorf("list-licenses?key=%q: %v, want %s", spelling, found, key)
		}
	}
}

var pageLink = regexp.MustCompile(`(?:href|action)="(/(?:console/licenses|v1/export-license)/[^"]*)"`)

// links returns the console and export links of a page, as a browser reads them.
func links(body string) []string {
	var out []string
	for _, m := range pageLink.FindAllStringSubmatch(body, -1) {
		out = append(out, html.UnescapeString(m[1]))
	}
	return out
}

// The console's license pages and every link the console and the portal build from an
// imported key carry it escaped, and each page and action finds the license: the list's
// search and link, the license page, its notes, revoke and seat pages, the portal and
// its downloads.
func TestConsoleAndPortalLinkImportedKeysEscaped(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	tenant := newTenant(t, s)
	keys := pathKeys()
	importKeys(t, s, tenant, product("urlkeys-console"), keys)
	c := newWebClient(t, s)
	csrf := c.signIn(tenant.Token)
	for _, key := range keys {
		licensePath := "/console/licenses/" + url.PathEscape(key)
		// The search finds it and links to its page.
		list := c.get("/console/licenses?key="+url.QueryEscape(key)).expect(t, 200)
		if l := links(list.Body); !containsString(l, licensePath) {
			t.Errorf("key %q: the search's links %q lack %s", key, l, licensePath)
		}
		p := c.get(licensePath).expect(t, 200)
		if !strings.Contains(html.UnescapeString(p.Body), key) {
			t.Errorf("key %q: the license page does not show it", key)
		}
		for _, l := range links(p.Body) {
			if l != licensePath && !strings.HasPrefix(l, licensePath+"/") && !strings.HasPrefix(l, licensePath+"?") {
				t.Errorf("key %q: the license page links to %s", key, l)
			}
		}
		c.get(licensePath+"/seats/deactivate?instance_id=laptop").expect(t, 200, "Deactivate the seat")
		c.get(licensePath+"/revoke").expect(t, 200, "Revoke this license?")
		c.get(licensePath+"/delete").expect(t, 200)

		// The portal, and its downloads through the API.
		portal := portalPath(t, c, url.PathEscape(key))
		buyer := newWebClient(t, s)
		view := buyer.get(portal).expect(t, 200)
		if !strings.Contains(html.UnescapeString(view.Body), key) {
			t.Errorf("key %q: the portal does not show it", key)
		}
		downloads := links(view.Body)
		wantFile, wantOffline := "/v1/export-license/"+url.PathEscape(key)+"/file", "/v1/export-license/"+url.PathEscape(key)+"/offline"
		if !containsString(downloads, wantFile) || !containsString(downloads, wantOffline) {
			t.Errorf("key %q: the portal's downloads %q, want %s and %s", key, downloads, wantFile, wantOffline)
		}
		pub := anon(t, s)
		checkLicenseFile(t, pub, key, pub.Get(wantFile).Expect(t, 200))
		if lic, _ := pub.Get(wantOffline).Expect(t, 200).JSON(t)["license"].(map[string]any); lic["key"] != key {
			t.Errorf("key %q: the portal's offline download holds %v", key, lic)
		}

		// The page's actions reach the license.
		c.post(licensePath+"/notes", url.Values{"csrf": {csrf}, "notes": {"moved " + key}}).redirectsTo(t, licensePath+"?notice=notes")
		if d := tenant.Get("/v1/admin/license/"+url.PathEscape(key)).Expect(t, 200).JSON(t); d["notes"] != "moved "+key {
			t.Errorf("key %q: notes %v after the console saved them", key, d["notes"])
		}
		c.post(licensePath+"/revoke", url.Values{"csrf": {csrf}, "revoked": {"true"}, "confirm": {"yes"}}).redirectsTo(t, licensePath+"?notice=revoked")
		if d := tenant.Get("/v1/admin/license/"+url.PathEscape(key)).Expect(t, 200).JSON(t); d["status"] != "revoked" {
			t.Errorf("key %q: %v after the console revoked it", key, d["status"])
		}
		c.post(licensePath+"/revoke", url.Values{"csrf": {csrf}, "revoked": {"false"}}).redirectsTo(t, licensePath+"?notice=reactivated")
		c.post(licensePath+"/seats/deactivate", url.Values{"csrf": {csrf}, "instance_id": {"laptop"}, "confirm": {"yes"}}).redirectsTo(t, licensePath+"?notice=seat-deactivated")
		if acts, _ := tenant.Get("/v1/list-activations/"+url.PathEscape(key)).Expect(t, 200).JSON(t)["activations"].([]any); len(acts) != 0 {
			t.Errorf("key %q: seats %v after the console freed the seat", key, acts)
		}
	}
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
