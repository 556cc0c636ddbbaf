package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keyhouse/keyhouse/devinfra/testkit"
	"github.com/keyhouse/keyhouse/stack"
)

var keyhousectlBuild struct {
	once sync.Once
	path string
	err  error
}

// keyhousectl builds the CLI once per test binary, as docs/import.md tells a vendor to.
func keyhousectl(t *testing.T) string {
	t.Helper()
	keyhousectlBuild.once.Do(func() {
		root, err := stack.RepoRoot()
		if err != nil {
			keyhousectlBuild.err = err
			return
		}
		keyhousectlBuild.path = filepath.Join(testkit.Dir(t), "keyhousectl")
		cmd := exec.Command("go", "build", "-o", keyhousectlBuild.path, "./stack/cmd/keyhousectl")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			keyhousectlBuild.err = fmt.Errorf("go build keyhousectl: %v\n%s", err, out)
		}
	})
	if keyhousectlBuild.err != nil {
		t.Fatal(keyhousectlBuild.err)
	}
	return keyhousectlBuild.path
}

// runKeyhousectl runs `keyhousectl import` on file (written to a folder of its own) and
// returns its stdout, stderr and exit status.
func runKeyhousectl(t *testing.T, s *stack.Stack, name, content string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(keyhousectl(t), append(append([]string{"import"}, args...), name)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "KEYHOUSE_URL="+s.URL, "KEYHOUSE_API_KEY="+s.AdminKey)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return out.String(), errOut.String(), code
}

// TestKeyhousectlImportsTheValidRowsAndListsTheInvalidOnesByLine: rows of an export that
// cannot be licenses (no key, a date or an activation limit that does not read) and a
// row the API refuses are listed by their line; every other row is imported, and the
// exit status says that some were not (docs/import.md).
func TestKeyhousectlImportsTheValidRowsAndListsTheInvalidOnesByLine(t *testing.T) {
	s := selfHosted(t)
	n := time.Now().UnixNano()
	key := func(prefix string) string { return fmt.Sprintf("%s-%012X", prefix, n&0xffffffffffff) }
	good1, good2, badDate := key("38B1460A-5104-4067-A91D"), key("5E2A7C31-0B9D-4F26-8E11"), key("A7F0C2D4-9E13-4B58-B6A0")
	csv := "key,user_email,activation_limit,expires_at,created_at,product_id,order_id\n" +
		good1 + ",ada@example.com,3,,2024-01-15T10:20:30.000000Z,8,2001\n" +
		",alan@example.com,1,,2024-02-01T08:00:00.000000Z,8,2002\n" +
		good2 + ",grace@example.com,1,2099-01-15T10:20:30.000000Z,2024-02-01T08:00:00.000000Z,8,2003\n" +
		badDate + ",edsger@example.com,1,soon,2024-02-01T08:00:00.000000Z,8,2004\n" +
		"0C4B8E2F-6A1D-4C39-9F57-E8D7C6B5A493,barbara@example.com,three,,2024-02-01T08:00:00.000000Z,8,2005\n" +
		"short,ken@example.com,1,,2024-02-01T08:00:00.000000Z,8,2006\n"
	prod := product("cli-lemonsqueezy")
	stdout, stderr, code := runKeyhousectl(t, s, "license-keys.csv", csv, "--from", "lemonsqueezy", "--product", prod)
	want := "6 licenses read: 2 imported, 0 unchanged, 0 skipped, 4 invalid (1 calls, 0 retried)\n" +
		"  license-keys.csv line 3: invalid: no key\n" +
		"  license-keys.csv line 5: invalid: expires_at: \"soon\" is not a date\n" +
		"  license-keys.csv line 6: invalid: activation_limit: \"three\" is not an activation limit\n" +
		"  license-keys.csv line 7: invalid: key must be 8 to 200 characters\n"
	if stdout != want || code != 1 || !strings.HasSuffix(stderr, "keyhousectl: 4 invalid licenses were not imported (listed above)\n") {
		t.Fatalf("exit %d\nstdout:\n%s\nwant:\n%s\nstderr:\n%s", code, stdout, want, stderr)
	}
	c := anon(t, s)
	for _, key := range []string{good1, good2} {
		if r := c.Post("/v1/verify-license", map[string]string{"key": key}); !strings.HasPrefix(string(r.Body), `{"valid":true`) {
			t.Errorf("imported %s verifies as %s", key, r.Body)
		}
	}
	expectUnknownKey(t, s, badDate)

	// A file with nothing wrong: exit status 0.
	stdout, stderr, code = runKeyhousectl(t, s, "license-keys.csv", strings.Join(strings.Split(csv, "\n")[:2], "\n")+"\n", "--from", "lemonsqueezy", "--product", prod)
	if code != 0 || stdout != "1 licenses read: 0 imported, 1 unchanged, 0 skipped, 0 invalid (1 calls, 0 retried)\n" {
		t.Fatalf("a clean file: exit %d\n%s%s", code, stdout, stderr)
	}
}

// TestKeyhousectlGumroadFollowsTheStorefrontsRefundRule: a Gumroad sale imports as a
// Stripe sale's license ends up (docs/storefront.md, "After the sale"): revoked after a
// full refund or a dispute not won, active after a partial refund or a won dispute.
func TestKeyhousectlGumroadFollowsTheStorefrontsRefundRule(t *testing.T) {
	s := selfHosted(t)
	n := time.Now().UnixNano() & 0xffffffff
	csv := "Purchase ID,Item Name,Purchase Email,Sale Date,Sale Time,Refunded?,Partial Refund ($),Fully Refunded?,Disputed?,Dispute Won?,Subscription End Date,License Key,Product ID\n"
	want := map[string]string{}
	for i, sale := range []struct{ money, verify string }{
		{"0,0.0,0,0,0", `{"valid":true`}, // paid
		{"1,5.0,0,0,0", `{"valid":true`}, // a $5 partial refund
		{"0,0.0,0,1,1", `{"valid":true`}, // a dispute won
		{"1,0.0,1,0,0", verifyNotActive}, // refunded in full
		{"0,0.0,0,1,0", verifyNotActive}, // a dispute open or lost
	} {
		key := fmt.Sprintf("85DB562A-%08X-A2335A6B-%08X", i, n)
		want[key] = sale.verify
		csv += fmt.Sprintf("sale%d,Acme Editor,buyer%d@example.com,2024-01-15,10:20:30,%s,,%s,acme-editor\n", i, i, sale.money, key)
	}
	stdout, stderr, code := runKeyhousectl(t, s, "sales.csv", csv, "--from", "gumroad", "--product", product("cli-gumroad"))
	if code != 0 || !strings.HasPrefix(stdout, "5 licenses read: 5 imported,") {
		t.Fatalf("exit %d\n%s%s", code, stdout, stderr)
	}
	c := anon(t, s)
	for key, verify := range want {
		if r := c.Post("/v1/verify-license", map[string]string{"key": key}); !strings.HasPrefix(string(r.Body), verify) {
			t.Errorf("%s verifies as %s, want %s", key, r.Body, verify)
		}
	}
}

// TestKeyhousectlTakesRowsWithOneKeyAsOneLicense: a Gumroad membership lists its key on
// every charge's row. The first row's license is imported, a row repeating it exactly is
// the same license, and a later row with other terms is reported by its line and the
// first one's, in the same call or a later one, while the rest of the file imports (the
// tool stopped at the second call before). Exit status 1 under --on-conflict fail, 0
// under skip; running it again changes nothing.
func TestKeyhousectlTakesRowsWithOneKeyAsOneLicense(t *testing.T) {
	s := selfHosted(t)
	n := time.Now().UnixNano() & 0xffffffff
	header := "Purchase ID,Item Name,Purchase Email,Sale Date,Sale Time,Refunded?,Partial Refund ($),Fully Refunded?,Disputed?,Dispute Won?,Subscription End Date,License Key,Product ID\n"
	member := fmt.Sprintf("85DB562A-MEMBER00-A2335A6B-%08X", n)
	var rows []string
	for i := range 1500 {
		key := fmt.Sprintf("85DB562A-%08X-A2335A6B-%08X", i, n)
		if i == 3 || i == 7 || i == 1200 {
			key = member // the first charge, and two renewals (one in the second call)
		}
		rows = append(rows, fmt.Sprintf("sale%d,Acme Editor,buyer@example.com,2024-%02d-15,10:20:30,0,0.0,0,0,0,,%s,acme-editor\n", i, 1+i%12, key))
	}
	rows = append(rows, rows[10]) // the same sale listed twice
	csv := header + strings.Join(rows, "")
	prod := product("cli-gumroad-renewals")
	renewals := "  sales.csv line 9: skipped: the key is also on sales.csv line 5, with other terms; that license is the one imported\n" +
		"  sales.csv line 1202: skipped: the key is also on sales.csv line 5, with other terms; that license is the one imported\n"

	stdout, stderr, code := runKeyhousectl(t, s, "sales.csv", csv, "--from", "gumroad", "--product", prod)
	want := "1501 licenses read: 1498 imported, 0 unchanged, 2 skipped, 0 invalid, 1 repeated (2 calls, 0 retried)\n" + renewals
	if stdout != want || code != 1 || !strings.HasSuffix(stderr, "keyhousectl: 2 licenses were not imported: the key is on an earlier line with other terms (listed above)\n") {
		t.Fatalf("exit %d\nstdout:\n%s\nwant:\n%s\nstderr tail: %s", code, stdout, want, stderr[max(0, len(stderr)-300):])
	}
	if total := admin(t, s).Get("/v1/list-licenses?limit=1&product_id="+prod).Expect(t, 200).JSON(t)["total"]; total != 1498.0 {
		t.Fatalf("%v licenses of the product, want 1498", total)
	}
	if issued := anon(t, s).Post("/v1/verify-license", map[string]string{"key": member}).Expect(t, 200).JSON(t)["issued_at"]; issued != "2024-04-15T10:20:30Z" {
		t.Fatalf("the member's license was issued %v, want its first row's sale (2024-04-15)", issued)
	}

	stdout, stderr, code = runKeyhousectl(t, s, "sales.csv", csv, "--from", "gumroad", "--product", prod, "--on-conflict", "skip")
	want = "1501 licenses read: 0 imported, 1498 unchanged, 2 skipped, 0 invalid, 1 repeated (2 calls, 0 retried)\n" + renewals
	if stdout != want || code != 0 {
		t.Fatalf("again with --on-conflict skip: exit %d\nstdout:\n%s\nwant:\n%s\nstderr tail: %s", code, stdout, want, stderr[max(0, len(stderr)-300):])
	}
}

// TestKeyhousectlAOneRowProblemNeverStopsTheRun: an export saved by Excel (a byte order
// mark, a quoted header, CRLF) reads; a row whose name the API's input policy refuses (a
// tab in it; bytes that are not UTF-8, a row saved as Latin-1) is listed by its line as
// invalid, and every other row, in its call and in the calls after it, is imported. The
// policy refuses a whole call for one such field: sent, that row stopped the run at its
// call, naming no line.
func TestKeyhousectlAOneRowProblemNeverStopsTheRun(t *testing.T) {
	s := selfHosted(t)
	n := time.Now().UnixNano() & 0xffffffff
	prod := product("cli-one-row")
	var b strings.Builder
	b.WriteString("\ufeff\"id\",\"key\",\"user_name\",\"user_email\",\"activation_limit\",\"status\",\"expires_at\",\"created_at\",\"order_id\"\r\n")
	for i := range 1500 {
		name, email := "Zoë Ünïcode", fmt.Sprintf("u%d@example.com", i)
		switch i {
		case 1200:
			name, email = "Tab\tName", ""
		case 1300:
			name, email = "Zo\xeb", ""
		}
		fmt.Fprintf(&b, "\"%d\",\"ROW-%08X-%05d\",\"%s\",\"%s\",\"3\",\"active\",\"\",\"2024-01-15T10:20:30.000000Z\",\"%d\"\r\n", i, n, i, name, email, i)
	}
	stdout, stderr, code := runKeyhousectl(t, s, "license-keys.csv", b.String(), "--from", "lemonsqueezy", "--product", prod)
	want := "1500 licenses read: 1498 imported, 0 unchanged, 0 skipped, 2 invalid (2 calls, 0 retried)\n" +
		"  license-keys.csv line 1202: invalid: issued_to must not contain control characters\n" +
		"  license-keys.csv line 1302: invalid: issued_to is not valid UTF-8\n"
	if stdout != want || code != 1 || !strings.HasSuffix(stderr, "keyhousectl: 2 invalid licenses were not imported (listed above)\n") {
		t.Fatalf("exit %d\nstdout:\n%s\nwant:\n%s\nstderr tail: %s", code, stdout, want, stderr[max(0, len(stderr)-300):])
	}
	if total := admin(t, s).Get("/v1/list-licenses?limit=1&product_id="+prod).Expect(t, 200).JSON(t)["total"]; total != 1498.0 {
		t.Fatalf("%v licenses of the product, want 1498", total)
	}
	last := fmt.Sprintf("ROW-%08X-%05d", n, 1499)
	if got := admin(t, s).Get("/v1/admin/license/"+last).Expect(t, 200).JSON(t)["issued_to"]; got != "u1499@example.com" {
		t.Fatalf("the file's last row: issued_to %v", got)
	}
}
