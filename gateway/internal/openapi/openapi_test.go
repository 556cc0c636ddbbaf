package openapi

import (
	"strings"
	"testing"
)

func TestParse_ARouteWithoutATierOrAccessIsRefused(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ name, op, want string }{
		{"no tier", `{"x-keyhouse-access": "public"}`, "no x-keyhouse-rate-tier"},
		{"unknown tier", `{"x-keyhouse-rate-tier": "Gold", "x-keyhouse-access": "public"}`, `unknown x-keyhouse-rate-tier "Gold"`},
		{"no access", `{"x-keyhouse-rate-tier": "Public"}`, "x-keyhouse-access"},
		{"per key without a tier", `{"x-keyhouse-rate-tier": "none", "x-keyhouse-access": "public", "x-keyhouse-rate-limit-per-license-key": true}`, "not limited"},
	} {
		_, err := Parse([]byte(`{"paths": {"/v1/x": {"get": ` + tt.op + `}}}`))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want %q", tt.name, err, tt.want)
		}
	}
	if _, err := Parse([]byte(`{"paths": {"/v1/{name=**}": {"get": {"x-keyhouse-rate-tier": "Public", "x-keyhouse-access": "public"}}}}`)); err == nil {
		t.Error("a multi-segment template was accepted; Match cannot route it")
	}
}

func TestMatch(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		method, path, want string // want: the template, "" for no match
	}{
		{"GET", "/", "/"},
		{"POST", "/v1/verify-license", "/v1/verify-license"},
		{"GET", "/v1/verify-license", ""},
		{"POST", "/v1/verify-license/", ""},
		{"GET", "/v1/export-license/K-1", "/v1/export-license/{key}"},
		{"GET", "/v1/export-license/K-1/file", "/v1/export-license/{key}/file"},
		{"GET", "/v1/export-license/K-1/offline", "/v1/export-license/{key}/offline"},
		{"GET", "/v1/export-license//file", ""},
		{"GET", "/v1/export-license/", ""},
		{"GET", "/v1/export-license/K-1/other", ""},
		{"GET", "/v1/release/3", "/v1/release/{id}"},
		{"GET", "/v1/release/3/4", ""},
		{"GET", "/v1/openapi.json", "/v1/openapi.json"},
		// The path as sent: an escaped "/" is a segment's data, an escaped letter is its letter.
		{"GET", "/v1/export-license/a%2Fb/file", "/v1/export-license/{key}/file"},
		{"GET", "/v1/export-license/a%2Fb%2Ffile", "/v1/export-license/{key}"},
		{"GET", "/v1/export-license/a/b/file", ""},
		{"POST", "/v1/verify%2Dlicense", "/v1/verify-license"},
		{"POST", "/v1%2Fverify-license", ""},
		{"GET", "/v1/admin/license/%25%3F%23", "/v1/admin/license/{key}"},
	} {
		r, ok := Match(tt.method, tt.path)
		if got := map[bool]string{true: r.Path}[ok]; got != tt.want {
			t.Errorf("%s %s: matched %q, want %q", tt.method, tt.path, got, tt.want)
		}
	}
}
