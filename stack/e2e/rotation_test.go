package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/devinfra/testkit"
	"github.com/keyhouse/keyhouse/pkg/signing"
)

// Rotations an operator makes on a running installation (docs/operations.md, docs/licensing.md).

// countMsg counts the lines of a process's JSON log whose msg is msg and whose fields
// include want.
func countMsg(t *testing.T, path, msg string, want map[string]string) int {
	t.Helper()
	n := 0
lines:
	for _, line := range logLines(t, path) {
		if line["msg"] != msg {
			continue
		}
		for k, v := range want {
			if line[k] != v {
				continue lines
			}
		}
		n++
	}
	return n
}

// An admin key rotation done as docs/operations.md says: processes restarted onto the new
// ADMIN_API_KEY with ADMIN_API_KEY_PREVIOUS set to the old one serve beside processes still
// on the old key. Here activations and a gateway are on the new key and licensing on the
// old (the walkthrough's case): activate-license works, and both keys are the admin's on
// the new processes. Without ADMIN_API_KEY_PREVIOUS the same activation is still the 503
// it was, but activations' log says Licensing refused its admin key (Unauthenticated)
// instead of showing only an Unavailable call.
func TestAdminKeyRotationKeepsCallsBetweenServicesWorking(t *testing.T) {
	t.Parallel()
	s := startStack(t, nil)
	t.Cleanup(s.Stop)
	ctx := t.Context()
	oldKey, newKey := s.AdminKey, "rotated-admin-key-0123456789abcdef0123456789"
	census.noteCredential(newKey)
	key := issueLicense(t, admin(t, s), lic(product("admin-key-rotation"), "max_activations", 5))

	// Activations and a gateway on the new key alone, licensing on the old one.
	alone, err := s.StartServiceReplica(ctx, "activations", map[string]string{"ADMIN_API_KEY": newKey})
	if err != nil {
		t.Fatal(err)
	}
	aloneURL, err := s.StartGateway(ctx, 0, map[string]string{"ACTIVATIONS_ADDR": alone, "ADMIN_API_KEY": newKey})
	if err != nil {
		t.Fatal(err)
	}
	refused := map[string]string{"peer": "Licensing", "code": "Unauthenticated"}
	const refusal = "internal call refused: Licensing does not accept this process's admin key"
	before := countMsg(t, s.LogPath("activations"), refusal, refused)
	newClient(t, aloneURL, "").Post("/v1/activate-license", map[string]string{"key": key, "instance_id": "alone"}).
		ExpectBody(t, `{"error":"Licensing service unavailable, retry"}`)
	if after := countMsg(t, s.LogPath("activations"), refusal, refused); after <= before {
		t.Fatalf("activations logged no line saying Licensing refused its admin key (%d before, %d after)", before, after)
	}
	// Without ADMIN_API_KEY_PREVIOUS the old key stops at once on the new processes (what
	// api.md says a rotation does, and what an operator rotating a leaked key relies on).
	newClient(t, aloneURL, oldKey).Get("/v1/list-activations/"+key).ExpectError(t, 403, "Unauthorized")

	// The same processes with ADMIN_API_KEY_PREVIOUS: the activation goes through.
	rotating, err := s.StartServiceReplica(ctx, "activations", map[string]string{"ADMIN_API_KEY": newKey, "ADMIN_API_KEY_PREVIOUS": oldKey})
	if err != nil {
		t.Fatal(err)
	}
	url, err := s.StartGateway(ctx, 0, map[string]string{"ACTIVATIONS_ADDR": rotating, "ADMIN_API_KEY": newKey, "ADMIN_API_KEY_PREVIOUS": oldKey})
	if err != nil {
		t.Fatal(err)
	}
	seat(t, newClient(t, url, ""), key, "rotating")
	// Both keys are the admin's on the processes that have both (an admin's scripts keep
	// working through the rollout); another key is not.
	for _, k := range []string{newKey, oldKey} {
		acts := newClient(t, url, k).Get("/v1/list-activations/"+key).Expect(t, 200).JSON(t)["activations"].([]any)
		if len(acts) != 1 {
			t.Fatalf("list-activations with the %s key: %v", map[bool]string{true: "new", false: "old"}[k == newKey], acts)
		}
	}
	// (A key of its own: the suite's secret census looks for every client's key in every
	// log, and a run of one letter is in other tests' paths.)
	newClient(t, url, "not-an-admin-key-"+uniq("rotation")).Get("/v1/list-activations/"+key).ExpectError(t, 403, "Unauthorized")
}

// The signing keyring replaced as docs/licensing.md's "Rotating" says, for a generated
// keyring: its row deleted, licensing restarted (it makes a new one), then the other
// services. The lease key's private half was sealed under the old keyring and no longer
// opens; leases go on (before, every POST /v1/leases was a 500 until someone rotated the
// lease keys by hand): activations retires the key as a rotation would, so the lease an
// app holds still verifies against the JWKS, signs new leases with a new key, announces
// lease_key.rotated and logs what it did.
func TestLeasesGoOnAfterTheKeyringIsReplaced(t *testing.T) {
	t.Parallel()
	s := startStack(t, nil)
	t.Cleanup(s.Stop)
	ctx := t.Context()
	a, c := admin(t, s), anon(t, s)
	key := issueLicense(t, a, lic(product("keyring-rotation")))
	tok := seat(t, c, key, "m")
	held := lease(c, map[string]any{"key": key, "token": tok}).Expect(t, 200).JSON(t)["lease"].(string)
	before := leaseKeys(t, c, "")
	if len(before.Keys) != 1 {
		t.Fatalf("lease keys before %+v", before)
	}
	oldKid := before.Keys[0].Kid
	publicKey := c.Get("/v1/public-key").Expect(t, 200).Body

	db := dbConn(t, s)
	if _, err := db.Exec(ctx, `DELETE FROM licensing.signing_keyring`); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"licensing", "activations"} {
		s.Service(name).Stop()
		if err := s.RestartService(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	if bytes.Equal(c.Get("/v1/public-key").Expect(t, 200).Body, publicKey) {
		t.Fatal("the keyring was not replaced")
	}

	fresh := lease(c, map[string]any{"key": key, "token": tok}).Expect(t, 200).JSON(t)["lease"].(string)
	after := leaseKeys(t, c, "")
	if len(after.Keys) != 2 || after.Keys[0].Status != "active" || after.Keys[0].Kid == oldKid ||
		after.Keys[1].Kid != oldKid || after.Keys[1].Status != "retiring" || after.Keys[1].RetireAt == nil ||
		time.Until(*after.Keys[1].RetireAt) < 7*24*time.Hour {
		t.Fatalf("lease keys after the keyring's replacement %+v (the old one %s)", after, oldKid)
	}
	if _, _, err := verifyLease(held, after); err != nil {
		t.Fatalf("the lease held from before the replacement: %v", err)
	}
	header, _, err := verifyLease(fresh, after)
	if err != nil || header["kid"] != after.Keys[0].Kid {
		t.Fatalf("a lease after the replacement: kid %v, %v", header["kid"], err)
	}
	// One replacement, announced as a rotation; the next lease replaces nothing.
	lease(c, map[string]any{"key": key, "token": tok}).Expect(t, 200)
	if n := len(leaseKeys(t, c, "").Keys); n != 2 {
		t.Fatalf("%d lease keys after a second lease", n)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		p := listEvents(t, newClient(t, a.Base, a.Token), url.Values{"type": {"lease_key.rotated"}})
		if len(p.Events) == 1 {
			if d := p.Events[0].Data; d["kid"] != after.Keys[0].Kid || d["retiring_kid"] != oldKid {
				t.Fatalf("lease_key.rotated %v", d)
			}
			break
		}
		if len(p.Events) > 1 || time.Now().After(deadline) {
			t.Fatalf("lease_key.rotated events: %v", types(p.Events))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := countMsg(t, s.LogPath("activations"), "lease key replaced: its private half does not open under the installation keyring, which was replaced since it was made",
		map[string]string{"level": "WARN", "retired_kid": oldKid, "kid": after.Keys[0].Kid}); n != 1 {
		t.Fatalf("activations logged the replacement %d times, want once", n)
	}
}

// The keyring export of docs/operations.md ("The signing keyring"), run as written: the
// file is a SIGNING_KEYS_FILE document of the installation's keyring, and put back with the
// documented restore (after the row was deleted, as a rotation does) licensing serves the
// same keys again.
func TestTheDocumentedKeyringExportRestoresTheSameKeys(t *testing.T) {
	t.Parallel()
	testkit.RequireTool(t, "psql")
	s := startStack(t, nil)
	t.Cleanup(s.Stop)
	ctx := t.Context()
	c := anon(t, s)
	publicKey := c.Get("/v1/public-key").Expect(t, 200).JSON(t)["publicKey"].(string)
	dir := t.TempDir()
	run := func(script string) { t.Helper(); runDocumented(t, s, dir, script) }
	run(`psql "$DATABASE_URL" -XAtq -c "SELECT convert_from(document, 'UTF8') FROM licensing.signing_keyring" > signing-keys.json`)
	doc, err := os.ReadFile(filepath.Join(dir, "signing-keys.json"))
	if err != nil {
		t.Fatal(err)
	}
	var parts map[string]any
	if err := json.Unmarshal(doc, &parts); err != nil {
		t.Fatalf("the export is not JSON: %v", err)
	}
	for _, secret := range []string{"hmac_secret", "aes_key"} {
		census.noteSecret("keyring "+secret, fmt.Sprint(parts[secret]))
	}
	ring, err := signing.ParseKeyring(doc)
	if err != nil {
		t.Fatalf("the export is not a SIGNING_KEYS_FILE document: %v", err)
	}
	if ring.PublicKeyPEM() != publicKey {
		t.Fatal("the export holds another keyring than the one licensing serves")
	}

	if _, err := dbConn(t, s).Exec(ctx, `DELETE FROM licensing.signing_keyring`); err != nil {
		t.Fatal(err)
	}
	run(`psql "$DATABASE_URL" -X -v ON_ERROR_STOP=1 -v doc="$(cat signing-keys.json)" <<'SQL'
INSERT INTO licensing.signing_keyring (document) VALUES (convert_to(:'doc', 'UTF8'));
SQL`)
	s.Service("licensing").Stop()
	if err := s.RestartService(ctx, "licensing"); err != nil {
		t.Fatal(err)
	}
	if got := c.Get("/v1/public-key").Expect(t, 200).JSON(t)["publicKey"].(string); got != publicKey {
		t.Fatal("after the restore licensing serves another public key")
	}
}

// A storefront webhook's signing secret is sealed under the keyring: once the keyring is
// replaced it no longer opens, and a delivery is answered 503 with a message that says
// what to do (it was a 500), so the provider keeps retrying; once the
// vendor saves the secret again, as docs/licensing.md's rotation says, a delivery is
// received.
func TestStorefrontDeliveriesAfterTheKeyringIsReplacedAskForTheSecretAgain(t *testing.T) {
	t.Parallel()
	s := startStack(t, map[string]string{"MULTI_TENANT": "true"})
	t.Cleanup(s.Stop)
	ctx := t.Context()
	sh := connectShop(t, newTenant(t, s))
	sess := newSession("", uniq("rotated")+"@example.com")
	sh.deliver(checkout(uniq("evt_"), sess, "", uniq("pi_"))).Expect(t, 200)

	if _, err := dbConn(t, s).Exec(ctx, `DELETE FROM licensing.signing_keyring`); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"licensing", "storefront"} {
		s.Service(name).Stop()
		if err := s.RestartService(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	refused := sh.deliver(checkout(uniq("evt_"), sess, "", uniq("pi_")))
	refused.ExpectError(t, 503, "Webhook signing secret must be saved again: the signing keyring was replaced since it was saved, retry")
	sh.c.Post("/v1/storefront/webhooks/"+sh.id()+"/secret", map[string]string{"signing_secret": sh.secret}).Expect(t, 200)
	sh.deliver(checkout(uniq("evt_"), sess, "", uniq("pi_"))).Expect(t, 200)
}
