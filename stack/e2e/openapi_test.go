package e2e

import (
	"encoding/json"
	"testing"
)

func TestOpenAPIDocumentIsServedInThePublicTier(t *testing.T) {
	t.Parallel()
	s := selfHosted(t)
	r := anon(t, s).Get("/v1/openapi.json").Expect(t, 200)
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	// The Public tier (500 per 15 min) counts it; other tests share the stack's budget.
	if got := r.Header.Get("X-RateLimit-Limit"); got != "500" {
		t.Errorf("X-RateLimit-Limit %q, want the Public tier's 500", got)
	}
	var doc struct {
		Swagger string                               `json:"swagger"`
		Paths   map[string]map[string]map[string]any `json:"paths"`
	}
	if err := json.Unmarshal(r.Body, &doc); err != nil {
		t.Fatal(err)
	}
	verify := doc.Paths["/v1/verify-license"]["post"]
	if doc.Swagger != "2.0" || verify["x-keyhouse-rate-tier"] != "Validation" || verify["x-keyhouse-access"] != "public" {
		t.Fatalf("swagger %q, verify-license %v", doc.Swagger, verify)
	}
	if file := doc.Paths["/v1/export-license/{key}/file"]["get"]; file["x-keyhouse-rate-tier"] != "Public" {
		t.Errorf("the hand-written .lic download: %v", file)
	}
}
