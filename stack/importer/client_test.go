package importer

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// TestImportBatchesAndHonoursRetryAfter: 2,500 licenses are three calls; a 429 and a 503
// are retried after the Retry-After the server sent; the summary adds the batches up.
func TestImportBatchesAndHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var sizes []int
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if r.URL.Path != "/v1/licenses/import" || r.Header.Get("Authorization") != "Bearer k" {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		switch calls {
		case 2:
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte(`{"error":"Too many requests"}`))
			return
		case 3:
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		var body struct {
			Licenses   []License `json:"licenses"`
			OnConflict string    `json:"on_conflict"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		sizes = append(sizes, len(body.Licenses))
		msg := "tier is required"
		_ = json.NewEncoder(w).Encode(map[string]any{"imported": len(body.Licenses) - 1, "invalid": 1,
			"results": []Result{{Index: 0, Result: "invalid", Error: &msg}}})
	}))
	defer srv.Close()
	var waits []time.Duration
	c := &Client{URL: srv.URL, APIKey: "k", OnConflict: "skip",
		Sleep: func(_ context.Context, d time.Duration) error { waits = append(waits, d); return nil }}
	sum, err := c.Import(context.Background(), make([]License, 2500))
	if err != nil {
		t.Fatal(err)
	}
	if len(sizes) != 3 || sizes[0] != 1000 || sizes[1] != 1000 || sizes[2] != 500 {
		t.Fatalf("batches %v", sizes)
	}
	if len(waits) != 2 || waits[0] != 7*time.Second || waits[1] != 2*time.Second {
		t.Fatalf("waits %v, want the Retry-After values", waits)
	}
	if sum.Imported != 2497 || sum.Invalid != 3 || sum.Retries != 2 || len(sum.Problems) != 3 || sum.Problems[1].Index != 1000 {
		t.Fatalf("summary %+v", sum)
	}
}
