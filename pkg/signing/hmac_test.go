package signing

import (
	"strings"
	"testing"
)

func TestHMAC(t *testing.T) {
	// RFC 4231 test case 2.
	key, data := []byte("Jefe"), []byte("what do ya want for nothing?")
	const want = "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
	if got := SignHMAC(key, data); got != want {
		t.Fatalf("SignHMAC = %s, want %s (RFC 4231 case 2)", got, want)
	}
	tests := []struct {
		name   string
		secret []byte
		data   []byte
		sig    string
		ok     bool
	}{
		{"own signature verifies", key, data, want, true},
		{"upper-case hex accepted", key, data, strings.ToUpper(want), true},
		{"mixed-case hex accepted", key, data, strings.ToUpper(want[:10]) + want[10:], true},
		{"modified payload rejected", key, []byte("what do ya want for nothing!"), want, false},
		{"other secret rejected", []byte("Jeff"), data, want, false},
		{"one digit changed rejected", key, data, want[:63] + "2", false},
		{"truncated rejected", key, data, want[:62], false},
		{"prefix of hex rejected", key, data, want[:32], false},
		{"extra digits rejected", key, data, want + "00", false},
		{"whitespace rejected", key, data, want[:63] + " ", false},
		{"non-hex rejected", key, data, strings.Repeat("g", 64), false},
		{"empty rejected", key, data, "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := VerifyHMAC(tc.secret, tc.data, tc.sig); got != tc.ok {
				t.Fatalf("VerifyHMAC = %v, want %v", got, tc.ok)
			}
		})
	}
}

func TestKeyringHMACJSON(t *testing.T) {
	k := sharedKeyring(t)
	obj := NewObject().Add("key", "KH-1").Add("tier", "pro").Add("product_id", "p").Add("expires_at", nil).Add("limits", map[string]float64{})
	payload, sig, err := k.HMACJSON(obj)
	if err != nil {
		t.Fatal(err)
	}
	if string(payload) != `{"key":"KH-1","tier":"pro","product_id":"p","expires_at":null,"limits":{}}` {
		t.Fatalf("payload = %s", payload)
	}
	if !k.VerifyHMAC(payload, sig) || k.SignHMAC(payload) != sig || len(sig) != 64 {
		t.Fatalf("HMACJSON sig %q does not verify", sig)
	}
	payload2, sig2, err := k.SignJSON(obj)
	if err != nil || string(payload2) != string(payload) || k.VerifyRSA(payload2, sig2) != nil {
		t.Fatalf("SignJSON: %v", err)
	}
}
