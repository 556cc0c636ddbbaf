package e2e

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	keyhouse "github.com/keyhouse/keyhouse/clients/go"
	"github.com/keyhouse/keyhouse/devinfra/testkit"
	"github.com/keyhouse/keyhouse/pkg/licensingclient"
	"github.com/keyhouse/keyhouse/pkg/signing"
	"github.com/keyhouse/keyhouse/stack"
)

// publicKeys is GET /v1/public-keys.
type publicKeys struct {
	Keys []struct {
		Kty, N, E, Kid, Use, Alg, Status, Pem string
	} `json:"keys"`
}

func listPublicKeys(t *testing.T, c *Client) publicKeys {
	t.Helper()
	var out publicKeys
	if err := json.Unmarshal(c.Get("/v1/public-keys").Expect(t, 200).Body, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// runDocumented runs an operator step of the docs (licensing.md "Rotating", operations.md
// "The signing keyring") as written, in dir, with the stack's DATABASE_URL.
func runDocumented(t *testing.T, s *stack.Stack, dir, script string) {
	t.Helper()
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "DATABASE_URL="+s.Env("DATABASE_URL"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", script, err, out)
	}
}

// The documented planned rotation of the RSA signing key (docs/licensing.md, "Rotating":
// stage, ship, promote), with an installed app built with only the key of before and one
// built, after the staging, with every key GET /v1/public-keys listed. Only licensing is
// restarted: releases follows licensing's key by itself, so at every step the manifests
// verify with the key GET /v1/public-key advertises (before, they kept verifying only
// with the old key until releases restarted). The app with both keys verifies manifests
// and offline exports before, during and after; the app with only the old key is refused
// after the promotion (invalid_signature), as the docs say.
func TestPlannedSigningKeyRotationKeepsAppsThatShipTheNextKey(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"psql", "jq", "openssl"} {
		testkit.RequireTool(t, tool)
	}
	s := startStack(t, nil)
	t.Cleanup(s.Stop)
	ctx := t.Context()
	a, c := admin(t, s), anon(t, s)
	p := product("key-rotation")
	key := issueLicense(t, a, lic(p, "expires_at", "2035-12-31T23:59:59Z"))
	registerRelease(t, a, rel(p, "2.0.0"))
	exportBefore := c.Get("/v1/export-license/"+key+"/offline").Expect(t, 200).Body
	oldPEM := c.Get("/v1/public-key").Expect(t, 200).JSON(t)["publicKey"].(string)
	if ks := listPublicKeys(t, c); len(ks.Keys) != 1 || ks.Keys[0].Status != "current" || ks.Keys[0].Pem != oldPEM ||
		ks.Keys[0].Kty != "RSA" || ks.Keys[0].Alg != "RS256" || ks.Keys[0].Use != "sig" {
		t.Fatalf("public keys before a rotation: %+v", ks)
	}

	app := func(pems ...string) *keyhouse.Client {
		t.Helper()
		cl, err := keyhouse.New(keyhouse.Config{URL: s.URL, ProductID: p, Key: key, PublicKeyPEM: pems[0], PublicKeyPEMs: pems[1:],
			StorePath: filepath.Join(t.TempDir(), "store.json"), Components: map[string]string{"machine_id": "m"}})
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	current := 0
	// offered asks for an update as app and says whether the manifest verified; every
	// call asks another question, so no cached answer of the gateway is given again.
	offered := func(cl *keyhouse.Client) error {
		t.Helper()
		current++
		r, err := cl.CheckUpdate(ctx, "1.0."+strconv.Itoa(current), "", "")
		if err == nil && (r == nil || r.Version != "2.0.0") {
			t.Fatalf("check-update offered %+v", r)
		}
		return err
	}
	// signedByAdvertised: the manifest check-update answers now verifies with the key GET
	// /v1/public-key advertises now.
	signedByAdvertised := func(step string) {
		t.Helper()
		advertised := c.Get("/v1/public-key").Expect(t, 200).JSON(t)["publicKey"].(string)
		if err := offered(app(advertised)); err != nil {
			t.Fatalf("%s: the manifest does not verify with the key GET /v1/public-key advertises: %v", step, err)
		}
	}
	oldApp := app(oldPEM)
	if err := offered(oldApp); err != nil {
		t.Fatalf("before: %v", err)
	}

	// 1. Stage the next key, as documented, and restart licensing.
	dir := t.TempDir()
	runDocumented(t, s, dir, `openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out next.pem
psql "$DATABASE_URL" -XAtq -c "SELECT convert_from(document, 'UTF8') FROM licensing.signing_keyring" \
  | jq --rawfile k next.pem '.next_rsa_private_key = $k' > signing-keys.json
psql "$DATABASE_URL" -X -q -v ON_ERROR_STOP=1 -v doc="$(cat signing-keys.json)" <<'SQL'
UPDATE licensing.signing_keyring SET document = convert_to(:'doc', 'UTF8');
SQL
shred -u next.pem`)
	staged, err := os.ReadFile(filepath.Join(dir, "signing-keys.json"))
	if err != nil {
		t.Fatal(err)
	}
	ring, err := signing.ParseKeyring(staged)
	if err != nil {
		t.Fatalf("the staged document: %v", err)
	}
	nextPEM := ring.NextPublicKeyPEM()
	var parts map[string]any
	_ = json.Unmarshal(staged, &parts)
	for _, secret := range []string{"hmac_secret", "aes_key"} {
		census.noteSecret("keyring "+secret, parts[secret].(string))
	}
	for _, line := range strings.Split(parts["next_rsa_private_key"].(string), "\n") {
		if len(line) >= 32 && !strings.HasPrefix(line, "-----") {
			census.noteSecret("next RSA private key", line)
		}
	}
	s.Service("licensing").Stop()
	if err := s.RestartService(ctx, "licensing"); err != nil {
		t.Fatal(err)
	}
	ks := listPublicKeys(t, c)
	if len(ks.Keys) != 2 || ks.Keys[0].Status != "current" || ks.Keys[0].Pem != oldPEM ||
		ks.Keys[1].Status != "next" || ks.Keys[1].Pem != nextPEM || ks.Keys[1].Kid != ring.NextKeyID() {
		t.Fatalf("public keys with a staged key: %+v", ks)
	}
	if got := c.Get("/v1/public-key").Expect(t, 200).JSON(t)["publicKey"]; got != oldPEM {
		t.Fatal("GET /v1/public-key changed when a next key was staged")
	}
	// 2. The vendor ships an app with every listed key; both apps keep verifying.
	bothApp := app(ks.Keys[0].Pem, ks.Keys[1].Pem)
	signedByAdvertised("staged")
	for name, cl := range map[string]*keyhouse.Client{"old key only": oldApp, "both keys": bothApp} {
		if err := offered(cl); err != nil {
			t.Fatalf("staged, app with %s: %v", name, err)
		}
		if _, err := cl.VerifyOfflineExport(exportBefore); err != nil {
			t.Fatalf("staged, app with %s, export of before: %v", name, err)
		}
	}

	// 3. Promote, as documented, and restart licensing only.
	runDocumented(t, s, dir, `jq '.rsa_private_key = .next_rsa_private_key | del(.next_rsa_private_key, .key_id)' signing-keys.json > promoted.json
psql "$DATABASE_URL" -X -q -v ON_ERROR_STOP=1 -v doc="$(cat promoted.json)" <<'SQL'
UPDATE licensing.signing_keyring SET document = convert_to(:'doc', 'UTF8');
SQL`)
	s.Service("licensing").Stop()
	if err := s.RestartService(ctx, "licensing"); err != nil {
		t.Fatal(err)
	}
	// Releases asks licensing which key signs at most once a second, and a manifest signed
	// in a second is given for the rest of it (releases' and the gateway's per-second
	// caches; documented): the checks below start in a second that begins after both.
	time.Sleep(time.Until(time.Now().Add(licensingclient.KeyCheckInterval).Truncate(time.Second).Add(time.Second)))
	ks = listPublicKeys(t, c)
	if len(ks.Keys) != 1 || ks.Keys[0].Status != "current" || ks.Keys[0].Pem != nextPEM {
		t.Fatalf("public keys after the promotion: %+v", ks)
	}
	// Releases' connection to licensing may still be coming back (gRPC reconnects on its
	// own schedule): a license new to every cache is found once it is.
	waitKey := issueLicense(t, a, lic(p))
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		r := c.Post("/v1/check-update", check(waitKey, p, "0.0.1"))
		if r.Status == 200 {
			break
		}
		r.ExpectError(t, 503, "Licensing service unavailable, retry")
		if time.Now().After(deadline) {
			t.Fatal("check-update still failing 30 s after licensing came back")
		}
	}
	signedByAdvertised("promoted")
	exportAfter := c.Get("/v1/export-license/"+key+"/offline").Expect(t, 200).Body
	if err := offered(bothApp); err != nil {
		t.Fatalf("promoted, app with both keys: %v", err)
	}
	for name, export := range map[string][]byte{"before": exportBefore, "after": exportAfter} {
		if _, err := bothApp.VerifyOfflineExport(export); err != nil {
			t.Fatalf("promoted, app with both keys, export of %s: %v", name, err)
		}
	}
	// The app that never shipped the next key is refused from now on.
	if err := offered(oldApp); !errors.Is(err, keyhouse.ErrInvalidSignature) {
		t.Fatalf("promoted, app with the old key only: %v, want invalid_signature", err)
	}
	if _, err := oldApp.VerifyOfflineExport(exportAfter); !errors.Is(err, keyhouse.ErrInvalidSignature) {
		t.Fatalf("promoted, app with the old key only, a new export: %v, want invalid_signature", err)
	}
}
