package e2e

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/stack"
	"github.com/keyhouse/keyhouse/stack/importer"
)

// scaleCSV repeats the sample's rows to n rows, each with a fresh key of the sample key's
// shape (every hex digit replaced), so the file reads like a large real export.
func scaleCSV(t *testing.T, sample, keyColumn string, n int) []byte {
	t.Helper()
	f, err := os.Open(sample)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	col := -1
	for i, h := range recs[0] {
		if strings.EqualFold(h, keyColumn) {
			col = i
		}
	}
	var buf bytes.Buffer
	w := csv.NewWriter(&buf)
	_ = w.Write(recs[0])
	for i := 0; i < n; i++ {
		row := append([]string(nil), recs[1+i%(len(recs)-1)]...)
		if row[col] != "" {
			row[col] = reshape(row[col], i)
		}
		_ = w.Write(row)
	}
	w.Flush()
	return buf.Bytes()
}

// reshape keeps the key's shape (separators, length) and writes i and the run's time into
// its hex digits, so every key of every run is new.
func reshape(key string, i int) string {
	digits := []byte(fmt.Sprintf("%08X%016X%040X", i, time.Now().UnixNano(), i))
	out := []byte(key)
	d := 0
	for j, c := range out {
		if (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F') {
			out[j] = digits[d%len(digits)]
			d++
		}
	}
	return string(out)
}

// scaleKeygen repeats the sample page's licenses to n, in pages of 100 as the API lists them.
func scaleKeygen(t *testing.T, n int) []byte {
	t.Helper()
	raw, err := os.ReadFile("../importer/testdata/keygen.json")
	if err != nil {
		t.Fatal(err)
	}
	var page map[string]any
	if err := json.Unmarshal(raw, &page); err != nil {
		t.Fatal(err)
	}
	sample := page["data"].([]any)
	var buf bytes.Buffer
	for start := 0; start < n; start += 100 {
		var data []any
		for i := start; i < min(start+100, n); i++ {
			var item map[string]any
			b, _ := json.Marshal(sample[i%len(sample)])
			_ = json.Unmarshal(b, &item)
			item["id"] = fmt.Sprintf("lic-%d-%d", i, time.Now().UnixNano())
			attrs := item["attributes"].(map[string]any)
			attrs["key"] = reshape(attrs["key"].(string), i)
			data = append(data, item)
		}
		page["data"] = data
		b, _ := json.Marshal(page)
		buf.Write(b)
		buf.WriteByte('\n')
	}
	return buf.Bytes()
}

// TestImportTenThousandFromEachExportFormat converts 10,000 licenses of each format with
// keyhousectl's converters, imports them through its client, and checks every key as the
// app would send it; a second run of the same file changes nothing.
func TestImportTenThousandFromEachExportFormat(t *testing.T) {
	t.Parallel()
	// A stack of its own: its tens of thousands of license.issued events would otherwise
	// queue ahead of every event other tests on the shared stack wait for.
	s := startStack(t, nil)
	t.Cleanup(s.Stop)
	const n = 10000
	for _, tc := range []struct {
		from string
		file func() []byte
	}{
		{"lemonsqueezy", func() []byte { return scaleCSV(t, "../importer/testdata/lemonsqueezy.csv", "key", n) }},
		{"keygen", func() []byte { return scaleKeygen(t, n) }},
		{"gumroad", func() []byte { return scaleCSV(t, "../importer/testdata/gumroad.csv", "license key", n) }},
	} {
		// One format after the other, not as parallel subtests: those would wait for the
		// package's -parallel slots behind every other test, with this stack idle.
		t.Run(tc.from, func(t *testing.T) {
			ls, rejected, err := importer.Sources[tc.from](bytes.NewReader(tc.file()), importer.Options{Product: product("import-" + tc.from)})
			if err != nil || len(rejected) != 0 {
				t.Fatal(err, rejected)
			}
			if tc.from == "gumroad" {
				// One sample sale in four has no license key (a product without licenses).
				if len(ls) != n*3/4 {
					t.Fatalf("%d licenses from %d sales", len(ls), n)
				}
			} else if len(ls) != n {
				t.Fatalf("%d licenses", len(ls))
			}
			a := admin(t, s)
			c := &importer.Client{URL: s.URL, APIKey: s.AdminKey, OnConflict: "fail", HTTP: importHTTP(a.IP)}
			sum, err := c.Import(context.Background(), ls)
			if err != nil || sum.Imported != len(ls) || sum.Invalid != 0 {
				t.Fatalf("import: %v %+v", err, sum)
			}
			verifyEach(t, s, ls)
			again, err := c.Import(context.Background(), ls)
			if err != nil || again.Unchanged != len(ls) || again.Imported != 0 {
				t.Fatalf("second import: %v %+v", err, again)
			}
		})
	}
}

// importHTTP sends every request from one client IP of the test's own.
func importHTTP(ip string) *http.Client {
	return &http.Client{Timeout: 5 * time.Minute, Transport: forwardedFor{ip: ip, next: http.DefaultTransport}}
}

type forwardedFor struct {
	ip   string
	next http.RoundTripper
}

func (f forwardedFor) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-Forwarded-For", f.ip)
	return f.next.RoundTrip(r)
}

// verifyEach sends every key exactly as exported to verify-license and checks the answer
// its status and expiry call for.
func verifyEach(t *testing.T, s *stack.Stack, ls []importer.License) {
	t.Helper()
	now := time.Now()
	var wg sync.WaitGroup
	errs := make(chan string, len(ls))
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			var c *Client
			for i := w; i < len(ls); i += 4 {
				if (i/4)%500 == 0 {
					c = anon(t, s)
				}
				l := ls[i]
				want := `{"valid":true`
				switch {
				case l.Status == "revoked":
					want = `{"valid":false,"error":"License is not active"}`
				case l.ExpiresAt != nil && *l.ExpiresAt < now.UTC().Format(time.RFC3339):
					want = `{"valid":false,"error":"License has expired"}`
				}
				r := c.Post("/v1/verify-license", map[string]string{"key": l.Key})
				if !strings.HasPrefix(string(r.Body), want) {
					errs <- fmt.Sprintf("license %d %q: %d %s, want %s", i, l.Key, r.Status, r.Body, want)
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
}
