// Package openapi is the OpenAPI (Swagger 2.0) document of the REST surface and the
// gateway's one route table, read from it.
//
// `make proto` writes openapi.json: protoc-gen-openapiv2 renders the http.yaml routes,
// then ./gen adds the hand-written routes of handwritten.json (plain gateway handlers:
// the .lic download, validate-license, webhooks, GET /) and stamps every operation with
// the gRPC method behind it and the rate tier and access level declared on that method in
// its proto ((keyhouse.api.v1.rate_limit), (keyhouse.api.v1.access)). The gateway serves
// the document at GET /v1/openapi.json and its rate limiter classifies requests with
// Match, so the document users read and the limits the gateway applies cannot disagree,
// and a route whose method declares no tier does not get through `make proto`.
package openapi

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
)

//go:embed openapi.json
var document []byte

// Document returns the OpenAPI document served at GET /v1/openapi.json.
func Document() []byte { return document }

// Extensions written by ./gen on every operation.
const (
	// ExtGRPCMethod is the full gRPC method a route calls, "/pkg.Service/Method"; absent
	// for routes the gateway answers itself.
	ExtGRPCMethod = "x-keyhouse-grpc-method"
	// ExtRateTier is api.md's tier name (TierValidation, …) or TierNone.
	ExtRateTier = "x-keyhouse-rate-tier"
	// ExtPerLicenseKey marks routes the per-license-key Activation tier also counts.
	ExtPerLicenseKey = "x-keyhouse-rate-limit-per-license-key"
	// ExtAccess is public, tenant or admin.
	ExtAccess = "x-keyhouse-access"
)

// The tier names of api.md's Limits table, as they appear in the document.
const (
	TierNone       = "none"
	TierValidation = "Validation"
	TierActivation = "Activation"
	TierPublic     = "Public"
	TierManagement = "Management"
	TierAdminInfo  = "Admin-Info"
	// TierImport is Keyhouse's own, beyond api.md's table: POST /v1/licenses/import.
	TierImport = "Import"
)

// Route is one operation of the document.
type Route struct {
	Method string // GET, POST, DELETE, …
	// Path is the template, e.g. /v1/export-license/{key}/file: a {name} segment matches
	// one non-empty path segment.
	Path          string
	OperationID   string
	GRPCMethod    string
	Tier          string
	PerLicenseKey bool
	Access        string

	segments []string
}

// index is the document's routes, ready for Match.
type index struct {
	all []Route
	// exact holds the routes without parameters by "METHOD path", so the common case is
	// one map lookup; param holds the others.
	exact map[string]Route
	param []Route
	// paths holds the paths of exact, words the literal segments of every route ("v1",
	// "admin", "license").
	paths, words map[string]bool
}

var table = sync.OnceValues(func() (*index, error) {
	routes, err := Parse(document)
	if err != nil {
		return nil, err
	}
	ix := &index{all: routes, exact: map[string]Route{}, paths: map[string]bool{}, words: map[string]bool{}}
	for _, r := range routes {
		for _, seg := range r.segments {
			if seg != "" && !isParam(seg) {
				ix.words[seg] = true
			}
		}
		if strings.Contains(r.Path, "{") {
			ix.param = append(ix.param, r)
		} else {
			ix.exact[r.Method+" "+r.Path] = r
			ix.paths[r.Path] = true
		}
	}
	return ix, nil
})

func mustTable() *index {
	ix, err := table()
	if err != nil {
		panic(err)
	}
	return ix
}

// Routes returns every operation of the embedded document, sorted by path and method. The
// document is generated and checked by the tests, so a parse error panics.
func Routes() []Route { return mustTable().all }

// Match returns the route of a request, or ok false when the document has none. A
// literal path wins over a template, and among templates the one with more literal
// segments. path is the path as sent (url.URL.EscapedPath), split into segments as the
// mux splits it: at each "/", each segment then unescaped, so a key holding an escaped
// slash (%2F) is one segment, as it is one path parameter.
func Match(method, path string) (r Route, ok bool) {
	ix := mustTable()
	segs, plain := segments(path)
	if plain {
		if r, ok := ix.exact[method+" "+path]; ok {
			return r, true
		}
	} else if joined, ok := joinPlain(segs); ok {
		if r, ok := ix.exact[method+" "+joined]; ok {
			return r, true
		}
	}
	best := -1
	for _, route := range ix.param {
		if route.Method != method || len(route.segments) != len(segs) {
			continue
		}
		if n, matched := route.match(segs); matched && n > best {
			r, ok, best = route, true, n
		}
	}
	return r, ok
}

// KnownPath reports whether path (as sent, as for Match) fits a route of the document,
// whatever its method.
func KnownPath(path string) bool {
	ix := mustTable()
	segs, plain := segments(path)
	if plain {
		if ix.paths[path] {
			return true
		}
	} else if joined, ok := joinPlain(segs); ok && ix.paths[joined] {
		return true
	}
	for _, route := range ix.param {
		if len(route.segments) != len(segs) {
			continue
		}
		if _, ok := route.match(segs); ok {
			return true
		}
	}
	return false
}

// segments splits an escaped path at each "/" and unescapes each segment; plain is true
// when nothing was escaped (the segments are the path's own, and path is what a literal
// route would spell). A segment that does not unescape is kept as sent (it names no route).
func segments(path string) (segs []string, plain bool) {
	segs = strings.Split(path, "/")
	if !strings.Contains(path, "%") {
		return segs, true
	}
	for i, s := range segs {
		if u, err := url.PathUnescape(s); err == nil {
			segs[i] = u
		}
	}
	return segs, false
}

// joinPlain is the path of segs when no segment holds a "/" (an escaped slash is data,
// never a route's separator).
func joinPlain(segs []string) (string, bool) {
	for _, s := range segs {
		if strings.Contains(s, "/") {
			return "", false
		}
	}
	return strings.Join(segs, "/"), true
}

// RouteWord reports whether seg is a literal segment of some route ("admin", "license"),
// as opposed to a value a client put in a path (a key, an id) or a word no route has.
func RouteWord(seg string) bool { return mustTable().words[seg] }

// match reports whether segs fit the template, and how many literal segments it has.
func (r Route) match(segs []string) (literals int, ok bool) {
	for i, t := range r.segments {
		if isParam(t) {
			if segs[i] == "" {
				return 0, false
			}
			continue
		}
		if t != segs[i] {
			return 0, false
		}
		literals++
	}
	return literals, true
}

func isParam(seg string) bool { return strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}") }

var methods = map[string]string{
	"get": http.MethodGet, "put": http.MethodPut, "post": http.MethodPost,
	"delete": http.MethodDelete, "patch": http.MethodPatch, "head": http.MethodHead,
	"options": http.MethodOptions,
}

// Parse reads the routes of an OpenAPI 2 document. Every operation must name its rate
// tier (one of api.md's names or TierNone) and access level.
func Parse(doc []byte) ([]Route, error) {
	var d struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		return nil, fmt.Errorf("openapi: %w", err)
	}
	var routes []Route
	for path, item := range d.Paths {
		for key, raw := range item {
			method, ok := methods[key]
			if !ok {
				continue // "parameters" and other path-item fields
			}
			var op map[string]json.RawMessage
			if err := json.Unmarshal(raw, &op); err != nil {
				return nil, fmt.Errorf("openapi: %s %s: %w", method, path, err)
			}
			r := Route{Method: method, Path: path, segments: strings.Split(path, "/")}
			for _, f := range []struct {
				name string
				dst  any
			}{
				{"operationId", &r.OperationID}, {ExtGRPCMethod, &r.GRPCMethod}, {ExtRateTier, &r.Tier},
				{ExtPerLicenseKey, &r.PerLicenseKey}, {ExtAccess, &r.Access},
			} {
				if v, ok := op[f.name]; ok {
					if err := json.Unmarshal(v, f.dst); err != nil {
						return nil, fmt.Errorf("openapi: %s %s: %s: %w", method, path, f.name, err)
					}
				}
			}
			if err := r.validate(); err != nil {
				return nil, fmt.Errorf("openapi: %s %s: %w", method, path, err)
			}
			routes = append(routes, r)
		}
	}
	sort.Slice(routes, func(i, j int) bool {
		if routes[i].Path != routes[j].Path {
			return routes[i].Path < routes[j].Path
		}
		return routes[i].Method < routes[j].Method
	})
	return routes, nil
}

func (r Route) validate() error {
	switch r.Tier {
	case TierValidation, TierActivation, TierPublic, TierManagement, TierAdminInfo, TierImport:
	case TierNone:
		if r.PerLicenseKey {
			return fmt.Errorf("%s true on a route that is not limited", ExtPerLicenseKey)
		}
	case "":
		return fmt.Errorf("no %s", ExtRateTier)
	default:
		return fmt.Errorf("unknown %s %q", ExtRateTier, r.Tier)
	}
	switch r.Access {
	case "public", "tenant", "admin":
	default:
		return fmt.Errorf("%s %q, want public, tenant or admin", ExtAccess, r.Access)
	}
	if !strings.HasPrefix(r.Path, "/") {
		return fmt.Errorf("path does not start with /")
	}
	for _, s := range r.segments[1:] {
		if s == "" && r.Path != "/" {
			return fmt.Errorf("empty path segment")
		}
		if strings.ContainsAny(s, "{}") && !isParam(s) || strings.ContainsAny(s, "=*") {
			return fmt.Errorf("segment %q: only whole-segment {name} parameters are supported", s)
		}
	}
	return nil
}
