package ratelimit

import (
	"regexp"
	"testing"

	"github.com/keyhouse/keyhouse/gateway/internal/openapi"
)

func TestClassify_EveryRouteOfTheSpecGetsItsTier(t *testing.T) {
	t.Parallel()
	const adminMax = 42
	admin := AdminInfo(adminMax)
	tests := []struct {
		method, path string
		tier         Tier
		perKey       bool
	}{
		// api.md Endpoints and Limits.
		{"POST", "/v1/verify-license", Validation, false},
		{"POST", "/v1/validate-license", Validation, false},
		{"POST", "/v1/track-usage", Validation, false},
		{"POST", "/v1/usage-report", Validation, false},
		{"POST", "/v1/check-update", Validation, false},
		{"POST", "/v1/activate-license", Activation, true},
		{"POST", "/v1/deactivate-license", Activation, true},
		{"POST", "/v1/verify-license-file", Activation, false},
		{"POST", "/v1/verify-license-file-base64", Activation, false},
		{"GET", "/v1/export-license/KEY-1", Public, false},
		{"GET", "/v1/export-license/KEY-1/file", Public, false},
		{"GET", "/v1/export-license/KEY-1/offline", Public, false},
		{"GET", "/v1/public-key", Public, false},
		{"POST", "/v1/issue-license", Management, false},
		{"POST", "/v1/revoke-license", Management, false},
		{"DELETE", "/v1/delete-license", Management, false},
		{"POST", "/v1/admin/update-license-terms", Management, false},
		{"POST", "/v1/licenses/import", Import, false},
		{"POST", "/v1/register-release", Management, false},
		{"POST", "/v1/unpublish-release", Management, false},
		{"GET", "/v1/list-licenses", admin, false},
		{"GET", "/v1/admin/stats", admin, false},
		{"GET", "/v1/recent-activations", admin, false},
		{"GET", "/v1/list-activations/KEY-1", admin, false},
		{"GET", "/v1/admin/license/KEY-1", admin, false},
		{"POST", "/v1/admin/update-notes", admin, false},
		{"POST", "/v1/admin/reissue-token", admin, false},
		{"POST", "/v1/admin/deactivate-by-instance-id", admin, false},
		{"POST", "/v1/admin/reset-usage", admin, false},
		{"GET", "/v1/admin/build-info", admin, false},
		{"GET", "/v1/billing/status", admin, false},
		{"POST", "/v1/billing/checkout", admin, false},
		{"POST", "/v1/rotate-api-key", admin, false},
		{"GET", "/v1/list-releases", admin, false},
		{"GET", "/v1/release/17", admin, false},
		// addendum: operator and storefront management routes are Admin-Info; the document
		// itself is Public.
		{"POST", "/v1/operator/tenants", admin, false},
		{"POST", "/v1/storefront/webhooks", admin, false},
		{"GET", "/v1/storefront/webhooks", admin, false},
		{"POST", "/v1/storefront/webhooks/wh_1/secret", admin, false},
		{"POST", "/v1/storefront/webhooks/wh_1/disable", admin, false},
		{"POST", "/v1/storefront/mappings", admin, false},
		{"GET", "/v1/storefront/mappings", admin, false},
		{"DELETE", "/v1/storefront/mappings/3", admin, false},
		{"GET", "/v1/storefront/deliveries", admin, false},
		{"GET", "/v1/openapi.json", Public, false},
		// addendum §9: console sign-in attempts and data exports.
		{"POST", "/console/login", admin, false},
		{"GET", "/console/export", admin, false},
		// The end-user portal: the Public tier, pages and actions alike.
		{"GET", "/portal/TOKEN", Public, false},
		{"POST", "/portal/TOKEN/deactivate", Public, false},
		// Paths as sent: an imported key's escaped "/" is one segment, as the mux reads it;
		// an escaped letter of a route's word or of a page's path names it still.
		{"GET", "/v1/admin/license/aGVsbG8%2Fd29y+bGQ=529843", admin, false},
		{"GET", "/v1/export-license/..%2F..%2Fx/offline", Public, false},
		{"GET", "/v1/list-activations/PCT%2541%3FQ%23F&x", admin, false},
		{"GET", "/v1/%61dmin/license/KEY", admin, false},
		{"POST", "/console/%6Cogin", admin, false},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			t.Parallel()
			got, ok := Classify(tt.method, tt.path, adminMax)
			if !ok {
				t.Fatal("not limited, want a tier")
			}
			if got.Tier != tt.tier || got.PerLicenseKey != tt.perKey {
				t.Errorf("got %+v, want tier %+v per-key %v", got, tt.tier, tt.perKey)
			}
		})
	}
}

func TestClassify_EveryRouteOfTheTableIsClassifiedByItsTier(t *testing.T) {
	t.Parallel()
	const adminMax = 7
	want := map[string]Tier{
		openapi.TierValidation: Validation, openapi.TierActivation: Activation, openapi.TierPublic: Public,
		openapi.TierManagement: Management, openapi.TierAdminInfo: AdminInfo(adminMax), openapi.TierImport: Import,
	}
	param := regexp.MustCompile(`\{[^}]+\}`)
	for _, route := range openapi.Routes() {
		path := param.ReplaceAllString(route.Path, "KEY-1")
		got, ok := Classify(route.Method, path, adminMax)
		if route.Tier == openapi.TierNone {
			if ok {
				t.Errorf("%s %s: limited by %+v, want no tier", route.Method, path, got)
			}
			continue
		}
		if !ok || got.Tier != want[route.Tier] || got.PerLicenseKey != route.PerLicenseKey {
			t.Errorf("%s %s: got %+v (%v), want tier %s per-key %v", route.Method, path, got, ok, route.Tier, route.PerLicenseKey)
		}
	}
}

func TestClassify_TierLimitsAreTheSpecsAndAdminInfoIsConfigurable(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		tier  Tier
		limit int
	}{
		{Validation, 1000}, {Activation, 300}, {ActivationPerKey, 20}, {Public, 500},
		{Management, 100}, {AdminInfo(300), 300}, {Import, 200},
	} {
		if tt.tier.Limit != tt.limit || tt.tier.Window.Minutes() != 15 {
			t.Errorf("%s: %d per %v, want %d per 15m", tt.tier.Name, tt.tier.Limit, tt.tier.Window, tt.limit)
		}
	}
	for _, adminMax := range []int{1, 300, 5000} {
		r, _ := Classify("GET", "/v1/list-licenses", adminMax)
		if r.Tier.Limit != adminMax {
			t.Errorf("ADMIN_RATE_LIMIT_MAX=%d: limit %d", adminMax, r.Tier.Limit)
		}
	}
}

func TestClassify_HealthCallbacksAndUnknownRequestsAreNotLimited(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ method, path string }{
		{"GET", "/"},
		{"POST", "/v1/webhooks/storefront/wh_1"},
		{"POST", "/v1/webhooks/billing"},
		{"GET", "/v1/nope"},
		{"GET", "/verify-license"},
		{"POST", "/v1/verify-license/"},
		// The method is part of the route.
		{"GET", "/v1/verify-license"},
		{"POST", "/v1/delete-license"},
		{"GET", "/v1/delete-license"},
		{"POST", "/v1/export-license/KEY-1"},
		{"PUT", "/v1/operator/tenants"},
		// A path parameter must be one non-empty segment, with only the listed tails.
		{"GET", "/v1/export-license/"},
		{"GET", "/v1/export-license//file"},
		{"GET", "/v1/export-license/KEY-1/other"},
		{"GET", "/v1/export-license/KEY-1/file/more"},
		{"GET", "/v1/list-activations/"},
		{"GET", "/v1/list-activations/KEY-1/more"},
		{"GET", "/v1/admin/license/"},
		{"GET", "/v1/release/"},
		{"GET", "/v1/release/1/2"},
		// Subtrees hold routes below them, not the bare prefix.
		{"GET", "/v1/billing"},
		{"GET", "/v1/billing/"},
		{"GET", "/v1/storefront"},
	} {
		if r, ok := Classify(tt.method, tt.path, 300); ok {
			t.Errorf("%s %s: limited by %+v, want no tier", tt.method, tt.path, r)
		}
	}
}
