package server

import (
	"crypto/rsa"
	"encoding/base64"
	"math/big"
	"testing"

	"github.com/keyhouse/keyhouse/pkg/signing"
	licensingv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/licensing/v1"
)

// jwkPublicKey rebuilds an RSA key from a JWK as any JOSE library does.
func jwkPublicKey(t *testing.T, k *licensingv1.SigningPublicKey) *rsa.PublicKey {
	t.Helper()
	n, errN := base64.RawURLEncoding.DecodeString(k.GetN())
	e, errE := base64.RawURLEncoding.DecodeString(k.GetE())
	if errN != nil || errE != nil || k.GetKty() != "RSA" || k.GetAlg() != "RS256" || k.GetUse() != "sig" {
		t.Fatalf("not an RSA signing JWK: %v", k)
	}
	return &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}
}

// GET /v1/public-keys lists the current key (the one GET /v1/public-key serves), then the
// staged next key during a planned rotation; each entry's JWK and PEM are the same key.
func TestListPublicKeysPublishesTheStagedNextKey(t *testing.T) {
	fx := newFixture(t, false)
	resp, err := fx.srv.ListPublicKeys(t.Context(), &licensingv1.ListPublicKeysRequest{})
	if err != nil || len(resp.GetKeys()) != 1 {
		t.Fatalf("without a staged key: %v %v", resp, err)
	}
	current := resp.GetKeys()[0]
	if current.GetStatus() != "current" || current.GetKid() != testKeyring.KeyID() || current.GetPem() != testKeyring.PublicKeyPEM() ||
		!jwkPublicKey(t, current).Equal(testKeyring.PublicKey()) {
		t.Fatalf("current key %v", current)
	}

	next, err := signing.GenerateRSAKey(signing.MinRSABits)
	if err != nil {
		t.Fatal(err)
	}
	staged, err := testKeyring.WithNextRSAKey(next)
	if err != nil {
		t.Fatal(err)
	}
	srv := New(Config{Keyring: staged}, fx.store, fx.billing, fx.seats)
	resp, err = srv.ListPublicKeys(t.Context(), &licensingv1.ListPublicKeysRequest{})
	if err != nil || len(resp.GetKeys()) != 2 {
		t.Fatalf("with a staged key: %v %v", resp, err)
	}
	if got := resp.GetKeys()[0]; got.GetStatus() != "current" || got.GetKid() != testKeyring.KeyID() {
		t.Fatalf("first key %v, want the current one", got)
	}
	got := resp.GetKeys()[1]
	if got.GetStatus() != "next" || got.GetKid() != staged.NextKeyID() || got.GetPem() != staged.NextPublicKeyPEM() ||
		!jwkPublicKey(t, got).Equal(&next.PublicKey) {
		t.Fatalf("next key %v", got)
	}
	if pk, _ := srv.GetPublicKey(t.Context(), &licensingv1.GetPublicKeyRequest{}); pk.GetPublicKey() != testKeyring.PublicKeyPEM() {
		t.Fatal("GET /v1/public-key serves another key than the current one while a key is staged")
	}
}
