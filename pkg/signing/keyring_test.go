package signing

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

func TestKeyringRoundTrip(t *testing.T) {
	k := sharedKeyring(t)
	if k.RSABits() != DefaultRSABits || len(k.mat().hmac) != 32 || len(k.mat().aes) != 32 {
		t.Fatalf("NewKeyring: %d bits, hmac %d, aes %d", k.RSABits(), len(k.mat().hmac), len(k.mat().aes))
	}
	doc, err := MarshalKeyring(k)
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]any
	if err := json.Unmarshal(doc, &fields); err != nil || fields["version"] != 1.0 || fields["key_id"] != k.KeyID() {
		t.Fatalf("keyring document: %v %v", fields, err)
	}
	k2, err := ParseKeyring(doc)
	if err != nil {
		t.Fatal(err)
	}
	if k2.KeyID() != k.KeyID() || !k2.mat().priv.Equal(k.mat().priv) || !bytes.Equal(k2.mat().hmac, k.mat().hmac) || !bytes.Equal(k2.mat().aes, k.mat().aes) {
		t.Fatal("ParseKeyring(MarshalKeyring(k)) differs from k")
	}
	// What one replica signs or seals, another replica loading the same document accepts.
	sig, _ := k.SignRSA([]byte("p"))
	blob, _ := k.Seal([]byte("p"))
	if k2.VerifyRSA([]byte("p"), sig) != nil || !k2.VerifyHMAC([]byte("p"), k.SignHMAC([]byte("p"))) {
		t.Fatal("signatures do not carry across replicas")
	}
	if pt, err := k2.Open(blob); err != nil || string(pt) != "p" {
		t.Fatalf("Open across replicas: %v", err)
	}
	// NewKeyringFrom copies the secrets it is given.
	h, a := bytes.Repeat([]byte{1}, 40), bytes.Repeat([]byte{2}, 32)
	k3, err := NewKeyringFrom(k.mat().priv, h, a)
	if err != nil {
		t.Fatal(err)
	}
	h[0], a[0] = 9, 9
	if k3.mat().hmac[0] != 1 || k3.mat().aes[0] != 2 {
		t.Fatal("NewKeyringFrom aliases the caller's slices")
	}
}

func TestParseKeyringRejects(t *testing.T) {
	k := sharedKeyring(t)
	privPEM, _ := PrivateKeyPEM(k.mat().priv)
	b64 := func(n int) string { return base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{3}, n)) }
	doc := func(edit func(map[string]any)) []byte {
		m := map[string]any{"version": 1, "rsa_private_key": privPEM, "hmac_secret": b64(32), "aes_key": b64(32)}
		edit(m)
		out, _ := json.Marshal(m)
		return out
	}
	if _, err := ParseKeyring(doc(func(map[string]any) {})); err != nil {
		t.Fatalf("baseline document rejected: %v", err)
	}
	small, _ := rsa.GenerateKey(rand.Reader, 1024)
	smallDER, _ := x509.MarshalPKCS8PrivateKey(small)
	tests := []struct {
		name string
		in   []byte
	}{
		{"not JSON", []byte("version: 1")},
		{"empty", nil},
		{"trailing data", append(doc(func(map[string]any) {}), []byte("{}")...)},
		{"unknown field (typo)", doc(func(m map[string]any) { m["hmac_key"] = m["hmac_secret"] })},
		{"missing version", doc(func(m map[string]any) { delete(m, "version") })},
		{"version 2", doc(func(m map[string]any) { m["version"] = 2 })},
		{"missing RSA key", doc(func(m map[string]any) { delete(m, "rsa_private_key") })},
		{"missing hmac secret", doc(func(m map[string]any) { delete(m, "hmac_secret") })},
		{"missing aes key", doc(func(m map[string]any) { delete(m, "aes_key") })},
		{"RSA key not PEM", doc(func(m map[string]any) { m["rsa_private_key"] = "MIIE..." })},
		{"RSA key 1024 bits", doc(func(m map[string]any) {
			m["rsa_private_key"] = string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: smallDER}))
		})},
		{"hmac secret not base64", doc(func(m map[string]any) { m["hmac_secret"] = "***" })},
		{"hmac secret 31 bytes", doc(func(m map[string]any) { m["hmac_secret"] = b64(31) })},
		{"aes key 16 bytes", doc(func(m map[string]any) { m["aes_key"] = b64(16) })},
		{"aes key 33 bytes", doc(func(m map[string]any) { m["aes_key"] = b64(33) })},
		{"aes key URL-safe base64", doc(func(m map[string]any) {
			m["aes_key"] = base64.URLEncoding.EncodeToString(bytes.Repeat([]byte{0xfb}, 32))
		})},
		{"key_id of another key", doc(func(m map[string]any) { m["key_id"] = "0000000000000000" })},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseKeyring(tc.in)
			if !errors.Is(err, ErrInvalidKeyring) || got != nil {
				t.Fatalf("ParseKeyring = %v, %v; want ErrInvalidKeyring", got, err)
			}
		})
	}
}

func TestZeroKeyring(t *testing.T) {
	var k Keyring
	if _, err := k.SignRSA(nil); !errors.Is(err, ErrEmptyKeyring) {
		t.Errorf("SignRSA = %v", err)
	}
	if _, err := k.Seal(nil); !errors.Is(err, ErrEmptyKeyring) {
		t.Errorf("Seal = %v", err)
	}
	if _, err := k.Open(nil); !errors.Is(err, ErrEmptyKeyring) {
		t.Errorf("Open = %v", err)
	}
	if _, _, err := k.HMACJSON(nil); !errors.Is(err, ErrEmptyKeyring) {
		t.Errorf("HMACJSON = %v", err)
	}
	if k.VerifyHMAC(nil, SignHMAC(nil, nil)) || k.SignHMAC(nil) != "" || k.KeyID() != "" || k.PublicKey() != nil {
		t.Error("zero keyring answers as if it had keys")
	}
	if _, err := MarshalKeyring(&k); !errors.Is(err, ErrEmptyKeyring) {
		t.Errorf("MarshalKeyring = %v", err)
	}
	if s := fmt.Sprint(k); s != "signing.Keyring{empty}" {
		t.Errorf("String = %q", s)
	}
}

func TestKeyringUnmarshalJSONRefuses(t *testing.T) {
	var v struct{ K Keyring }
	if err := json.Unmarshal([]byte(`{"K":{"version":1}}`), &v); err == nil {
		t.Fatal("json.Unmarshal into a Keyring succeeded and left it empty")
	}
}

// secretForms lists every rendering of k's secret material a careless print could produce.
func secretForms(t *testing.T, k *Keyring) []string {
	t.Helper()
	privPEM, err := PrivateKeyPEM(k.mat().priv)
	if err != nil {
		t.Fatal(err)
	}
	forms := []string{
		k.mat().priv.D.String(), k.mat().priv.D.Text(16), k.mat().priv.D.Text(62),
		k.mat().priv.Primes[0].String(), k.mat().priv.Primes[0].Text(16), k.mat().priv.Primes[1].String(),
		base64.StdEncoding.EncodeToString(k.mat().hmac), hex.EncodeToString(k.mat().hmac), fmt.Sprint(k.mat().hmac), string(k.mat().hmac),
		base64.StdEncoding.EncodeToString(k.mat().aes), hex.EncodeToString(k.mat().aes), fmt.Sprint(k.mat().aes), string(k.mat().aes),
		fmt.Sprintf("%q", k.mat().hmac), fmt.Sprintf("%q", k.mat().aes), fmt.Sprintf("%X", k.mat().hmac), fmt.Sprintf("%X", k.mat().aes),
	}
	// Every line of the PEM body, and a 16-character window of the digits (partial dumps).
	for _, line := range strings.Split(privPEM, "\n") {
		if len(line) >= 32 && !strings.HasPrefix(line, "-----") {
			forms = append(forms, line)
		}
	}
	for _, s := range []string{k.mat().priv.D.String(), k.mat().priv.D.Text(16)} {
		forms = append(forms, s[len(s)/2:len(s)/2+16])
	}
	return forms
}

func leaked(out string, forms []string) string {
	for _, f := range forms {
		if strings.Contains(out, f) {
			if len(f) > 24 {
				f = f[:24] + "..."
			}
			return f
		}
	}
	return ""
}

func TestKeyringNeverPrintsSecrets(t *testing.T) {
	k := sharedKeyring(t)
	forms := secretForms(t, k)

	// The detector itself must work: printing the raw key material does leak.
	if leaked(fmt.Sprintf("%v", k.mat().priv), forms) == "" || leaked(fmt.Sprintf("%x", k.mat().aes), forms) == "" ||
		leaked(fmt.Sprintf("%+v", *k.mat()), forms) == "" {
		t.Fatal("leak detector does not recognise raw key material")
	}

	type holder struct {
		Exported   *Keyring
		Value      Keyring
		unexported Keyring
		unexpPtr   *Keyring
	}
	h := holder{k, *k, *k, k}
	subjects := map[string]any{
		"*Keyring":            k,
		"Keyring":             *k,
		"struct with keyring": h,
		"*struct":             &h,
		"[]Keyring":           []Keyring{*k},
		"map of *Keyring":     map[string]*Keyring{"k": k},
		"any in slice":        []any{k, *k},
	}
	var outputs []string
	for name, v := range subjects {
		for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%d", "%x", "%X", "%q", "%o", "%b", "%e", "%T", "%p"} {
			outputs = append(outputs, name+" "+verb+": "+fmt.Sprintf(verb, v))
		}
		outputs = append(outputs, name+" Sprint: "+fmt.Sprint(v), name+" Sprintln: "+fmt.Sprintln(v))
		j, err := json.Marshal(v)
		outputs = append(outputs, fmt.Sprintf("%s json: %s %v", name, j, err))
		var buf bytes.Buffer
		slog.New(slog.NewJSONHandler(&buf, nil)).Info("keys", "k", v)
		slog.New(slog.NewTextHandler(&buf, nil)).Info("keys", "k", v, slog.Any("attr", v))
		outputs = append(outputs, name+" slog: "+buf.String())
	}
	// Errors from ParseKeyring about a real document must not quote it either.
	doc, _ := MarshalKeyring(k)
	for _, bad := range [][]byte{
		bytes.Replace(doc, []byte(`"version": 1`), []byte(`"version": 7`), 1),
		bytes.Replace(doc, []byte(`"aes_key"`), []byte(`"aes_kee"`), 1),
		bytes.Replace(doc, []byte(`"key_id": "`), []byte(`"key_id": "x`), 1),
		doc[:len(doc)/2],
	} {
		_, err := ParseKeyring(bad)
		if err == nil {
			t.Fatal("broken keyring document accepted")
		}
		outputs = append(outputs, "ParseKeyring error: "+err.Error())
	}

	summaryCount := 0
	for _, out := range outputs {
		if f := leaked(out, forms); f != "" {
			t.Errorf("secret %q leaked in %s", f, out)
		}
		if strings.Contains(out, k.KeyID()) {
			summaryCount++
		}
	}
	// The summary is what is printed instead (so the outputs above are not just empty).
	if summaryCount < len(subjects)*10 {
		t.Errorf("only %d of %d outputs show the key id summary", summaryCount, len(outputs))
	}
	if s := fmt.Sprintf("%+v", k); s != fmt.Sprintf("signing.Keyring{key_id: %s, rsa_bits: 2048, secrets: redacted}", k.KeyID()) {
		t.Errorf("%%+v = %q", s)
	}
	if j, _ := json.Marshal(k); string(j) != fmt.Sprintf(`{"key_id":%q,"rsa_bits":2048,"secrets":"redacted"}`, k.KeyID()) {
		t.Errorf("json = %s", j)
	}
}

// A staged next key (a planned rotation, docs/licensing.md) is kept through the document,
// published, and signs nothing; printing the keyring shows its id, never its material.
func TestKeyringStagedNextKey(t *testing.T) {
	k := sharedKeyring(t)
	if k.NextKeyID() != "" || k.NextPublicKey() != nil || k.NextPublicKeyPEM() != "" {
		t.Fatal("a keyring without a staged key reports one")
	}
	doc, _ := MarshalKeyring(k)
	if bytes.Contains(doc, []byte("next_rsa_private_key")) {
		t.Fatal("a keyring without a staged key writes next_rsa_private_key")
	}
	nextPriv, err := GenerateRSAKey(MinRSABits)
	if err != nil {
		t.Fatal(err)
	}
	staged, err := k.WithNextRSAKey(nextPriv)
	if err != nil {
		t.Fatal(err)
	}
	wantKid, _ := KeyID(&nextPriv.PublicKey)
	wantPEM, _ := PublicKeyPEM(&nextPriv.PublicKey)
	if staged.KeyID() != k.KeyID() || staged.NextKeyID() != wantKid || staged.NextPublicKeyPEM() != wantPEM || !staged.NextPublicKey().Equal(&nextPriv.PublicKey) {
		t.Fatalf("staged: key_id %s next %s, want %s next %s", staged.KeyID(), staged.NextKeyID(), k.KeyID(), wantKid)
	}
	if k.NextKeyID() != "" {
		t.Fatal("WithNextRSAKey changed the keyring it was called on")
	}
	// The current key keeps signing.
	sig, _ := staged.SignRSA([]byte("p"))
	if k.VerifyRSA([]byte("p"), sig) != nil || VerifyRSA(&nextPriv.PublicKey, []byte("p"), sig) == nil {
		t.Fatal("a keyring with a staged key does not sign with its current key")
	}

	doc, err = MarshalKeyring(staged)
	if err != nil {
		t.Fatal(err)
	}
	again, err := ParseKeyring(doc)
	if err != nil || again.KeyID() != k.KeyID() || again.NextKeyID() != wantKid {
		t.Fatalf("ParseKeyring(MarshalKeyring(staged)): %v %v", again, err)
	}

	// Promotion, as the documented jq step does it: the next key becomes rsa_private_key.
	var fields map[string]any
	if err := json.Unmarshal(doc, &fields); err != nil {
		t.Fatal(err)
	}
	fields["rsa_private_key"] = fields["next_rsa_private_key"]
	delete(fields, "next_rsa_private_key")
	delete(fields, "key_id")
	promotedDoc, _ := json.Marshal(fields)
	promoted, err := ParseKeyring(promotedDoc)
	if err != nil || promoted.KeyID() != wantKid || promoted.NextKeyID() != "" {
		t.Fatalf("promoted: %v %v", promoted, err)
	}

	// Refusals name the field and never quote the key.
	var withCurrent map[string]any
	_ = json.Unmarshal(doc, &withCurrent)
	withCurrent["next_rsa_private_key"] = withCurrent["rsa_private_key"]
	sameDoc, _ := json.Marshal(withCurrent)
	if _, err := ParseKeyring(sameDoc); !errors.Is(err, ErrInvalidKeyring) || !strings.Contains(err.Error(), "next_rsa_private_key is the current rsa_private_key") {
		t.Fatalf("next key equal to the current one: %v", err)
	}
	withCurrent["next_rsa_private_key"] = "-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n"
	brokenDoc, _ := json.Marshal(withCurrent)
	if _, err := ParseKeyring(brokenDoc); !errors.Is(err, ErrInvalidKeyring) || !strings.Contains(err.Error(), "next_rsa_private_key") || strings.Contains(err.Error(), "not a key") {
		t.Fatalf("a broken next key: %v", err)
	}

	forms := secretForms(t, &Keyring{secrets: func() *material { return &material{priv: nextPriv} }})[:6]
	for _, out := range []string{fmt.Sprintf("%v %+v %#v %s", staged, staged, staged, staged), func() string {
		var buf bytes.Buffer
		slog.New(slog.NewJSONHandler(&buf, nil)).Info("keys", "keyring", staged)
		return buf.String()
	}()} {
		if f := leaked(out, forms); f != "" {
			t.Errorf("the staged key's secret %q leaked in %s", f, out)
		}
		if !strings.Contains(out, wantKid) {
			t.Errorf("the staged key's id is not shown in %s", out)
		}
	}
}
