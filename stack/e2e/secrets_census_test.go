package e2e

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
)

// census records every credential and license key the e2e run saw (credentials the
// clients sent, and those the stacks answered with: API keys, activation tokens, signing
// secrets, session ids, portal links, CSRF tokens), so that after the last test
// noSecretInAnyLog can read every process's whole log for each of them. A credential
// must never appear in a log line; a license key only masked (its first and last four
// characters), as the stacks run with the default LOG_LICENSE_KEYS.
var census = &secretCensus{secrets: map[string]string{}, licenseKeys: map[string]bool{}}

type secretCensus struct {
	mu          sync.Mutex
	secrets     map[string]string // value -> what it is
	licenseKeys map[string]bool
}

// secretFields are the JSON fields of answers that carry a credential.
var secretFields = map[string]string{
	"token": "activation token", "api_key": "API key", "apiKey": "API key", "new_api_key": "API key",
	"secret": "signing secret", "signing_secret": "signing secret",
}

// minSecretLen keeps short test values ("x", "wrong") out: they occur in log lines by
// accident (a status code, a word) without being leaked.
const minSecretLen = 12

// noteCredential records a credential a client sent (an API key, the admin key).
func (c *secretCensus) noteCredential(v string) { c.noteSecret("credential", v) }

func (c *secretCensus) noteSecret(kind, v string) {
	if len(v) < minSecretLen {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.secrets[v] = kind
}

func (c *secretCensus) noteLicenseKey(v string) {
	if len(v) < minSecretLen {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.licenseKeys[v] = true
}

// noteResponse records the credentials and license keys in a JSON answer, at any depth.
func (c *secretCensus) noteResponse(body []byte) {
	var v any
	if json.Unmarshal(body, &v) != nil {
		return
	}
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if s, ok := x.(string); ok {
					if kind, ok := secretFields[k]; ok {
						c.noteSecret(kind, s)
					}
					if k == "key" || k == "license_key" {
						c.noteLicenseKey(s)
					}
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(v)
}

var (
	portalTokenInPage = regexp.MustCompile(`/portal/([A-Za-z0-9_-]{16,})`)
	csrfInPage        = regexp.MustCompile(`name="csrf" value="([^"]+)"`)
)

// notePage records a console or portal page's credentials: the session cookie, the
// portal links it shows and its CSRF token.
func (c *secretCensus) notePage(h http.Header, body string) {
	for _, line := range h.Values("Set-Cookie") {
		if ck, err := http.ParseSetCookie(line); err == nil && ck.Value != "" {
			c.noteSecret("cookie "+ck.Name, ck.Value)
		}
	}
	for _, m := range portalTokenInPage.FindAllStringSubmatch(body, -1) {
		c.noteSecret("portal token", m[1])
	}
	for _, m := range csrfInPage.FindAllStringSubmatch(body, -1) {
		c.noteSecret("CSRF token", m[1])
	}
}

// noSecretInAnyLog reads the log of every process of every stack the run started.
func noSecretInAnyLog(dir string) error {
	logs, err := filepath.Glob(filepath.Join(dir, "*", "logs", "*.log"))
	if err != nil || len(logs) == 0 {
		return err // no stack ran (e.g. -short)
	}
	census.mu.Lock()
	defer census.mu.Unlock()
	index := valueIndex{}
	for v, kind := range census.secrets {
		index.add(v, "a "+kind)
	}
	for k := range census.licenseKeys {
		index.add(k, "a whole license key")
	}
	var found []string
	for _, path := range logs {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 4<<20)
		for n := 1; sc.Scan(); n++ {
			line := sc.Text()
			for _, what := range index.within(line) {
				found = append(found, fmt.Sprintf("%s:%d: %s: %.300s", path, n, what, line))
			}
		}
		_ = f.Close()
		if err := sc.Err(); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	if len(found) == 0 {
		return nil
	}
	sort.Strings(found)
	if len(found) > 20 {
		found = append(found[:20], fmt.Sprintf("… and %d more", len(found)-20))
	}
	return errors.New("secrets in the processes' logs (checked " + fmt.Sprint(len(census.secrets)) +
		" credentials and " + fmt.Sprint(len(census.licenseKeys)) + " license keys):\n" + strings.Join(found, "\n"))
}

// valueIndex finds the noted values a line contains in one pass over the line: each value
// is filed under its first minSecretLen bytes, and each position of the line is looked up
// once. Searching every line for every value, as the census first did, costs lines ×
// values substring searches: 8 s for 20,000 lines and 20,000 license keys here, and a
// whole run writes over 250,000 lines (the index: 35 ms for the same).
type valueIndex map[string][]notedValue

type notedValue struct{ value, what string }

func (x valueIndex) add(value, what string) {
	head := value[:minSecretLen]
	x[head] = append(x[head], notedValue{value, what})
}

// within returns what each value found in line is, once per value.
func (x valueIndex) within(line string) []string {
	var found []string
	var seen map[string]bool
	for i := 0; i+minSecretLen <= len(line); i++ {
		for _, v := range x[line[i:i+minSecretLen]] {
			if strings.HasPrefix(line[i:], v.value) && !seen[v.value] {
				if seen == nil {
					seen = map[string]bool{}
				}
				seen[v.value] = true
				found = append(found, v.what)
			}
		}
	}
	return found
}

// The census finds each noted value wherever it stands in a line, once per line, and
// tells apart values that share their first bytes.
func TestTheLogCensusFindsEveryNotedValueInALine(t *testing.T) {
	index := valueIndex{}
	index.add("act_0123456789abcdefghij", "an activation token")
	index.add("act_0123456789abcdefXXXX", "another activation token")
	index.add("ABCD-EFGH-JKLM-NPQR-STUV-WXYZ-2345", "a whole license key")
	for line, want := range map[string][]string{
		`{"msg":"seat","token":"act_0123456789abcdefghij"}`:                    {"an activation token"},
		`act_0123456789abcdefXXXX act_0123456789abcdefXXXX`:                    {"another activation token"},
		`key ABCD-EFGH-JKLM-NPQR-STUV-WXYZ-2345 act_0123456789abcdefghij`:      {"a whole license key", "an activation token"},
		`act_0123456789abcdefghi, act_0123456789abcdefYYYY, ABCD-…-2345, act_`: nil,
		``: nil,
	} {
		if got := index.within(line); !slices.Equal(got, want) {
			t.Errorf("within(%q) = %q, want %q", line, got, want)
		}
	}
}
