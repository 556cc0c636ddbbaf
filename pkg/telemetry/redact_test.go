package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestRedactPath(t *testing.T) {
	const key = "M8PF-ABCD-EFGH-IJKL-9XYZ"
	cases := []struct{ path, masked, full string }{
		{"/portal/29Oa1ZvSecretToken", "/portal/[redacted]", "/portal/[redacted]"},
		{"/portal/29Oa1ZvSecretToken/seats/laptop/deactivate", "/portal/[redacted]/seats/laptop/deactivate", "/portal/[redacted]/seats/laptop/deactivate"},
		{"/v1/export-license/" + key, "/v1/export-license/M8PF…9XYZ", "/v1/export-license/" + key},
		{"/v1/export-license/" + key + "/file", "/v1/export-license/M8PF…9XYZ/file", "/v1/export-license/" + key + "/file"},
		{"/v1/list-activations/" + key, "/v1/list-activations/M8PF…9XYZ", "/v1/list-activations/" + key},
		{"/v1/admin/license/" + key, "/v1/admin/license/M8PF…9XYZ", "/v1/admin/license/" + key},
		{"/console/licenses/" + key + "/revoke", "/console/licenses/M8PF…9XYZ/revoke", "/console/licenses/" + key + "/revoke"},
		{"/console/licenses/new", "/console/licenses/new", "/console/licenses/new"},
		{"/v1/verify-license", "/v1/verify-license", "/v1/verify-license"},
		{"/portal/", "/portal/", "/portal/"},
		// Paths the gateway refuses for their empty, . or .. segments log cleaned.
		{"//v1/admin/license/" + key, "/v1/admin/license/M8PF…9XYZ", "/v1/admin/license/" + key},
		{"/v1//export-license/" + key + "/file", "/v1/export-license/M8PF…9XYZ/file", "/v1/export-license/" + key + "/file"},
		{"/v1/./list-activations/" + key, "/v1/list-activations/M8PF…9XYZ", "/v1/list-activations/" + key},
		{"//portal/29Oa1ZvSecretToken", "/portal/[redacted]", "/portal/[redacted]"},
		{"/x/../portal/29Oa1ZvSecretToken/seats", "/portal/[redacted]/seats", "/portal/[redacted]/seats"},
		{"/portal/29Oa1ZvSecretToken/..", "/portal/[redacted]/..", "/portal/[redacted]/.."},
		{"/v1/export-license/" + key + "/../..", "/v1/export-license/M8PF…9XYZ/../..", "/v1/export-license/" + key + "/../.."},
		{"/v1/verify-license/", "/v1/verify-license/", "/v1/verify-license/"},
		// A route's word with a letter escaped is routed as the word (each segment is
		// unescaped), so it is read, and logged, the same way.
		{"/%70ortal/29Oa1ZvSecretToken", "/portal/[redacted]", "/portal/[redacted]"},
		{"/portal/%32%39Oa1ZvSecretToken", "/portal/[redacted]", "/portal/[redacted]"},
		{"/v1/export%2Dlicense/" + key + "/offline", "/v1/export-license/M8PF…9XYZ/offline", "/v1/export-license/" + key + "/offline"},
		{"/v1/%61dmin/license/" + key, "/v1/admin/license/M8PF…9XYZ", "/v1/admin/license/" + key},
		{"/%76%31/list%2dactivations/" + key, "/v1/list-activations/M8PF…9XYZ", "/v1/list-activations/" + key},
		{"/console/licen%73es/" + key + "/revoke", "/console/licenses/M8PF…9XYZ/revoke", "/console/licenses/" + key + "/revoke"},
		{"/console/licenses/%6Eew", "/console/licenses/new", "/console/licenses/new"},
		{"//%70ortal/29Oa1ZvSecretToken", "/portal/[redacted]", "/portal/[redacted]"},
		{"/v1/%2e/export-license/" + key, "/v1/export-license/M8PF…9XYZ", "/v1/export-license/" + key},
		// A key's escaped "/" stays in its segment, masked whole.
		{"/v1/admin/license/LEGACY%2FABCD-1234-EFGH", "/v1/admin/license/LEGA…EFGH", "/v1/admin/license/LEGACY%2FABCD-1234-EFGH"},
	}
	for _, c := range cases {
		if got := RedactPath(c.path, false); got != c.masked {
			t.Errorf("RedactPath(%q) = %q, want %q", c.path, got, c.masked)
		}
		if got := RedactPath(c.path, true); got != c.full {
			t.Errorf("RedactPath(%q, full) = %q, want %q", c.path, got, c.full)
		}
	}
}

func TestMaskLicenseKeyNeverGivesAShortKeyAway(t *testing.T) {
	for _, k := range []string{"ab", "abcdefgh", "abcdefghijk", "abcdefghijkl", "KH-0123456789-ZZZZ"} {
		m := MaskLicenseKey(k)
		if strings.Contains(m, k) || len([]rune(m)) > 9 {
			t.Errorf("MaskLicenseKey(%q) = %q", k, m)
		}
	}
	if got := MaskLicenseKey("KH-0123456789-ZZZZ"); got != "KH-0…ZZZZ" {
		t.Errorf("got %q", got)
	}
}

// Whoever logs a credential by its usual name, the line holds no trace of it; a license
// key is masked unless LOG_LICENSE_KEYS=full.
func TestLoggerRedactsSecretsAndMasksKeys(t *testing.T) {
	const key, token = "KH-0123456789-ZZZZ", "tok_s3cr3t-value"
	for _, full := range []bool{false, true} {
		var buf bytes.Buffer
		log := NewLogger(&buf, "test", "debug", "json", FullLicenseKeys(full))
		log.InfoContext(context.Background(), "x", "token", token, "api_key", token, "Signing_Secret", token,
			"session_id", token, "password", token, "key", key, "path", "/portal/"+token)
		FlushLogs(time.Minute) // lines reach w through the bounded buffer
		line := buf.String()
		if strings.Contains(line, token) {
			t.Fatalf("full=%v: a secret reached the line: %s", full, line)
		}
		var m map[string]any
		if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		want := "KH-0…ZZZZ"
		if full {
			want = key
		}
		if m["key"] != want || m["token"] != "[redacted]" || m["path"] != "/portal/[redacted]" {
			t.Errorf("full=%v: %s", full, line)
		}
	}
}

// A path that names no route keeps its route words and masks every other segment, since
// any of them may be a key or token sent to a mistyped route; a route of pathSecrets is
// left to RedactPath.
func TestMaskUnknownPath(t *testing.T) {
	const key = "M8PF-ABCD-EFGH-IJKL-9XYZ"
	words := map[string]bool{"v1": true, "admin": true, "licenses": true, "license": true, "file": true, "portal": true}
	routeWord := func(s string) bool { return words[s] }
	for path, want := range map[string]string{
		"/v1/admin/licenses/" + key:           "/v1/admin/licenses/M8PF…9XYZ",
		"/v1/export-licence/" + key + "/file": "/v1/expo…ence/M8PF…9XYZ/file",
		"/portl/29Oa1ZvSecretToken":           "/p…/29Oa…oken",
		"/v1/admin/licenses/":                 "/v1/admin/licenses/",
		"/v1/%61dmin/licenses/" + key:         "/v1/admin/licenses/M8PF…9XYZ",
		// Under a route of pathSecrets its secret segment is RedactPath's (which hides the
		// token whole), and every later one that is not a route word is masked here.
		"/portal/29Oa1ZvSecretToken/typo":                  "/portal/29Oa1ZvSecretToken/t…",
		"/v1/admin/license/" + key + "/x":                  "/v1/admin/license/" + key + "/…",
		"/v1/export-license/LEGACY/ABCD-1234-EFGH/file":    "/v1/export-license/LEGACY/ABCD…EFGH/file",
		"/v1//export-license/LEGACY/ABCD-1234-EFGH/file":   "/v1/export-license/LEGACY/ABCD…EFGH/file",
		"/v1/export%2Dlicense/LEGACY/ABCD-1234-EFGH/file":  "/v1/export-license/LEGACY/ABCD…EFGH/file",
		"/%70ortal/29Oa1ZvSecretToken/more/29Oa1ZvSecret2": "/portal/29Oa1ZvSecretToken/m…/29Oa…ret2",
	} {
		if got := MaskUnknownPath(path, routeWord); got != want {
			t.Errorf("MaskUnknownPath(%q) = %q, want %q", path, got, want)
		}
	}
	// As the access log writes it (MaskUnknownPath, then the logger's RedactPath), no
	// segment of a key that spans several is whole, whatever LOG_LICENSE_KEYS says.
	for _, full := range []bool{false, true} {
		got := RedactPath(MaskUnknownPath("/v1/export-license/LEGACY/ABCD-1234-EFGH/file", routeWord), full)
		if strings.Contains(got, "ABCD-1234-EFGH") || !full && strings.Contains(got, "LEGACY") {
			t.Errorf("full=%v: logged as %q", full, got)
		}
	}
}
