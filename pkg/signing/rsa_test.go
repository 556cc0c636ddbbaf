package signing

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRSASignVerify(t *testing.T) {
	k := sharedKeyring(t)
	pub := k.PublicKey()
	payload := []byte(`{"key":"KH-1","tier":"pro"}`)
	sig, err := k.SignRSA(payload)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := base64.StdEncoding.Strict().DecodeString(sig)
	if err != nil || len(raw) != 256 {
		t.Fatalf("signature is not padded std base64 of 256 bytes: %q (%v)", sig, err)
	}
	if err := VerifyRSA(pub, payload, sig); err != nil {
		t.Fatalf("VerifyRSA(own signature) = %v", err)
	}
	other, err := GenerateRSAKey(2048)
	if err != nil {
		t.Fatal(err)
	}
	flipped := []byte(sig)
	if flipped[10] == 'A' {
		flipped[10] = 'B'
	} else {
		flipped[10] = 'A'
	}
	// Line-wrapped base64 (as `openssl base64` writes it) is the same signature.
	wrapped := sig[:64] + "\n" + sig[64:128] + "\r\n" + sig[128:] + "\n"
	if err := VerifyRSA(pub, payload, wrapped); err != nil {
		t.Fatalf("VerifyRSA(line-wrapped signature) = %v", err)
	}
	for name, tc := range map[string]struct {
		pub     *rsa.PublicKey
		payload []byte
		sig     string
	}{
		"modified payload":            {pub, []byte(`{"key":"KH-2","tier":"pro"}`), sig},
		"payload with trailing space": {pub, append(append([]byte{}, payload...), ' '), sig},
		"other key":                   {&other.PublicKey, payload, sig},
		"modified signature":          {pub, payload, string(flipped)},
		"URL-safe alphabet not std":   {pub, payload, strings.NewReplacer("+", "-", "/", "_").Replace(sig) + "-"},
		"unpadded":                    {pub, payload, strings.TrimRight(sig, "=") + "A"},
		"empty signature":             {pub, payload, ""},
		"not base64":                  {pub, payload, "!!!!"},
		"truncated signature":         {pub, payload, sig[:len(sig)-4]},
		"signature with inner space":  {pub, payload, sig[:64] + " " + sig[64:]},
	} {
		t.Run(name, func(t *testing.T) {
			if err := VerifyRSA(tc.pub, tc.payload, tc.sig); !errors.Is(err, ErrBadSignature) {
				t.Fatalf("VerifyRSA = %v, want ErrBadSignature", err)
			}
		})
	}
}

func TestRSAKeysBelow2048Refused(t *testing.T) {
	small, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := GenerateRSAKey(1024); !errors.Is(err, ErrKeyTooSmall) {
		t.Errorf("GenerateRSAKey(1024) = %v", err)
	}
	if _, err := SignRSA(small, []byte("x")); !errors.Is(err, ErrKeyTooSmall) {
		t.Errorf("SignRSA(1024-bit) = %v", err)
	}
	if err := VerifyRSA(&small.PublicKey, []byte("x"), "AAAA"); !errors.Is(err, ErrKeyTooSmall) {
		t.Errorf("VerifyRSA(1024-bit) = %v", err)
	}
	der, _ := x509.MarshalPKCS8PrivateKey(small)
	if _, err := ParsePrivateKeyPEM(string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))); !errors.Is(err, ErrKeyTooSmall) {
		t.Errorf("ParsePrivateKeyPEM(1024-bit) = %v", err)
	}
	pder, _ := x509.MarshalPKIXPublicKey(&small.PublicKey)
	if _, err := ParsePublicKeyPEM(string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pder}))); !errors.Is(err, ErrKeyTooSmall) {
		t.Errorf("ParsePublicKeyPEM(1024-bit) = %v", err)
	}
	if _, err := NewKeyringFrom(small, make([]byte, 32), make([]byte, 32)); !errors.Is(err, ErrKeyTooSmall) {
		t.Errorf("NewKeyringFrom(1024-bit) = %v", err)
	}
}

func TestPEMRoundTrip(t *testing.T) {
	k := sharedKeyring(t)
	pubPEM := k.PublicKeyPEM()
	if !strings.HasPrefix(pubPEM, "-----BEGIN PUBLIC KEY-----\n") || !strings.HasSuffix(pubPEM, "-----END PUBLIC KEY-----\n") {
		t.Fatalf("public key PEM is not SPKI: %q", pubPEM)
	}
	pub, err := ParsePublicKeyPEM(pubPEM)
	if err != nil || !pub.Equal(k.PublicKey()) {
		t.Fatalf("ParsePublicKeyPEM round trip: %v", err)
	}
	doc, err := MarshalKeyring(k)
	if err != nil {
		t.Fatal(err)
	}
	k2, err := ParseKeyring(doc)
	if err != nil {
		t.Fatal(err)
	}
	privPEM, err := PrivateKeyPEM(k2.mat().priv)
	if err != nil || !strings.HasPrefix(privPEM, "-----BEGIN PRIVATE KEY-----\n") {
		t.Fatalf("PrivateKeyPEM is not PKCS #8: %v", err)
	}
	priv, err := ParsePrivateKeyPEM("\n  " + privPEM + "\n\n")
	if err != nil || !priv.Equal(k.mat().priv) {
		t.Fatalf("ParsePrivateKeyPEM round trip: %v", err)
	}
	pkcs1 := string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(priv)}))
	if p1, err := ParsePrivateKeyPEM(pkcs1); err != nil || !p1.Equal(priv) {
		t.Fatalf("ParsePrivateKeyPEM(PKCS #1): %v", err)
	}

	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ecDER, _ := x509.MarshalPKCS8PrivateKey(ec)
	ecPubDER, _ := x509.MarshalPKIXPublicKey(&ec.PublicKey)
	for name, in := range map[string]string{
		"empty":                   "",
		"garbage":                 "not a pem",
		"two blocks":              privPEM + privPEM,
		"trailing text":           privPEM + "junk",
		"public given as private": pubPEM,
		"EC key":                  string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: ecDER})),
		"corrupt DER":             string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte{0x30, 0x03, 1, 2, 3}})),
	} {
		if _, err := ParsePrivateKeyPEM(in); !errors.Is(err, ErrBadPEM) {
			t.Errorf("ParsePrivateKeyPEM(%s) = %v, want ErrBadPEM", name, err)
		}
	}
	for name, in := range map[string]string{
		"private given as public": privPEM,
		"EC key":                  string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: ecPubDER})),
		"trailing text":           pubPEM + "x",
	} {
		if _, err := ParsePublicKeyPEM(in); !errors.Is(err, ErrBadPEM) {
			t.Errorf("ParsePublicKeyPEM(%s) = %v, want ErrBadPEM", name, err)
		}
	}
}

func TestKeyIDIsSHA256OfSPKIPrefix(t *testing.T) {
	k := sharedKeyring(t)
	der, _ := x509.MarshalPKIXPublicKey(k.PublicKey())
	sum := sha256.Sum256(der)
	if want := hex.EncodeToString(sum[:])[:16]; k.KeyID() != want {
		t.Fatalf("KeyID = %q, want %q", k.KeyID(), want)
	}
	other, _ := GenerateRSAKey(2048)
	if id, _ := KeyID(&other.PublicKey); id == k.KeyID() || len(id) != 16 {
		t.Fatalf("KeyID of a different key = %q (ours %q)", id, k.KeyID())
	}
}

// TestRSAInteropWithOpenSSL checks both directions against the openssl CLI: our signature
// verifies with `openssl dgst -sha256 -verify` on our SPKI PEM (and a modified payload
// does not), openssl's signature with our PKCS #8 PEM verifies with VerifyRSA, and
// openssl's DER of our public key hashes to KeyID.
func TestRSAInteropWithOpenSSL(t *testing.T) {
	openssl := requireTool(t, "openssl")
	k := sharedKeyring(t)
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	payload, err := Marshal(NewObject().Add("key", "KH-1").Add("tier", "pro").Add("product_id", "app<&>\u2028").Add("expires_at", nil).Add("limits", map[string]int{"users": 5}))
	if err != nil {
		t.Fatal(err)
	}
	sig, err := k.SignRSA(payload)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := base64.StdEncoding.DecodeString(sig)
	pubPath := write("pub.pem", []byte(k.PublicKeyPEM()))
	sigPath := write("sig.bin", raw)
	payloadPath := write("payload.json", payload)
	tamperedPath := write("tampered.json", append(append([]byte{}, payload[:len(payload)-1]...), ' ', '}'))

	out, err := run(t, nil, openssl, "dgst", "-sha256", "-verify", pubPath, "-signature", sigPath, payloadPath)
	if err != nil || !strings.Contains(string(out), "Verified OK") {
		t.Fatalf("openssl did not verify our signature: %v %s", err, out)
	}
	if out, err := run(t, nil, openssl, "dgst", "-sha256", "-verify", pubPath, "-signature", sigPath, tamperedPath); err == nil {
		t.Fatalf("openssl verified our signature over a modified payload: %s", out)
	}

	doc, _ := MarshalKeyring(k)
	k2, _ := ParseKeyring(doc)
	privPEM, _ := PrivateKeyPEM(k2.mat().priv)
	privPath := write("priv.pem", []byte(privPEM))
	osslSigPath := filepath.Join(dir, "ossl.sig")
	if _, err := run(t, nil, openssl, "dgst", "-sha256", "-sign", privPath, "-out", osslSigPath, payloadPath); err != nil {
		t.Fatalf("openssl could not sign with our PKCS #8 key: %v", err)
	}
	osslSig, err := os.ReadFile(osslSigPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := VerifyRSA(k.PublicKey(), payload, base64.StdEncoding.EncodeToString(osslSig)); err != nil {
		t.Fatalf("VerifyRSA(openssl signature) = %v", err)
	}
	if base64.StdEncoding.EncodeToString(osslSig) != sig {
		t.Errorf("PKCS #1 v1.5 is deterministic, but openssl's signature differs from ours")
	}

	der, err := run(t, nil, openssl, "pkey", "-pubin", "-in", pubPath, "-outform", "DER")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(der)
	if got := hex.EncodeToString(sum[:8]); got != k.KeyID() {
		t.Errorf("openssl DER hashes to %s, KeyID = %s", got, k.KeyID())
	}

	// A PKCS #1 key as `openssl rsa -traditional` writes it parses to the same key.
	trad, err := run(t, nil, openssl, "rsa", "-in", privPath, "-traditional")
	if err != nil {
		t.Fatal(err)
	}
	if p, err := ParsePrivateKeyPEM(string(trad)); err != nil || !p.Equal(k2.mat().priv) {
		t.Errorf("ParsePrivateKeyPEM(openssl -traditional) = %v", err)
	}
}
