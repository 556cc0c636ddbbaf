package e2e

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/keyhouse/keyhouse/devinfra"
	"github.com/keyhouse/keyhouse/devinfra/testkit"
)

// The backup procedure of docs/operations.md, done as an operator would: pg_dump of the one
// database while the stack runs, pg_restore into a fresh Postgres cluster, a new stack
// started on it. Everything a vendor's customers hold keeps working: the public key is the
// same, exports and signed update manifests made before the backup verify against the
// restored stack, leases verify against the restored JWKS and new ones are signed with the
// same key, and licenses, seats and activation tokens are intact.
func TestBackupRestoresIntoAFreshClusterWithTheSameKeys(t *testing.T) {
	t.Parallel()
	pgDump, pgRestore := testkit.RequireTool(t, "pg_dump"), testkit.RequireTool(t, "pg_restore")
	ctx := context.Background()
	src := startStack(t, nil)
	t.Cleanup(src.Stop)
	a, c := admin(t, src), anon(t, src)
	p := product("backup")
	key := issueLicense(t, a, lic(p, "limits", map[string]any{"users": 5}, "max_activations", 2))
	token, _ := c.Post("/v1/activate-license", map[string]string{"key": key, "instance_id": "laptop"}).Expect(t, 200).JSON(t)["token"].(string)
	publicKey := c.Get("/v1/public-key").Expect(t, 200).Body
	hmacExport := c.Get("/v1/export-license/"+key).Expect(t, 200).Body
	licFile := base64.StdEncoding.EncodeToString(c.Get("/v1/export-license/"+key+"/file").Expect(t, 200).Body)
	registerRelease(t, a, rel(p, "2.0.0", "channel", "stable"))
	manifest := c.Post("/v1/check-update", check(key, p, "1.0.0", "channel", "stable")).Expect(t, 200).Body
	signedLease := lease(c, map[string]any{"key": key, "token": token}).Expect(t, 200).JSON(t)["lease"].(string)
	leaseHeader, _, err := verifyLease(signedLease, leaseKeys(t, c, ""))
	if err != nil {
		t.Fatal(err)
	}

	dump := filepath.Join(t.TempDir(), "keyhouse.dump")
	if out, err := exec.Command(pgDump, "--format=custom", "--file="+dump, "--dbname="+src.Env("DATABASE_URL")).CombinedOutput(); err != nil {
		t.Fatalf("pg_dump: %v\n%s", err, out)
	}
	port, err := devinfra.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := devinfra.StartPostgres(ctx, filepath.Join(testkit.Dir(t), "restore-"+filepath.Base(t.TempDir())), port)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fresh.Stop() })
	url, err := fresh.CreateDatabase(ctx, "restored")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(pgRestore, "--no-owner", "--exit-on-error", "--dbname="+url, dump).CombinedOutput(); err != nil {
		t.Fatalf("pg_restore: %v\n%s", err, out)
	}

	dst := startStack(t, map[string]string{"DATABASE_URL": url})
	t.Cleanup(dst.Stop)
	a2, c2 := admin(t, dst), anon(t, dst)
	if got := c2.Get("/v1/public-key").Expect(t, 200).Body; !bytes.Equal(got, publicKey) {
		t.Fatalf("the restored stack has another public key:\n%s\nwant\n%s", got, publicKey)
	}
	var export map[string]any
	if err := json.Unmarshal(hmacExport, &export); err != nil {
		t.Fatal(err)
	}
	c2.Post("/v1/verify-license-file", export).ExpectBody(t, `{"valid":true,"reason":null}`)
	if v, _ := c2.Post("/v1/verify-license-file-base64", map[string]string{"license_file": licFile}).Expect(t, 200).JSON(t)["valid"].(bool); !v {
		t.Fatal("the .lic file made before the backup does not open on the restored stack")
	}
	verifyManifest(t, c2.Get("/v1/public-key").Expect(t, 200).JSON(t)["publicKey"].(string), manifest)

	c2.Post("/v1/verify-license", map[string]string{"key": key}).Expect(t, 200)
	acts := a2.Get("/v1/list-activations/"+key).Expect(t, 200).JSON(t)["activations"].([]any)
	if len(acts) != 1 || acts[0].(map[string]any)["instance_id"] != "laptop" {
		t.Fatalf("seats after the restore: %v", acts)
	}
	// The seat's token still proves the seat: usage tracks against it.
	c2.Post("/v1/track-usage", map[string]any{"key": key, "token": token, "metric": "users", "increment": 1}).Expect(t, 200)
	// The lease an app holds verifies against the restored JWKS, and new leases are signed
	// with the same key (its private half was restored sealed, and opens).
	restoredKeys := leaseKeys(t, c2, "")
	if _, _, err := verifyLease(signedLease, restoredKeys); err != nil {
		t.Fatalf("the lease signed before the backup, against the restored JWKS: %v", err)
	}
	renewed := lease(c2, map[string]any{"key": key, "token": token}).Expect(t, 200).JSON(t)["lease"].(string)
	header, _, err := verifyLease(renewed, restoredKeys)
	if err != nil || header["kid"] != leaseHeader["kid"] {
		t.Fatalf("a lease after the restore: kid %v (before the backup %v), %v", header["kid"], leaseHeader["kid"], err)
	}
}

// verifyManifest checks a check-update answer's RSA signature with publicKeyPEM, over the
// signed fields in the order the server signs them (docs/update-check.md).
func verifyManifest(t *testing.T, publicKeyPEM string, body []byte) {
	t.Helper()
	var answer struct {
		Release map[string]any `json:"release"`
	}
	if err := json.Unmarshal(body, &answer); err != nil || answer.Release == nil {
		t.Fatalf("check-update answer %s: %v", body, err)
	}
	var signed bytes.Buffer
	signed.WriteByte('{')
	for i, f := range []string{"product_id", "version", "channel", "platform", "artifact_url", "checksum", "release_notes", "issued_at"} {
		if i > 0 {
			signed.WriteByte(',')
		}
		k, _ := json.Marshal(f)
		v, _ := json.Marshal(answer.Release[f])
		signed.Write(k)
		signed.WriteByte(':')
		signed.Write(v)
	}
	signed.WriteByte('}')
	block, _ := pem.Decode([]byte(publicKeyPEM))
	if block == nil {
		t.Fatalf("public key is not PEM: %q", publicKeyPEM)
	}
	pub, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := base64.StdEncoding.DecodeString(answer.Release["signature"].(string))
	if err != nil {
		t.Fatal(err)
	}
	digest := sha256.Sum256(signed.Bytes())
	if err := rsa.VerifyPKCS1v15(pub.(*rsa.PublicKey), crypto.SHA256, digest[:], sig); err != nil {
		t.Fatalf("the manifest signed before the backup does not verify with the restored key: %v (signed bytes %s)", err, signed.Bytes())
	}
}
