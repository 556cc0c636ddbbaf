package server

import "testing"

// An id is digits only: "+38" names no release, as "abc" does.
func TestReleaseIDIsAPositiveNumberInDigits(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]int32{"38": 38, "038": 38, "2147483647": 2147483647} {
		if id, ok := releaseID(s); !ok || id != want {
			t.Errorf("releaseID(%q) = %d, %v", s, id, ok)
		}
	}
	for _, s := range []string{"+38", "-4", "0", " 38", "38 ", "1.5", "abc", "2147483648", ""} {
		if id, ok := releaseID(s); ok {
			t.Errorf("releaseID(%q) = %d, a release id", s, id)
		}
	}
}
