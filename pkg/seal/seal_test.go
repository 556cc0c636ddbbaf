package seal_test

import (
	"bytes"
	"testing"

	"github.com/keyhouse/keyhouse/pkg/seal"
	"github.com/keyhouse/keyhouse/pkg/signing"
)

// A value opens only for the purpose it was sealed for, and only under its keyring.
func TestPurposesDoNotMix(t *testing.T) {
	k, err := signing.NewKeyring()
	if err != nil {
		t.Fatal(err)
	}
	other, _ := signing.NewKeyring()
	blob, err := seal.Seal(k, seal.PurposeWebhookSecret, []byte("whsec_abc"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(blob, []byte("whsec_abc")) {
		t.Fatal("the sealed value holds the plaintext")
	}
	if got, err := seal.Open(k, seal.PurposeWebhookSecret, blob); err != nil || string(got) != "whsec_abc" {
		t.Fatalf("open: %q %v", got, err)
	}
	if _, err := seal.Open(k, seal.PurposeBuyerEmail, blob); err == nil {
		t.Fatal("a webhook secret opened as a buyer email")
	}
	if _, err := seal.Open(other, seal.PurposeWebhookSecret, blob); err == nil {
		t.Fatal("opened under another keyring")
	}
	// A .lic file is sealed under the same key without a purpose: it never opens here.
	lic, _ := k.Seal([]byte(`{"key":"K"}`))
	if _, err := seal.Open(k, seal.PurposeWebhookSecret, lic); err == nil {
		t.Fatal("a license file opened as a webhook secret")
	}
}
