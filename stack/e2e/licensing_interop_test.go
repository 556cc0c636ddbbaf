package e2e

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keyhouse/keyhouse/devinfra/testkit"
	"github.com/keyhouse/keyhouse/stack"
)

// The offline export verifies with verifiers nobody here wrote, from the public-key PEM
// alone: openssl over the license object's bytes as they appear in the response, and
// Node's crypto over JSON.stringify of the parsed object (what a JavaScript client does).
func TestOfflineExportVerifiesWithOpenSSLAndNode(t *testing.T) {
	t.Parallel()
	openssl := testkit.RequireTool(t, "openssl")
	node := testkit.RequireTool(t, "node")
	s := selfHosted(t)
	a, c := admin(t, s), anon(t, s)
	dir := t.TempDir()
	pem := c.Get("/v1/public-key").Expect(t, 200).JSON(t)["publicKey"].(string)
	pubPath := filepath.Join(dir, "pub.pem")
	if err := os.WriteFile(pubPath, []byte(pem), 0o600); err != nil {
		t.Fatal(err)
	}

	for name, body := range map[string]map[string]any{
		"limits and expiry": lic("offline", "expires_at", "2035-12-31T23:59:59Z", "issued_to", "x",
			"limits", map[string]any{"users": 25, "api_calls_per_day": 100000, "features": 1.5}),
		"perpetual, no limits":    lic("offline"),
		"characters JSON escapes": lic("off<line>&\u2028\"é\"", "tier", "ent/erprise\\"),
		"unicode outside the BMP": lic("🚀 rocket", "tier", "pro"),
	} {
		t.Run(name, func(t *testing.T) {
			key := issueLicense(t, a, body)
			resp := c.Get("/v1/export-license/"+key+"/offline").Expect(t, 200)
			if got := strings.Join(resp.Keys(t), ","); got != "license,signature" {
				t.Fatalf("fields %s", got)
			}
			var parts struct {
				License   json.RawMessage `json:"license"`
				Signature string          `json:"signature"`
			}
			if err := json.Unmarshal(resp.Body, &parts); err != nil {
				t.Fatal(err)
			}
			if got := strings.Join((&Response{Body: parts.License}).Keys(t), ","); got != "key,tier,product_id,expires_at,limits" {
				t.Fatalf("license fields %s", got)
			}
			sig, err := base64.StdEncoding.DecodeString(parts.Signature)
			if err != nil {
				t.Fatal(err)
			}
			payloadPath, sigPath := filepath.Join(dir, key+".json"), filepath.Join(dir, key+".sig")
			_ = os.WriteFile(payloadPath, parts.License, 0o600)
			_ = os.WriteFile(sigPath, sig, 0o600)
			out, err := exec.Command(openssl, "dgst", "-sha256", "-verify", pubPath, "-signature", sigPath, payloadPath).CombinedOutput()
			if err != nil || !strings.Contains(string(out), "Verified OK") {
				t.Fatalf("openssl: %v %s", err, out)
			}
			// The same bytes with one change must fail (the check is not vacuous).
			_ = os.WriteFile(payloadPath, []byte(strings.Replace(string(parts.License), `"tier":"`, `"tier":"x`, 1)), 0o600)
			if out, err := exec.Command(openssl, "dgst", "-sha256", "-verify", pubPath, "-signature", sigPath, payloadPath).CombinedOutput(); err == nil {
				t.Fatalf("openssl verified a tampered payload: %s", out)
			}

			script := `
const crypto = require('crypto');
const [pem, body] = [process.argv[1], JSON.parse(process.argv[2])];
const ok = crypto.verify('sha256', Buffer.from(JSON.stringify(body.license)), pem, Buffer.from(body.signature, 'base64'));
body.license.tier += '!';
const tampered = crypto.verify('sha256', Buffer.from(JSON.stringify(body.license)), pem, Buffer.from(body.signature, 'base64'));
console.log(ok && !tampered ? 'ok' : 'fail');`
			out, err = exec.Command(node, "-e", script, "--", pem, string(resp.Body)).CombinedOutput()
			if err != nil || strings.TrimSpace(string(out)) != "ok" {
				t.Fatalf("node: %v %s", err, out)
			}
		})
	}
}

// The copy-paste verifiers of docs/licensing.md run as documented, and refuse a tampered
// export.
func TestDocumentedOfflineVerifiersWork(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	a, c := admin(t, s), anon(t, s)
	root, err := stack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	examples := filepath.Join(root, "docs", "examples", "offline-verify")
	dir := t.TempDir()
	key := issueLicense(t, a, lic("documented", "expires_at", "2039-01-01T00:00:00Z", "limits", map[string]any{"users": 25, "seats": 3}))
	pem := c.Get("/v1/public-key").JSON(t)["publicKey"].(string)
	export := c.Get("/v1/export-license/"+key+"/offline").Expect(t, 200).Body
	pemPath, good, bad := filepath.Join(dir, "public-key.pem"), filepath.Join(dir, "license.json"), filepath.Join(dir, "bad.json")
	_ = os.WriteFile(pemPath, []byte(pem), 0o600)
	_ = os.WriteFile(good, export, 0o600)
	_ = os.WriteFile(bad, []byte(strings.Replace(string(export), `"tier":"pro"`, `"tier":"enterprise"`, 1)), 0o600)

	verifiers := map[string][]string{
		"go":   {"go", "run", filepath.Join(examples, "verify.go")},
		"node": {testkit.RequireTool(t, "node"), filepath.Join(examples, "verify.js")},
	}
	// Python needs the third-party cryptography package, which CI machines may lack.
	if py, err := exec.LookPath("python3"); err == nil && exec.Command(py, "-c", "import cryptography").Run() == nil {
		verifiers["python"] = []string{py, filepath.Join(examples, "verify.py")}
	}
	for name, argv := range verifiers {
		out, err := exec.Command(argv[0], append(argv[1:], pemPath, good)...).CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), "valid: "+key) {
			t.Errorf("%s verifier: %v %s", name, err, out)
		}
		out, err = exec.Command(argv[0], append(argv[1:], pemPath, bad)...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "INVALID signature") {
			t.Errorf("%s verifier accepted a tampered export: %s", name, out)
		}
	}
}
