package server

import (
	"testing"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	releasesv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/releases/v1"
	"google.golang.org/grpc/codes"
)

// A blank current_version is no version, as a blank product_id is no product.
func TestCheckUpdateRefusesABlankCurrentVersion(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"", " ", "   ", "\t \u00a0"} {
		err := checkUpdateFields(&releasesv1.CheckUpdateRequest{Key: "K", ProductId: "App", CurrentVersion: v})
		if err == nil || err.Error() != "current_version is required" || !apierr.Is(err, codes.InvalidArgument) {
			t.Errorf("current_version %q: %v", v, err)
		}
	}
	if err := checkUpdateFields(&releasesv1.CheckUpdateRequest{Key: "K", ProductId: "App", CurrentVersion: " 1.0.0"}); err != nil {
		t.Errorf("a version with a space before it: %v", err)
	}
}

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
