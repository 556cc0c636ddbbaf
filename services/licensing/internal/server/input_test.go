package server

import (
	"testing"

	"google.golang.org/protobuf/types/known/structpb"
)

func TestParseLimitsAllowlistAndValues(t *testing.T) {
	for _, tc := range []struct {
		name  string
		in    map[string]any
		error string
	}{
		{"every allowlisted key", map[string]any{"users": 1, "seats": 2, "admins": 3, "projects": 4, "environments": 5,
			"tenants": 6, "api_calls_per_day": 7, "rate_limit_rps": 8, "concurrent_sessions": 9, "features": 10}, ""},
		{"unknown key named first", map[string]any{"zeta": 1, "alpha": 1}, "Unknown limit key: alpha"},
		{"unknown key before bad value", map[string]any{"seats": -1, "storage": 1}, "Unknown limit key: storage"},
		{"negative", map[string]any{"seats": -1}, "limits.seats must be a positive number of at most 9007199254740991"},
		{"bool", map[string]any{"seats": true}, "limits.seats must be a positive number of at most 9007199254740991"},
		{"beyond 2^53", map[string]any{"seats": 1e16}, "limits.seats must be a positive number of at most 9007199254740991"},
		{"fractional is a positive number", map[string]any{"rate_limit_rps": 0.5}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := structpb.NewStruct(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			_, err = parseLimits(s)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tc.error {
				t.Fatalf("error %q, want %q", got, tc.error)
			}
		})
	}
}
