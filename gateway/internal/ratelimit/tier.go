package ratelimit

import (
	"strings"
	"time"
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

// adminInfo stands for AdminInfo in the route tables; Classify fills in the configured limit.
var adminInfo = AdminInfo(0)

// exactRoutes maps "METHOD path" to its route, for routes without path parameters.
var exactRoutes = map[string]Route{
	"POST /v1/verify-license":                  {Tier: Validation},
	"POST /v1/validate-license":                {Tier: Validation},
	"POST /v1/track-usage":                     {Tier: Validation},
	"POST /v1/usage-report":                    {Tier: Validation},
	"POST /v1/check-update":                    {Tier: Validation},
	"POST /v1/activate-license":                {Tier: Activation, PerLicenseKey: true},
	"POST /v1/deactivate-license":              {Tier: Activation, PerLicenseKey: true},
	"POST /v1/verify-license-file":             {Tier: Activation},
	"POST /v1/verify-license-file-base64":      {Tier: Activation},
	"GET /v1/public-key":                       {Tier: Public},
	"POST /v1/issue-license":                   {Tier: Management},
	"POST /v1/revoke-license":                  {Tier: Management},
	"DELETE /v1/delete-license":                {Tier: Management},
	"POST /v1/admin/update-license-terms":      {Tier: Management},
	"POST /v1/register-release":                {Tier: Management},
	"POST /v1/unpublish-release":               {Tier: Management},
	"GET /v1/list-licenses":                    {Tier: adminInfo},
	"GET /v1/admin/stats":                      {Tier: adminInfo},
	"GET /v1/recent-activations":               {Tier: adminInfo},
	"POST /v1/admin/update-notes":              {Tier: adminInfo},
	"POST /v1/admin/reissue-token":             {Tier: adminInfo},
	"POST /v1/admin/deactivate-by-instance-id": {Tier: adminInfo},
	"POST /v1/admin/reset-usage":               {Tier: adminInfo},
	"GET /v1/admin/build-info":                 {Tier: adminInfo},
	"POST /v1/rotate-api-key":                  {Tier: adminInfo},
	"GET /v1/list-releases":                    {Tier: adminInfo},
	"POST /v1/operator/tenants":                {Tier: adminInfo},
	// addendum §9: console sign-in attempts and data exports count against Admin-Info.
	"POST /console/login": {Tier: adminInfo},
	"GET /console/export": {Tier: adminInfo},
}

// paramRoutes are the routes with one path parameter: prefix, a non-empty segment, then
// one of the tails ("" is the parameter alone).
var paramRoutes = []struct {
	method, prefix string
	tails          []string
	route          Route
}{
	{"GET", "/v1/export-license/", []string{"", "/file", "/offline"}, Route{Tier: Public}},
	{"GET", "/v1/list-activations/", []string{""}, Route{Tier: adminInfo}},
	{"GET", "/v1/admin/license/", []string{""}, Route{Tier: adminInfo}},
	{"GET", "/v1/release/", []string{""}, Route{Tier: adminInfo}},
}

// subtreePrefixes hold management routes that all belong to Admin-Info whatever their
// method, so billing and storefront routes added later are limited without touching this
// table. The callbacks live under /v1/webhooks/, outside these subtrees.
var subtreePrefixes = []string{"/v1/billing/", "/v1/storefront/"}

// Classify returns the route of a request, or ok false when no tier limits it: GET /, the
// storefront and billing callbacks, and paths or methods the API does not have. adminMax
// is the Admin-Info limit.
func Classify(method, path string, adminMax int) (r Route, ok bool) {
	r, ok = classify(method, path)
	if r.Tier.Name == adminInfo.Name {
		r.Tier = AdminInfo(adminMax)
	}
	return r, ok
}

func classify(method, path string) (Route, bool) {
	if r, ok := exactRoutes[method+" "+path]; ok {
		return r, true
	}
	for _, p := range paramRoutes {
		rest, found := strings.CutPrefix(path, p.prefix)
		if method != p.method || !found {
			continue
		}
		param, tail, _ := strings.Cut(rest, "/")
		if param == "" {
			continue
		}
		if tail != "" {
			tail = "/" + tail
		}
		for _, t := range p.tails {
			if tail == t {
				return p.route, true
			}
		}
	}
	for _, prefix := range subtreePrefixes {
		if rest, found := strings.CutPrefix(path, prefix); found && rest != "" {
			return Route{Tier: adminInfo}, true
		}
	}
	return Route{}, false
}
