package e2e

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keyhouse/keyhouse/pkg/testkit"
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
