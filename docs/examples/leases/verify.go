// verify.go: check a Keyhouse lease offline against the lease keys (JWKS), standard
// library only.
//
//	go run verify.go lease-keys.json lease.jwt
package main

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"
)

func main() {
	var jwks struct {
		Keys []struct{ Kid, Crv, X string } `json:"keys"`
	}
	raw, err := os.ReadFile(os.Args[1])
	fail(err)
	fail(json.Unmarshal(raw, &jwks))
	lease, err := os.ReadFile(os.Args[2])
	fail(err)
	parts := strings.Split(strings.TrimSpace(string(lease)), ".")
	if len(parts) != 3 {
		fail(fmt.Errorf("not a compact JWS"))
	}
	var header struct{ Alg, Kid, Typ string }
	fail(json.Unmarshal(decode(parts[0]), &header))
	if header.Alg != "EdDSA" || header.Typ != "keyhouse-lease+jwt" {
		fail(fmt.Errorf("INVALID header %+v", header))
	}
	// The key named by kid; a key missing from the set (retired, or never ours) fails.
	var pub ed25519.PublicKey
	for _, k := range jwks.Keys {
		if k.Kid == header.Kid && k.Crv == "Ed25519" {
			pub = decode(k.X)
		}
	}
	if len(pub) != ed25519.PublicKeySize || !ed25519.Verify(pub, []byte(parts[0]+"."+parts[1]), decode(parts[2])) {
		fmt.Println("INVALID signature")
		os.Exit(1)
	}
	var claims struct {
		Sub          string   `json:"sub"`
		InstanceID   string   `json:"instance_id"`
		Exp          int64    `json:"exp"`
		RenewAfter   int64    `json:"renew_after"`
		Entitlements []string `json:"entitlements"`
	}
	fail(json.Unmarshal(decode(parts[1]), &claims))
	if time.Now().Unix() >= claims.Exp {
		fmt.Println("signature OK, but the lease EXPIRED")
		os.Exit(1)
	}
	fmt.Printf("valid: %s on %s until %s, entitlements %v\n", claims.Sub, claims.InstanceID,
		time.Unix(claims.Exp, 0).UTC().Format(time.RFC3339), claims.Entitlements)
}

func decode(s string) []byte {
	b, err := base64.RawURLEncoding.DecodeString(s)
	fail(err)
	return b
}

func fail(err error) {
	if err != nil {
		fmt.Println(err)
		os.Exit(2)
	}
}
