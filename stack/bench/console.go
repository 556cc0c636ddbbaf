package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"

	"github.com/keyhouse/keyhouse/pkg/pgxx"
)

// consoleLicenses is how many licenses the console scenario's tenant holds (issue 14:
// each page under 200 ms at 100k licenses).
const consoleLicenses = 100_000

// consolePages are the console scenarios: one page kind each, so the report shows which
// one costs what.
var consolePages = []struct{ id, name, note string }{
	{"console-overview", "console overview page at 100,000 licenses", "GetAccount + GetStats (the tenant's kept license counts, a count of its seats, the newest ten) + the licenses expiring within 30 days + the newest events"},
	{"console-list", "console licenses list, pages 1..2000 of 100,000", "GetAccount + ListLicenses (the kept total, one page at OFFSET up to 99,950 found in the index) + seat summaries"},
	{"console-search", "console customer search in 100,000 licenses", "GetAccount + ListLicenses with issued_to (trigram index, its matches counted) + seat summaries"},
	{"console-license", "console license page in 100,000 licenses", "GetAccount + GetLicenseDetails + ListActivations + GetPortalLink"},
}

func init() {
	for _, p := range consolePages {
		Register(Scenario{
			ID: p.id, Name: p.name, Note: "server-rendered, every gRPC call authenticated by the session through billing: " + p.note,
			Workers: 4,
			Setup:   func(ctx context.Context, env *Env) (Op, error) { return setupConsole(ctx, env, p.id) },
		})
	}
}

var csrfInput = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// setupConsole gives the self-hosted tenant 100,000 licenses (inserted in SQL: the API's
// Management tier would take hours) and signs the console in with the admin key.
func setupConsole(ctx context.Context, env *Env, kind string) (Op, error) {
	pool, err := pgxx.Open(ctx, env.Stack.Env("DATABASE_URL"), "licensing")
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `INSERT INTO licenses (key_hash, key, tenant_id, tier, product_id, issued_to, issued_at, max_activations)
		SELECT sha256(convert_to(k, 'UTF8')), k, 'default', 'pro', 'bench-console', 'customer-' || i || '@example.com',
			now() - i * interval '1 second', 3
		FROM generate_series(1, $1) AS i, LATERAL (SELECT 'BNCH-' || lpad(i::text, 8, '0') AS k) AS key
		ON CONFLICT DO NOTHING`, consoleLicenses); err != nil {
		return nil, fmt.Errorf("seed licenses: %w", err)
	}
	if _, err := pool.Exec(ctx, `VACUUM (ANALYZE) licenses`); err != nil {
		return nil, err
	}

	jar, _ := cookiejar.New(nil)
	client := &http.Client{Jar: jar, Transport: env.HTTP.Transport, Timeout: env.HTTP.Timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(ctx context.Context, path, ip string) (int, string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, env.URL+path, nil)
		if err != nil {
			return 0, "", err
		}
		req.Header.Set("X-Forwarded-For", ip)
		resp, err := client.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), err
	}
	ip := SetupIP()
	_, page, err := get(ctx, "/console/login", ip)
	if err != nil {
		return nil, err
	}
	m := csrfInput.FindStringSubmatch(page)
	if m == nil {
		return nil, fmt.Errorf("console sign-in page has no CSRF token")
	}
	form := url.Values{"csrf": {m[1]}, "api_key": {env.AdminKey}}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, env.URL+"/console/login", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-Forwarded-For", ip)
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		return nil, fmt.Errorf("console sign-in answered %d", resp.StatusCode)
	}

	pages := consoleLicenses / 50
	return func(ctx context.Context, worker, i int) error {
		n := worker*7919 + i*104729
		var path string
		switch kind {
		case "console-overview":
			path = "/console/"
		case "console-list":
			path = fmt.Sprintf("/console/licenses?page=%d", n%pages+1)
		case "console-search":
			path = fmt.Sprintf("/console/licenses?issued_to=customer-%d@", n%consoleLicenses+1)
		default:
			path = fmt.Sprintf("/console/licenses/BNCH-%08d", n%consoleLicenses+1)
		}
		st, body, err := get(ctx, path, ClientIP(worker, i, 200))
		if err != nil {
			return err
		}
		if st != http.StatusOK {
			return fmt.Errorf("%s: status %d: %.200s", path, st, body)
		}
		return nil
	}, nil
}
