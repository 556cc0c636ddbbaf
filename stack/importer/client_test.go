package importer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
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
	ls := make([]License, 2500)
	for i := range ls {
		ls[i].Key = fmt.Sprintf("KEY-%06d", i)
	}
	sum, err := c.Import(context.Background(), ls)
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

// importServer answers imports as the API does for new keys, and refuses a call with a
// key of conflicts as on_conflict "fail" does (409 naming the item); it records the keys
// of every call.
func importServer(t *testing.T, conflicts ...string) (*httptest.Server, *[][]string) {
	t.Helper()
	var mu sync.Mutex
	var calls [][]string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct{ Licenses []License }
		_ = json.NewDecoder(r.Body).Decode(&body)
		keys := make([]string, len(body.Licenses))
		seen := map[string]bool{}
		for i, l := range body.Licenses {
			if seen[l.Key] {
				t.Errorf("call %d sent key %s twice", len(calls), l.Key)
			}
			seen[l.Key], keys[i] = true, l.Key
			for _, k := range conflicts {
				if l.Key == k {
					w.WriteHeader(http.StatusConflict)
					_ = json.NewEncoder(w).Encode(map[string]string{"error": fmt.Sprintf(`licenses[%d].key already exists with other terms; on_conflict is "fail", so nothing was imported`, i)})
					return
				}
			}
		}
		mu.Lock()
		calls = append(calls, keys)
		mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]any{"imported": len(keys)})
	}))
	t.Cleanup(srv.Close)
	return srv, &calls
}

// Rows with one key are one license: the first is sent once, a later one with the same
// terms is a repeat, and one with other terms is skipped naming the first's place, in
// the same batch or a later one, while every other license still goes.
func TestImportSendsAKeyOnceAndReportsItsOtherTermsByPlace(t *testing.T) {
	t.Parallel()
	srv, calls := importServer(t)
	ls := make([]License, 1500)
	for i := range ls {
		ls[i] = License{Key: fmt.Sprintf("KEY-%06d", i), ProductID: "p", Tier: "pro", IssuedTo: "a@example.com", Where: fmt.Sprintf("sales.csv line %d", i+2)}
	}
	member := "ABCD-EFGH-JKMN-PQRS-TVWX-YZ01-2345" // a Keyhouse-shaped key: any spelling is it
	ls[3].Key, ls[7].Key, ls[1200].Key = member, strings.ToLower(member), member
	ls[1200].Tier = "enterprise"
	sum, err := (&Client{URL: srv.URL, APIKey: "k"}).Import(context.Background(), ls)
	if err != nil {
		t.Fatal(err)
	}
	sent := 0
	for _, c := range *calls {
		sent += len(c)
	}
	if sent != 1498 || sum.Imported != 1498 || sum.Repeated != 1 || sum.Skipped != 1 || sum.RepeatedWithOtherTerms != 1 {
		t.Fatalf("sent %d, summary %+v; want 1498 sent and imported, 1 repeated, 1 skipped", sent, sum)
	}
	if len(sum.Problems) != 1 || ls[sum.Problems[0].Index].Where != "sales.csv line 1202" ||
		*sum.Problems[0].Error != "the key is also on sales.csv line 5, with other terms; that license is the one imported" {
		t.Fatalf("problems %+v", sum.Problems)
	}
}

// A 409 under on_conflict "fail" is reported by the place in the file of the license it
// names, not by its index in the call.
func TestImportReportsAConflictByItsPlaceInTheFile(t *testing.T) {
	t.Parallel()
	srv, _ := importServer(t, "KEY-001200")
	ls := make([]License, 1500)
	for i := range ls {
		ls[i] = License{Key: fmt.Sprintf("KEY-%06d", i), Where: fmt.Sprintf("sales.csv line %d", i+2)}
	}
	ls[5].Key = ls[4].Key // a repeat before the batch boundary shifts every index after it
	_, err := (&Client{URL: srv.URL, APIKey: "k", OnConflict: "fail"}).Import(context.Background(), ls)
	want := "sales.csv line 1202: key already exists with other terms, and --on-conflict is fail: nothing from sales.csv line 1003 on was imported (--on-conflict skip imports the others)"
	if err == nil || err.Error() != want {
		t.Fatalf("error %v\nwant  %s", err, want)
	}
}

// A license the API's input policy would refuse the whole call for (a control character
// in a name, an export saved as Latin-1) is that license's problem alone: it is reported
// invalid by its place, never sent, and the others of its call are sent.
func TestImportReportsAFieldTheInputPolicyRefusesByPlace(t *testing.T) {
	t.Parallel()
	var sent []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct{ Licenses []License }
		_ = json.NewDecoder(r.Body).Decode(&body)
		for _, l := range body.Licenses {
			sent = append(sent, l.Key+" "+l.IssuedTo)
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"imported": len(body.Licenses)})
	}))
	defer srv.Close()
	ls := []License{
		{Key: "KEY-000001", IssuedTo: "Zoë Ünïcode", Where: "a.csv line 2"},
		{Key: "KEY-000002", IssuedTo: "Tab\tName", Where: "a.csv line 3"},
		{Key: "KEY-000003", IssuedTo: "Zo\xeb", Where: "a.csv line 4"},
		{Key: "KEY-000004", IssuedTo: "ok", Notes: note("two\nlines"), Where: "a.csv line 5"},
	}
	sum, err := (&Client{URL: srv.URL, APIKey: "k"}).Import(context.Background(), ls)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(sent, "; "); got != "KEY-000001 Zoë Ünïcode; KEY-000004 ok" {
		t.Errorf("sent %s", got)
	}
	var problems []string
	for _, p := range sum.Problems {
		problems = append(problems, fmt.Sprintf("%s: %s: %s", ls[p.Index].Where, p.Result, *p.Error))
	}
	if got := strings.Join(problems, "\n"); sum.Invalid != 2 || sum.Imported != 2 || got != "a.csv line 3: invalid: issued_to must not contain control characters\na.csv line 4: invalid: issued_to is not valid UTF-8" {
		t.Errorf("invalid %d, imported %d, problems:\n%s", sum.Invalid, sum.Imported, got)
	}
}

// A call interrupted before its answer (Ctrl-C, a timeout) may have been applied: the
// error says so and that running the import again is safe, where it said that nothing from
// that call on was imported.
func TestImportInterruptedDuringACallSaysItMayHaveBeenApplied(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // read, so that the server notices the client leave
		close(arrived)
		<-r.Context().Done() // the client goes away before the answer
	}))
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-arrived; cancel() }()
	ls := []License{{Key: "KEY-1", ProductID: "p", Tier: "pro", IssuedTo: "a@example.com", Where: "big.csv line 2"}}
	_, err := (&Client{URL: srv.URL, APIKey: "k"}).Import(ctx, ls)
	if err == nil || !strings.HasPrefix(err.Error(), "the call importing from big.csv line 2 on got no answer (") ||
		!strings.HasSuffix(err.Error(), "): the server may have imported it; nothing after it was sent. Run the same import again: licenses already imported answer unchanged") ||
		!errors.Is(err, context.Canceled) {
		t.Fatalf("error %v", err)
	}
}
