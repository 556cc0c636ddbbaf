package importer

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestConvertersReadTheSamples pins what each sample becomes: keys exactly as exported,
// disabled/suspended/refunded as revoked, expiries and activation limits carried over.
func TestConvertersReadTheSamples(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		from, file string
		want       string
	}{
		{"lemonsqueezy", "testdata/lemonsqueezy.csv", `[` +
			`{"key":"38B1460A-5104-4067-A91D-77B872934D51","product_id":"lemonsqueezy-8","tier":"pro","issued_to":"ada@example.com","issued_at":"2024-01-15T10:20:30Z","expires_at":null,"status":"active","max_activations":3,"notes":"Lemon Squeezy order 2001"},` +
			`{"key":"5E2A7C31-0B9D-4F26-8E11-3C9A0D4B7E62","product_id":"lemonsqueezy-8","tier":"pro","issued_to":"alan@example.com","issued_at":"2024-02-01T08:00:00Z","expires_at":"2099-01-15T10:20:30Z","status":"active","max_activations":1,"notes":"Lemon Squeezy order 2002"},` +
			`{"key":"A7F0C2D4-9E13-4B58-B6A0-1D2E3F405162","product_id":"lemonsqueezy-8","tier":"pro","issued_to":"grace@example.com","issued_at":"2024-02-01T08:00:00Z","expires_at":"2025-02-01T08:00:00Z","status":"active","max_activations":5,"notes":"Lemon Squeezy order 2003"},` +
			`{"key":"0C4B8E2F-6A1D-4C39-9F57-E8D7C6B5A493","product_id":"lemonsqueezy-8","tier":"pro","issued_to":"edsger@example.com","issued_at":"2024-03-10T12:00:00Z","expires_at":null,"status":"revoked","max_activations":null,"notes":"Lemon Squeezy order 2004"}]`},
		{"keygen", "testdata/keygen.json", `[` +
			`{"key":"C1B6DE-39A6E3-DE1529-8559A0-4AF593-V3","product_id":"keygen-3f6c3e5b-1d2a-4a7e-9c1f-2b8d7e6a5c40","tier":"pro","issued_to":"ada@example.com","issued_at":"2024-01-15T10:20:30Z","expires_at":null,"status":"active","max_activations":3,"notes":"Keygen license b18e3f3a-330c-4b8f-a6a2-0b9e6d5f1a01"},` +
			`{"key":"9A8B7C-6D5E4F-3A2B1C-0D9E8F-7A6B5C-V3","product_id":"keygen-3f6c3e5b-1d2a-4a7e-9c1f-2b8d7e6a5c40","tier":"pro","issued_to":"c29f4a4b-441d-4c90-b7b3-1caf7e6a2b02","issued_at":"2024-01-01T00:00:00Z","expires_at":"2025-01-01T00:00:00Z","status":"active","max_activations":1,"notes":"Keygen license c29f4a4b-441d-4c90-b7b3-1caf7e6a2b02"},` +
			`{"key":"key/ZXhhbXBsZS1zaWduZWQta2V5LWRhdGE=.c2lnbmF0dXJl","product_id":"keygen-3f6c3e5b-1d2a-4a7e-9c1f-2b8d7e6a5c40","tier":"pro","issued_to":"Grace Hopper","issued_at":"2024-05-05T05:05:05Z","expires_at":"2099-12-31T00:00:00Z","status":"revoked","max_activations":null,"notes":"Keygen license d3a05b5c-552e-4da1-88c4-2db08f7b3c03"}]`},
		{"gumroad", "testdata/gumroad.csv", `[` +
			`{"key":"85DB562A-C11D4B06-A2335A6B-8C079166","product_id":"gumroad-acme-editor","tier":"pro","issued_to":"ada@example.com","issued_at":"2024-01-15T10:20:30Z","expires_at":null,"status":"active","max_activations":null,"notes":"Gumroad sale kx8RlWMmmH5aGu1VyJ3gqw=="},` +
			`{"key":"1F2E3D4C-5B6A7988-A7B6C5D4-E3F20110","product_id":"gumroad-acme-editor","tier":"pro","issued_to":"alan@example.com","issued_at":"2024-02-01T08:00:00Z","expires_at":null,"status":"revoked","max_activations":null,"notes":"Gumroad sale Lm3pQ9sTuV0wXy1Zab2Cdg=="},` +
			`{"key":"0A1B2C3D-4E5F6071-8293A4B5-C6D7E8F9","product_id":"gumroad-acme-editor","tier":"pro","issued_to":"grace@example.com","issued_at":"2024-03-01T09:30:00Z","expires_at":"2025-03-01T00:00:00Z","status":"active","max_activations":null,"notes":"Gumroad sale Qr4sTu5VwXy6Zab7Cde8Fg=="}]`},
	} {
		f, err := os.Open(tc.file)
		if err != nil {
			t.Fatal(err)
		}
		ls, rejected, err := Sources[tc.from](f, Options{})
		f.Close()
		if err != nil || len(rejected) != 0 {
			t.Fatalf("%s: %v, rejected %v", tc.from, err, rejected)
		}
		got, _ := json.Marshal(ls)
		if string(got) != tc.want {
			t.Errorf("%s:\n got  %s\n want %s", tc.from, got, tc.want)
		}
	}
}

// TestGumroadRevokesByTheStorefrontsRule: a Gumroad sale is revoked as a Stripe sale's
// license is (docs/storefront.md, "After the sale"): a full refund or a dispute that was
// not won revokes; a partial refund ("Refunded?" is set for those too) and a won dispute
// leave the license active.
func TestGumroadRevokesByTheStorefrontsRule(t *testing.T) {
	t.Parallel()
	const header = "License Key,Purchase Email,Sale Date,Refunded?,Partial Refund ($),Fully Refunded?,Disputed?,Dispute Won?\n"
	for _, tc := range []struct {
		name, row, want string
	}{
		{"paid", "0,0.0,0,0,0", "active"},
		{"refunded in full", "1,0.0,1,0,0", "revoked"},
		{"partial refund", "1,5.0,0,0,0", "active"},
		{"dispute open or lost", "0,0.0,0,1,0", "revoked"},
		{"dispute won", "0,0.0,0,1,1", "active"},
		{"dispute won, then refunded in full", "1,0.0,1,1,1", "revoked"},
	} {
		csv := header + "KEY-0001-ABCD,ada@example.com,2024-01-15," + tc.row + "\n"
		ls, rejected, err := Gumroad(strings.NewReader(csv), Options{})
		if err != nil || len(rejected) != 0 || len(ls) != 1 {
			t.Fatalf("%s: %v %v %v", tc.name, ls, rejected, err)
		}
		if ls[0].Status != tc.want {
			t.Errorf("%s: imported %s, want %s", tc.name, ls[0].Status, tc.want)
		}
	}
	// An export without "Fully Refunded?": "Refunded?" with a partial amount is partial.
	for _, tc := range []struct{ refunded, partial, want string }{{"1", "5.00", "active"}, {"1", "0.0", "revoked"}, {"1", "", "revoked"}} {
		csv := "License Key,Purchase Email,Sale Date,Refunded?,Partial Refund ($)\nKEY-0001-ABCD,ada@example.com,2024-01-15," + tc.refunded + "," + tc.partial + "\n"
		ls, _, err := Gumroad(strings.NewReader(csv), Options{})
		if err != nil || len(ls) != 1 || ls[0].Status != tc.want {
			t.Errorf("refunded %s, partial %q: %v %v, want %s", tc.refunded, tc.partial, ls, err, tc.want)
		}
	}
}

// TestConvertersRejectBadRecordsByPositionAndKeepTheRest: a record that cannot be a
// license is reported by its place in the file; every other record converts.
func TestConvertersRejectBadRecordsByPositionAndKeepTheRest(t *testing.T) {
	t.Parallel()
	ls, rejected, err := LemonSqueezy(strings.NewReader(`key,user_email,activation_limit,expires_at
GOOD-KEY-0001,ada@example.com,3,
,alan@example.com,1,
GOOD-KEY-0002,"grace
hopper@example.com",1,
BAD-KEY-0003,edsger@example.com,1,soon
BAD-KEY-0004,barbara@example.com,three,
`), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, l := range ls {
		keys = append(keys, l.Where+" "+l.Key)
	}
	if got := strings.Join(keys, "; "); got != "line 2 GOOD-KEY-0001; line 4 GOOD-KEY-0002" {
		t.Errorf("licenses: %s", got)
	}
	if got := fmt.Sprint(rejected); got != `[{line 3 no key} {line 6 expires_at: "soon" is not a date} {line 7 activation_limit: "three" is not an activation limit}]` {
		t.Errorf("rejected: %s", got)
	}

	ls, rejected, err = Keygen(strings.NewReader(`{"data":[{"id":"a","attributes":{"key":"K-1","created":"2024-01-01T00:00:00Z"}},{"id":"b","attributes":{"key":""}}]}
{"data":[{"id":"c","attributes":{"key":"K-3","expiry":"tomorrow"}},{"id":"d","attributes":{"key":"K-4"}}]}`), Options{})
	if err != nil || len(ls) != 2 || ls[0].Key != "K-1" || ls[1].Key != "K-4" || ls[1].Where != "page 2, license 2 (d)" {
		t.Fatalf("keygen: %+v %v", ls, err)
	}
	if got := fmt.Sprint(rejected); got != `[{page 1, license 2 (b) no key} {page 2, license 1 (c) expiry: "tomorrow" is not a date}]` {
		t.Errorf("keygen rejected: %s", got)
	}

	ls, rejected, err = Gumroad(strings.NewReader("License Key,Sale Date,Subscription End Date\nKEY-1,2024-01-15,\nKEY-2,someday,\nKEY-3,2024-01-15,2025-13-45\n"), Options{})
	if err != nil || len(ls) != 1 || ls[0].Key != "KEY-1" {
		t.Fatalf("gumroad: %+v %v", ls, err)
	}
	if got := fmt.Sprint(rejected); got != `[{line 3 sale date: "someday" is not a date} {line 4 subscription end date: "2025-13-45" is not a date}]` {
		t.Errorf("gumroad rejected: %s", got)
	}

	// A file that is not CSV at all is refused whole.
	if ls, _, err := LemonSqueezy(strings.NewReader("key,user_email\nK-1,a@example.com\n\"K-2,b@example.com\n"), Options{}); err == nil {
		t.Fatalf("a broken quote read as %v", ls)
	}
}

// An export saved with a UTF-8 byte order mark (Excel's "CSV UTF-8", Windows tools) reads
// as the same export without it: with a quoted header row, and before Keygen's JSON.
func TestExportsWithAByteOrderMarkRead(t *testing.T) {
	t.Parallel()
	ls, rejected, err := LemonSqueezy(strings.NewReader("\ufeff\"key\",\"user_email\",\"created_at\"\r\n\"BOM-KEY-0001\",\"ada@example.com\",\"2024-01-15T10:20:30.000000Z\"\r\n"), Options{})
	if err != nil || len(rejected) != 0 || len(ls) != 1 || ls[0].Key != "BOM-KEY-0001" || ls[0].IssuedTo != "ada@example.com" || ls[0].Where != "line 2" {
		t.Fatalf("CSV with a BOM and a quoted header: %+v %v %v", ls, rejected, err)
	}
	ls, rejected, err = Keygen(strings.NewReader("\ufeff"+`{"data":[{"id":"a","attributes":{"key":"BOM-KEY-0002","created":"2024-01-01T00:00:00Z"}}]}`), Options{})
	if err != nil || len(rejected) != 0 || len(ls) != 1 || ls[0].Key != "BOM-KEY-0002" {
		t.Fatalf("Keygen JSON with a BOM: %+v %v %v", ls, rejected, err)
	}
}

// Keygen's issued_to is metadata.email, else the name: an empty email is no email.
func TestKeygenEmptyEmailFallsBackToTheName(t *testing.T) {
	t.Parallel()
	ls, _, err := Keygen(strings.NewReader(`{"data":[{"id":"a","attributes":{"key":"K-000001","name":"Ada Lovelace","metadata":{"email":""},"created":"2024-01-01T00:00:00Z"}}]}`), Options{})
	if err != nil || len(ls) != 1 || ls[0].IssuedTo != "Ada Lovelace" {
		t.Fatalf("%+v %v", ls, err)
	}
}
