package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/devinfra/testkit"
	"github.com/keyhouse/keyhouse/stack"
)

// The console and portal as a person uses them: Debian's chromium driven by npm
// playwright-core (browser/console.mjs). The scenarios run the pages; the tests here set
// the stage through the REST API and check afterwards, through the API, that what the
// pages said happened did happen.

var npmOnce sync.Once

// needBrowser finds Debian's chromium and node (skipped without them, fatal under
// KEYHOUSE_REQUIRE_TOOLS=1, which CI sets after installing both) and installs the pinned
// npm packages on first use. It returns chromium's path.
func needBrowser(t *testing.T) string {
	t.Helper()
	chromium := testkit.RequireTool(t, "chromium")
	testkit.RequireTool(t, "node")
	var installErr error
	npmOnce.Do(func() {
		if _, err := os.Stat(filepath.Join("browser", "node_modules", "playwright-core")); err == nil {
			return
		}
		cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund")
		cmd.Dir = "browser"
		if out, err := cmd.CombinedOutput(); err != nil {
			installErr = fmt.Errorf("npm ci in stack/e2e/browser: %v\n%s", err, out)
		}
	})
	if installErr != nil {
		t.Fatal(installErr)
	}
	if _, err := os.Stat(filepath.Join("browser", "node_modules", "playwright-core")); err != nil {
		t.Fatal("playwright-core is not installed in stack/e2e/browser (npm ci there)")
	}
	return chromium
}

// browse runs one scenario of browser/console.mjs with cfg and returns what it printed.
func browse(t *testing.T, scenario string, cfg map[string]any) map[string]any {
	t.Helper()
	cfg["chromium"] = needBrowser(t)
	cfg["tmp"] = t.TempDir()
	// KEYHOUSE_SCREENSHOTS=docs/console (absolute or relative to the repository root)
	// refreshes the pictures of docs/console.md.
	if dir := os.Getenv("KEYHOUSE_SCREENSHOTS"); dir != "" {
		if !filepath.IsAbs(dir) {
			dir, _ = filepath.Abs(filepath.Join("..", "..", dir))
		}
		cfg["screenshots"] = dir
	}
	data, _ := json.Marshal(cfg)
	cfgPath := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(cfgPath, data, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "console.mjs", scenario, cfgPath)
	cmd.Dir = "browser"
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("browser scenario %s failed: %v\n%s", scenario, err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	var out map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &out); err != nil {
		t.Fatalf("scenario %s printed %q: %v", scenario, stdout.String(), err)
	}
	census.noteResponse([]byte(lines[len(lines)-1]))
	return out
}

// browserIP is a client address of its own for a browser scenario's rate-limit budget.
func browserIP(t *testing.T, s *stack.Stack) string { return anon(t, s).IP }

func str(m map[string]any, k string) string { s, _ := m[k].(string); return s }

func TestConsoleSelfHostedInTheBrowser(t *testing.T) {
	s := selfHosted(t)
	adm := admin(t, s)
	prod := product("console-desktop")
	// A few neighbours, so the list has something to page and search through.
	for i := range 6 {
		issueLicense(t, adm, map[string]any{"tier": []string{"free", "pro", "enterprise"}[i%3], "product_id": prod, "issued_to": fmt.Sprintf("customer-%d@example.com", i), "max_activations": 2})
	}
	customer := fmt.Sprintf("ada-%d@example.com", time.Now().UnixNano())
	out := browse(t, "selfhosted", map[string]any{"base": s.URL, "key": s.AdminKey, "ip": browserIP(t, s), "product": prod, "customer": customer})
	key := str(out, "key")
	lic := adm.Get("/v1/admin/license/"+key).Expect(t, 200).JSON(t)
	if lic["status"] != "revoked" || lic["issued_to"] != customer || lic["product_id"] != prod || lic["max_activations"] != 3.0 {
		t.Fatalf("the license the browser issued and revoked reads %v", lic)
	}
	if lim, _ := lic["limits"].(map[string]any); lim["seats"] != 5.0 {
		t.Fatalf("limits %v, want seats 5", lic["limits"])
	}
}

func TestConsoleHostedInTheBrowser(t *testing.T) {
	s := hosted(t)
	n := dbCounter.Add(1)
	email := fmt.Sprintf("vendor%d@example.com", n)
	created := admin(t, s).Post("/v1/operator/tenants", map[string]string{"name": "Acme Software", "email": email}).Expect(t, 200).JSON(t)
	apiKey := str(created, "api_key")
	prod := product("console-hosted")
	customer := fmt.Sprintf("grace-%d@example.com", n)
	password := "correct horse battery staple"

	out := browse(t, "hosted1", map[string]any{"base": s.URL, "key": apiKey, "ip": browserIP(t, s), "email": email,
		"password": password, "product": prod, "customer": customer})
	key, portal := str(out, "key"), str(out, "portal")
	pub := anon(t, s)
	for _, inst := range []string{"device-a", "device-b"} {
		pub.Post("/v1/activate-license", map[string]string{"key": key, "instance_id": inst}).Expect(t, 200)
	}

	out = browse(t, "hosted2", map[string]any{"base": s.URL, "ip": browserIP(t, s), "email": email, "password": password,
		"product": prod, "licenseKey": key})
	newKey := str(out, "newKey")

	// Rotation from the console retired the old key at once.
	newClient(t, s.URL, apiKey).Get("/v1/list-licenses").ExpectError(t, 403, "Unauthorized")
	tenant := newClient(t, s.URL, newKey)
	acts := tenant.Get("/v1/list-activations/"+key).Expect(t, 200).JSON(t)["activations"].([]any)
	if len(acts) != 1 || acts[0].(map[string]any)["instance_id"] != "device-b" {
		t.Fatalf("after deactivating device-a in the console: %v", acts)
	}
	rel := tenant.Get("/v1/list-releases?product_id="+prod).Expect(t, 200).JSON(t)["releases"].([]any)
	if len(rel) != 1 || rel[0].(map[string]any)["version"] != "2.1.0" || rel[0].(map[string]any)["platform"] != "linux-x64" {
		t.Fatalf("the release registered in the console: %v", rel)
	}
	checkExportFile(t, str(out, "exportPath"), str(out, "exportName"), email, key, customer)

	// A second tenant cannot open the first tenant's license by URL.
	other := newTenant(t, s)
	browse(t, "isolation", map[string]any{"base": s.URL, "key": other.Token, "ip": browserIP(t, s), "licenseKey": key, "customer": customer})

	// The portal link from the license page: no session, just the link.
	pub.Post("/v1/activate-license", map[string]string{"key": key, "instance_id": "device-c"}).Expect(t, 200)
	out = browse(t, "portal", map[string]any{"base": s.URL, "ip": browserIP(t, s), "portal": portal, "product": prod, "instance": "device-c"})
	if name := filepath.Base(str(out, "licPath")); name == "" || str(out, "licName") != "license-"+key+".lic" {
		t.Fatalf("portal .lic download named %q", str(out, "licName"))
	}
	lic, _ := os.ReadFile(str(out, "licPath"))
	pub.Post("/v1/verify-license-file-base64", map[string]string{"license_file": b64(lic)}).Expect(t, 200)
	var offline map[string]any
	raw, _ := os.ReadFile(str(out, "offlinePath"))
	if err := json.Unmarshal(raw, &offline); err != nil || offline["signature"] == "" || offline["license"].(map[string]any)["key"] != key {
		t.Fatalf("portal offline download: %s", raw)
	}
	acts = tenant.Get("/v1/list-activations/"+key).Expect(t, 200).JSON(t)["activations"].([]any)
	if len(acts) != 1 || acts[0].(map[string]any)["instance_id"] != "device-b" {
		t.Fatalf("after deactivating device-c in the portal: %v", acts)
	}
}

// checkExportFile pins the data export of api.md: file name, field order, newest first,
// nothing excluded leaking.
func checkExportFile(t *testing.T, path, name, email, key, customer string) {
	t.Helper()
	if want := "service-data-export-" + time.Now().UTC().Format("2006-01-02") + ".json"; name != want {
		t.Fatalf("export file name %q, want %q", name, want)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r := &Response{Body: raw}
	if got := strings.Join(r.Keys(t), ","); got != "exported_at,account,billing,licenses" {
		t.Fatalf("export keys %s", got)
	}
	var f struct {
		Account  map[string]any   `json:"account"`
		Billing  map[string]any   `json:"billing"`
		Licenses []map[string]any `json:"licenses"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	if f.Account["email"] != email || f.Account["tenant_name"] != "Acme Software" || !strings.HasPrefix(str(f.Account, "tenant_id"), "t_") {
		t.Fatalf("export account %v", f.Account)
	}
	if f.Billing["status"] != "active" || f.Billing["plan"] != nil || f.Billing["licensesUsed"] != 1.0 || f.Billing["licenseLimit"] != 5.0 {
		t.Fatalf("export billing %v", f.Billing)
	}
	if len(f.Licenses) != 1 || f.Licenses[0]["key"] != key || f.Licenses[0]["issued_to"] != customer {
		t.Fatalf("export licenses %v", f.Licenses)
	}
	acts := f.Licenses[0]["activations"].([]any)
	if len(acts) != 1 || acts[0].(map[string]any)["instance_id"] != "device-b" {
		t.Fatalf("export activations %v", acts)
	}
	for _, banned := range []string{`"notes"`, `"api_key"`, `"apiKey"`, `"password"`} {
		if bytes.Contains(raw, []byte(banned)) {
			t.Fatalf("export contains %s: %s", banned, raw)
		}
	}
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

func todayUTC() string { return time.Now().UTC().Format("2006-01-02") }

func TestConsoleBillingInTheBrowser(t *testing.T) {
	s := hosted(t)
	c, tenant := hostedTenant(t, s)
	issueLicense(t, c, map[string]any{"tier": "pro", "product_id": product("console-billing"), "issued_to": "b@example.com"})
	out := browse(t, "billing1", map[string]any{"base": s.URL, "key": c.Token, "ip": browserIP(t, s)})
	if !strings.HasPrefix(str(out, "url"), "https://checkout.stripe.com/") {
		t.Fatalf("upgrade went to %q", str(out, "url"))
	}
	calls := stripeCalls("/v1/checkout/sessions", "client_reference_id", tenant)
	if len(calls) != 1 || calls[0].Form.Get("line_items[0][price]") != testPriceAnnual {
		t.Fatalf("the console's upgrade made checkout sessions %v, want one annual", calls)
	}
	su := upgrade(t, s, tenant)
	out = browse(t, "billing2", map[string]any{"base": s.URL, "key": c.Token, "ip": browserIP(t, s)})
	if u := str(out, "url"); u == "" || strings.HasPrefix(u, "https://checkout.stripe.com/") {
		t.Fatalf("manage went to %q, want the billing portal", u)
	}
	if n := len(stripeCalls("/v1/billing_portal/sessions", "customer", su.customer)); n != 1 {
		t.Fatalf("%d billing portal sessions, want 1", n)
	}
}

// A sale end to end as people see it: the vendor sets the storefront up in the console, a
// buyer pays, the email reaches a real SMTP server, and its portal link frees a seat.
func TestStorefrontConsoleAndThePortalLinkOfTheBuyerEmail(t *testing.T) {
	s, sink := storefrontStack(t)
	tenant := newTenant(t, s)
	prod, link, secret := product("sf-console"), uniq("plink_"), "whsec_"+uniq("console")
	out := browse(t, "storefront1", map[string]any{"base": s.URL, "key": tenant.Token, "ip": browserIP(t, s),
		"secret": secret, "link": link, "product": prod})
	sh := &shop{t: t, c: tenant, webhook: map[string]any{"webhook_id": str(out, "webhookId")}, secret: secret}

	buyer := uniq("portal-buyer") + "@example.com"
	evID := uniq("evt_")
	sh.deliver(event(evID, "checkout.session.completed", newSession(link, buyer))).ExpectBody(t, `{"received":true}`)
	d := sh.await(evID, outcome("issued", "sent"))
	key := str(d, "license_key")
	if out := browse(t, "storefront2", map[string]any{"base": s.URL, "key": tenant.Token, "ip": browserIP(t, s)}); str(out, "key") != key {
		t.Fatalf("the delivery links license %q, want %q", str(out, "key"), key)
	}

	m := awaitMail(t, sink, buyer, 1)[0]
	const lead = "Manage your license and devices: "
	i := strings.Index(m.Body, lead)
	if i < 0 {
		t.Fatalf("the buyer email carries no portal link:\n%s", m.Body)
	}
	link = strings.Fields(m.Body[i+len(lead):])[0]
	if !strings.HasPrefix(link, "https://licenses.example.com/portal/") {
		t.Fatalf("portal link %q is not under PUBLIC_BASE_URL", link)
	}
	// The stack's PUBLIC_BASE_URL names its public host; the browser reaches the same path
	// on the gateway itself.
	path := strings.TrimPrefix(link, "https://licenses.example.com")
	pub := anon(t, s)
	for _, inst := range []string{"laptop", "desktop"} {
		pub.Post("/v1/activate-license", map[string]string{"key": key, "instance_id": inst}).Expect(t, 200)
	}
	browse(t, "portal", map[string]any{"base": s.URL, "ip": browserIP(t, s), "portal": s.URL + path, "product": prod, "instance": "desktop"})
	acts := tenant.Get("/v1/list-activations/"+key).Expect(t, 200).JSON(t)["activations"].([]any)
	if len(acts) != 1 || acts[0].(map[string]any)["instance_id"] != "laptop" {
		t.Fatalf("after the buyer freed desktop in the portal: %v", acts)
	}
}

// API keys in the console: create (the key shown once), list (never the key), delete after
// a confirmation; the keys the browser made behave so through the API.
func TestConsoleAPIKeysInTheBrowser(t *testing.T) {
	s := hosted(t)
	tenant := newTenant(t, s)
	out := browse(t, "apikeys", map[string]any{"base": s.URL, "key": tenant.Token, "ip": browserIP(t, s)})
	deleted, kept := newClient(t, s.URL, str(out, "readKey")), newClient(t, s.URL, str(out, "fullKey"))
	deleted.Get("/v1/list-licenses").ExpectError(t, 403, "Unauthorized")
	kept.Post("/v1/issue-license", map[string]any{"tier": "pro", "product_id": product("console-keys"), "issued_to": "x@example.com"}).Expect(t, 200)
	var listed struct {
		APIKeys []map[string]any `json:"api_keys"`
	}
	if err := json.Unmarshal(kept.Get("/v1/api-keys").Expect(t, 200).Body, &listed); err != nil || len(listed.APIKeys) != 1 ||
		listed.APIKeys[0]["name"] != "Backend" || listed.APIKeys[0]["scope"] != "full" {
		t.Fatalf("keys after the browser: %v, %v", listed.APIKeys, err)
	}
}

// Accessibility as a person meets it (WCAG 2.2 AA, docs/console.md): every refused form
// puts the focus on an alert that names each problem, notices take the focus where the
// form was, confirmations focus their button, text, fields and focus rings have their
// contrast, sign-in returns to the page a session ended on (and nowhere else), a page past
// the end of a list says so. The checks are in browser/console.mjs (accessibility).
func TestConsoleAccessibilityInTheBrowser(t *testing.T) {
	s := hosted(t)
	tenant := newTenant(t, s)
	prod := product("console-a11y")
	customer := "customer-with-a-very-long-identifier-" + strings.Repeat("x", 40) + "@example.com"
	key := issueLicense(t, tenant, map[string]any{"tier": "pro", "product_id": prod, "issued_to": customer,
		"max_activations": 3, "limits": map[string]any{"projects": 2}})
	pub := anon(t, s)
	trackUsage(pub, key, seat(t, pub, key, "studio"), "projects", "increment", 1).Expect(t, 200)
	browse(t, "accessibility", map[string]any{"base": s.URL, "key": tenant.Token, "ip": browserIP(t, s),
		"licenseKey": key, "customer": customer, "password": "correct horse battery staple"})
	if lic := tenant.Get("/v1/admin/license/"+key).Expect(t, 200).JSON(t); lic["status"] != "revoked" {
		t.Fatalf("the license the browser revoked reads %v", lic)
	}
}
