package server

import (
	"strings"
	"testing"

	eventsv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/events/v1"
)

// The license_key filter reads a key as licensing does: every spelling that finds the
// license on the other routes filters on the key as stored; a string that is no Keyhouse
// key (an imported key of another system) is kept as given.
func TestLicenseKeyFilterTakesEverySpellingOfTheKey(t *testing.T) {
	const stored = "7KQ2-M9XD-4HRT-0BWN-ZC3E-P6YA-1GVF"
	for _, given := range []string{stored, strings.ToLower(stored), strings.ReplaceAll(stored, "-", ""),
		strings.ReplaceAll(stored, "0", "O"), strings.ReplaceAll(stored, "1", "l"), " 7KQ2 M9XD 4HRT 0BWN ZC3E P6YA 1GVF"} {
		f, err := filter(&eventsv1.ListEventsRequest{LicenseKey: given})
		if err != nil || f.LicenseKey != stored {
			t.Errorf("license_key=%q filters on %q (%v), want %q", given, f.LicenseKey, err, stored)
		}
	}
	// Shaped like a Keyhouse key, so stored in its issued form (licensing's importKey).
	if f, _ := filter(&eventsv1.ListEventsRequest{LicenseKey: "IMPORTREV-1780000000000000000"}); f.LicenseKey != "1MP0-RTRE-V178-0000-0000-0000-0000" {
		t.Errorf("an imported Keyhouse-shaped key filters on %q", f.LicenseKey)
	}
	if f, _ := filter(&eventsv1.ListEventsRequest{LicenseKey: "IMPORT-42-A"}); f.LicenseKey != "IMPORT-42-A" {
		t.Errorf("another system's key filters on %q", f.LicenseKey)
	}
}

// The type filter takes what an endpoint's events list takes: ping and tenant.deleted
// never reach the log, so asking for them is refused, not answered with nothing.
func TestTypeFilterTakesTheTypesOfTheLog(t *testing.T) {
	for _, typ := range []string{"license.issued", "license.", "seat.", "webhook_endpoint.disabled", "lease_key.rotated"} {
		if _, err := filter(&eventsv1.ListEventsRequest{Type: typ}); err != nil {
			t.Errorf("type=%s: %v", typ, err)
		}
	}
	for _, typ := range []string{"ping", "tenant.deleted", "tenant.", "license", "nope."} {
		_, err := filter(&eventsv1.ListEventsRequest{Type: typ})
		if err == nil || err.Error() != `type must be an event type or a prefix of one ending in "."` {
			t.Errorf("type=%s: %v, want the type error", typ, err)
		}
	}
}
