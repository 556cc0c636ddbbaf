package ratelimit

import (
	"net/url"
	"strings"
	"time"

	"github.com/keyhouse/keyhouse/console"
	"github.com/keyhouse/keyhouse/gateway/internal/openapi"
)

// Tier is one rate limit: at most Limit requests per client in each Window. Name is part
// of the Redis key, so tiers never share a counter. Window is a whole number of seconds.
type Tier struct {
	Name   string
	Limit  int
	Window time.Duration
}

// window is the length of every tier in api.md.
const window = 15 * time.Minute

// The tiers of api.md's Limits table.
var (
	Validation       = Tier{Name: "validation", Limit: 1000, Window: window}
	Activation       = Tier{Name: "activation", Limit: 300, Window: window}
	ActivationPerKey = Tier{Name: "activation-per-key", Limit: 20, Window: window}
	Public           = Tier{Name: "public", Limit: 500, Window: window}
	Management       = Tier{Name: "management", Limit: 100, Window: window}
	// Import carries up to 1,000 licenses a call: 200 calls are 200,000 licenses in a
	// window, so a 100,000-key migration never waits on it (docs/import.md).
	Import = Tier{Name: "import", Limit: 200, Window: window}
)

// AdminInfo is the Admin-Info tier, the only one whose limit is configured
// (ADMIN_RATE_LIMIT_MAX).
func AdminInfo(limit int) Tier {
	return Tier{Name: "admin-info", Limit: limit, Window: window}
}

// Route says how a request is limited.
type Route struct {
	// Tier counts the request against the client IP.
	Tier Tier
	// PerLicenseKey says ActivationPerKey also counts it, keyed by the body's license key.
	PerLicenseKey bool
}

// tiers maps the tier names of the route table (api.md's) to the tiers. Admin-Info is
// absent: its limit is configured, and Classify builds it.
var tiers = map[string]Tier{
	openapi.TierValidation: Validation,
	openapi.TierActivation: Activation,
	openapi.TierPublic:     Public,
	openapi.TierManagement: Management,
	openapi.TierImport:     Import,
}

// Classify returns the route of a request, or ok false when no tier limits it: GET /,
// the payment providers' callbacks, and paths or methods the API does not have. The
// tiers come from the gateway's one route table, the OpenAPI document (package openapi),
// where `make proto` writes the (keyhouse.api.v1.rate_limit) option of each route's
// method. adminMax is the Admin-Info limit.
//
// The console's pages are not REST routes and not in that document; the two of them that
// addendum §9 puts on Admin-Info are declared by the console itself (console.AdminInfoRoutes),
// and so are the end-user portal's pages, on the Public tier (console.OnPublicTier).
//
// path is the path as sent (url.URL.EscapedPath): a route's segment may hold an escaped
// slash (an imported key such as "ab/cd" is /v1/admin/license/ab%2Fcd), which the API's
// mux reads as one segment; the decoded path would split it in two and name no route.
func Classify(method, path string, adminMax int) (r Route, ok bool) {
	page := path
	if strings.Contains(path, "%") {
		if decoded, err := url.PathUnescape(path); err == nil {
			page = decoded // the console's mux unescapes a page's path as it matches it
		}
	}
	if console.AdminInfoRoutes[method+" "+page] {
		return Route{Tier: AdminInfo(adminMax)}, true
	}
	if console.OnPublicTier(page) {
		return Route{Tier: Public}, true
	}
	route, found := openapi.Match(method, path)
	if !found {
		return Route{}, false
	}
	switch route.Tier {
	case openapi.TierNone:
		return Route{}, false
	case openapi.TierAdminInfo:
		r.Tier = AdminInfo(adminMax)
	default:
		t, known := tiers[route.Tier]
		if !known {
			// openapi.Parse accepts only api.md's tiers; a new one needs its Tier here.
			panic("ratelimit: no tier " + route.Tier)
		}
		r.Tier = t
	}
	r.PerLicenseKey = route.PerLicenseKey
	return r, true
}
