// verify.go: check an offline license export with the server's public key, no network.
//
//	go run verify.go public-key.pem license.json
package main

import (
	"bytes"
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
	"time"
)

func main() {
	pemBytes, _ := os.ReadFile(os.Args[1])
	export, _ := os.ReadFile(os.Args[2])

	// The signed bytes are the "license" object exactly as the server wrote it.
	var doc struct {
		License   json.RawMessage `json:"license"`
		Signature string          `json:"signature"`
	}
	if err := json.Unmarshal(export, &doc); err != nil {
		panic(err)
	}
	var signed bytes.Buffer
	if err := json.Compact(&signed, doc.License); err != nil {
		panic(err)
	}
	block, _ := pem.Decode(pemBytes)
	pub, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		panic(err)
	}
	sig, _ := base64.StdEncoding.DecodeString(doc.Signature)
	digest := sha256.Sum256(signed.Bytes())
	if err := rsa.VerifyPKCS1v15(pub.(*rsa.PublicKey), crypto.SHA256, digest[:], sig); err != nil {
		fmt.Println("INVALID signature")
		os.Exit(1)
	}
	var lic struct {
		Key       string             `json:"key"`
		Tier      string             `json:"tier"`
		ProductID string             `json:"product_id"`
		ExpiresAt *time.Time         `json:"expires_at"`
		Limits    map[string]float64 `json:"limits"`
	}
	_ = json.Unmarshal(doc.License, &lic)
	if lic.ExpiresAt != nil && time.Now().After(*lic.ExpiresAt) {
		fmt.Println("signature OK, but the license EXPIRED at", lic.ExpiresAt)
		os.Exit(1)
	}
	fmt.Printf("valid: %s tier %s for %s, limits %v\n", lic.Key, lic.Tier, lic.ProductID, lic.Limits)
}
