package e2e

import (
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

func TestHealthRouteAnswersWithVersionAndFingerprint(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	resp := anon(t, s).Get("/").Expect(t, 200)
	if got := strings.Join(resp.Keys(t), ","); got != "message,version,buildFingerprint" {
		t.Fatalf("fields %s", got)
	}
	body := resp.JSON(t)
	if body["version"] == "" || !regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(body["buildFingerprint"].(string)) {
		t.Fatalf("health %s", resp.Body)
	}
	if resp.Header.Get("X-RateLimit-Limit") != "" {
		t.Fatal("GET / must not carry rate-limit headers")
	}
	if resp.Header.Get("X-Request-Id") == "" {
		t.Fatal("every response carries X-Request-Id")
	}
}

func TestBuildInfoNeedsTheAdminKeyInEveryMode(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"self", "hosted"} {
		s := sharedStack(t, mode)
		resp := admin(t, s).Get("/v1/admin/build-info").Expect(t, 200)
		if got := strings.Join(resp.Keys(t), ","); got != "watermarkId,fingerprint,version" {
			t.Fatalf("%s: fields %s", mode, got)
		}
		again := admin(t, s).Get("/v1/admin/build-info").JSON(t)
		if again["watermarkId"] != resp.JSON(t)["watermarkId"] || again["watermarkId"] == "" {
			t.Fatalf("%s: watermark not stable: %v vs %s", mode, again, resp.Body)
		}
		anon(t, s).Get("/v1/admin/build-info").ExpectError(t, 403, "Unauthorized")
		newClient(t, s.URL, "wrong").Get("/v1/admin/build-info").ExpectError(t, 403, "Unauthorized")
		if mode == "hosted" {
			newTenant(t, s).Get("/v1/admin/build-info").ExpectError(t, 403, "Unauthorized")
		}
	}
}

func TestBuildInfoWatermarkDiffersBetweenInstallations(t *testing.T) {
	t.Parallel()
	a := admin(t, selfHosted(t)).Get("/v1/admin/build-info").JSON(t)["watermarkId"]
	b := admin(t, hosted(t)).Get("/v1/admin/build-info").JSON(t)["watermarkId"]
	if a == b {
		t.Fatalf("two installations share watermark %v", a)
	}
}

func TestUnauthorizedForMissingWrongOrMalformedCredentials(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	c := anon(t, s)
	for name, header := range map[string]string{
		"missing":          "",
		"wrong key":        "Bearer not-the-admin-key",
		"no scheme":        s.AdminKey,
		"basic scheme":     "Basic " + s.AdminKey,
		"empty bearer":     "Bearer ",
		"key with garbage": "Bearer " + s.AdminKey + "x",
	} {
		t.Run(name, func(t *testing.T) {
			var resp *Response
			if header == "" {
				resp = c.Do(http.MethodGet, "/v1/admin/build-info", nil)
			} else {
				resp = c.Do(http.MethodGet, "/v1/admin/build-info", nil, "Authorization", header)
			}
			resp.ExpectError(t, 403, "Unauthorized")
		})
	}
	c.Do(http.MethodGet, "/v1/admin/build-info", nil, "Authorization", "bearer "+s.AdminKey).Expect(t, 200)
}

func TestUnknownRouteIsJSON404(t *testing.T) {
	t.Parallel()
	c := anon(t, selfHosted(t))
	c.Get("/v1/no-such-route").ExpectError(t, 404, "Not found")
	c.Get("/nothing/here").ExpectError(t, 404, "Not found")
	resp := c.Do(http.MethodDelete, "/v1/operator/tenants", nil)
	if resp.Status != 404 && resp.Status != 405 {
		t.Fatalf("wrong method: status %d", resp.Status)
	}
	if !strings.HasPrefix(string(resp.Body), `{"error":`) {
		t.Fatalf("wrong method: body %s", resp.Body)
	}
}

func TestBodyOverOneMebibyteIs413(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	c := admin(t, s)
	big := `{"name":"` + strings.Repeat("a", 1<<20) + `","email":"a@example.com"}`
	c.Post("/v1/operator/tenants", big).ExpectError(t, 413, "Request body too large")
	// A chunked body (no Content-Length) is cut at the cap as well.
	c.Do(http.MethodPost, "/v1/operator/tenants", io.MultiReader(strings.NewReader(big))).ExpectError(t, 413, "Request body too large")
}

func TestMalformedJSONIsA400NamingTheProblem(t *testing.T) {
	t.Parallel()
	c := admin(t, hosted(t))
	resp := c.Post("/v1/operator/tenants", `{"name": 5, "email": "a@example.com"}`).Expect(t, 400)
	if msg := resp.JSON(t)["error"].(string); !strings.Contains(msg, "name") {
		t.Fatalf("error does not name the field: %s", msg)
	}
	resp = c.Post("/v1/operator/tenants", `{"name": "x",`).Expect(t, 400)
	if len(resp.Keys(t)) != 1 {
		t.Fatalf("error body must be just error: %s", resp.Body)
	}
	c.Post("/v1/operator/tenants", map[string]string{"email": "a@example.com"}).ExpectError(t, 400, "name is required")
	c.Post("/v1/operator/tenants", map[string]string{"name": "x", "email": "nope"}).ExpectError(t, 400, "email must be a valid email address")
}

func TestOperatorTenantsIsHostedOnlyAndAdminOnly(t *testing.T) {
	t.Parallel()
	self := selfHosted(t)
	admin(t, self).Post("/v1/operator/tenants", map[string]string{"name": "x", "email": "x@example.com"}).
		ExpectError(t, 400, "Tenant management is only available for hosted deployments")

	s := hosted(t)
	resp := admin(t, s).Post("/v1/operator/tenants", map[string]string{"name": "Acme", "email": "ops@acme.test"}).Expect(t, 200)
	if got := strings.Join(resp.Keys(t), ","); got != "tenant_id,name,email,api_key" {
		t.Fatalf("fields %s", got)
	}
	tenant := newTenant(t, s)
	tenant.Post("/v1/operator/tenants", map[string]string{"name": "x", "email": "x@example.com"}).ExpectError(t, 403, "Unauthorized")
}

func TestRotateAPIKeyRetiresTheOldKeyAtOnce(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	tenant := newTenant(t, s)
	resp := tenant.Post("/v1/rotate-api-key", nil).Expect(t, 200)
	if got := strings.Join(resp.Keys(t), ","); got != "apiKey" {
		t.Fatalf("fields %s", got)
	}
	newKey := resp.JSON(t)["apiKey"].(string)
	if newKey == tenant.Token || !strings.HasPrefix(newKey, "kh_") {
		t.Fatalf("new key %q", newKey)
	}
	// The old key is dead on the very next request.
	tenant.Post("/v1/rotate-api-key", nil).ExpectError(t, 403, "Unauthorized")
	rotated := newClient(t, s.URL, newKey)
	rotated.Post("/v1/rotate-api-key", nil).Expect(t, 200)
}

func TestRotateAPIKeyConcurrentlyLeavesExactlyOneWinner(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	tenant := newTenant(t, s)
	const n = 8
	results := make(chan int, n)
	for i := 0; i < n; i++ {
		go func() { results <- tenant.Post("/v1/rotate-api-key", nil).Status }()
	}
	ok := 0
	for i := 0; i < n; i++ {
		if <-results == 200 {
			ok++
		}
	}
	if ok != 1 {
		t.Fatalf("%d rotations succeeded with the same old key, want exactly 1", ok)
	}
}

func TestHostedRefusesTheAdminKeyOnTenantRoutes(t *testing.T) {
	t.Parallel()
	s := hosted(t)
	admin(t, s).Post("/v1/rotate-api-key", nil).ExpectError(t, 403, "Unauthorized")
}

func TestRotateAPIKeyIsHostedOnly(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	admin(t, s).Post("/v1/rotate-api-key", nil).ExpectError(t, 400, "API key rotation is only available for hosted accounts")
	anon(t, s).Post("/v1/rotate-api-key", nil).ExpectError(t, 403, "Unauthorized")
}
