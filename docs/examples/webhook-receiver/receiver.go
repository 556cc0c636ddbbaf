// receiver.go: a Keyhouse webhook receiver that verifies Keyhouse-Signature and skips
// events it has already handled.
//
//	WEBHOOK_SECRET=whsec_… go run receiver.go [listen address, default 127.0.0.1:0]
package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// tolerance refuses replays of old deliveries: the signed timestamp must be this recent.
const tolerance = 5 * time.Minute

// verify checks the header `t=<unix>,v1=<hex>[,v1=<hex>…]` against the exact body: one
// v1 must be HMAC-SHA256(secret, "<t>.<body>"). While secret rolls overlap, the header
// has one v1 per live secret.
func verify(header string, body []byte, secret string) bool {
	var ts string
	var sigs []string
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(part, "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			sigs = append(sigs, v)
		}
	}
	unix, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || time.Since(time.Unix(unix, 0)).Abs() > tolerance {
		return false
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts + "."))
	mac.Write(body)
	want := mac.Sum(nil)
	for _, s := range sigs {
		if got, err := hex.DecodeString(s); err == nil && hmac.Equal(got, want) {
			return true
		}
	}
	return false
}

func main() {
	secret := os.Getenv("WEBHOOK_SECRET")
	addr := "127.0.0.1:0"
	if len(os.Args) > 1 {
		addr = os.Args[1]
	}
	var mu sync.Mutex
	seen := map[string]bool{} // use your database in production: deliveries are at least once
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil || !verify(r.Header.Get("Keyhouse-Signature"), body, secret) {
			fmt.Println("rejected")
			http.Error(w, "invalid signature", http.StatusBadRequest)
			return
		}
		var event struct {
			ID   string `json:"id"`
			Type string `json:"type"`
		}
		if err := json.Unmarshal(body, &event); err != nil {
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		mu.Lock()
		dup := seen[event.ID]
		seen[event.ID] = true
		mu.Unlock()
		if dup {
			fmt.Println("duplicate", event.ID)
		} else {
			fmt.Println("verified", event.ID, event.Type) // handle the event here
		}
		w.WriteHeader(http.StatusNoContent) // answer 2xx fast; do slow work afterwards
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		panic(err)
	}
	fmt.Println("listening on", ln.Addr().(*net.TCPAddr).Port)
	panic(http.Serve(ln, nil))
}
