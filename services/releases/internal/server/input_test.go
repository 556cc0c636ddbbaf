package server

import (
	"strings"
	"testing"

	"github.com/keyhouse/keyhouse/pkg/apierr"
	releasesv1 "github.com/keyhouse/keyhouse/proto/gen/go/keyhouse/releases/v1"
	"google.golang.org/grpc/codes"
)

// An artifact URL's host is a DNS name (punycode for an internationalized one) or an IP
// literal, and its port 1-65535: a host with invisible or bidi characters, or one no
// resolver can look up, would be signed into every manifest as a download address.
func TestArtifactURLHostMustBeADNSNameOrAnIPLiteral(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{
		"https://downloads.example.com/a.zip",
		"HTTPS://Downloads.Example.COM/a.zip",
		"http://downloads.example.com:8080/a.zip?x=1#y",
		"https://example.com:1/a", "https://example.com:65535/a",
		"https://example.com./a",
		"https://localhost/a",
		"https://xn--bcher-kva.example/a",
		"https://a-b.c-d.example/a", "https://3com.example/a",
		"https://192.0.2.7/a", "https://192.0.2.7:8443/a",
		"https://[2001:db8::1]/a", "https://[2001:db8::1]:8443/a",
		"https://example.com/caf\u00e9/\u00fcber.zip",
	} {
		if !validArtifactURL(ok) {
			t.Errorf("%q refused", ok)
		}
	}
	for _, bad := range []string{
		"https://\u202eexe.cod/a",     // right-to-left override
		"https://exa\u200bmple.com/a", // zero-width space
		"https://example.com/\u202eexe.zip",
		"https://\u2060example.com/a", // word joiner
		"https://b\u00fccher.example/a",
		"https://.../", "https://./a", "https://a..b/a", "https://.example.com/a",
		"https://-/", "https://-example.com/a", "https://example-.com/a", "https://a.-b.com/a",
		"https://exa_mple.com/a", "https://exa*mple.com/a", "https://exa!mple.com/a",
		"https://" + strings.Repeat("a", 64) + ".example/a",
		"https://example.com:99999/a", "https://example.com:0/a", "https://example.com:/a",
		"https://1.2.3/a", "https://256.1.1.1/a", "https://example.123/a", "https://0x7f.1/a",
		"https://[fe80::1%25eth0]/a", "https://[192.0.2.7]/a",
		"https://down loads.example.com/a", "https://example.com/my\u00a0app.zip",
	} {
		if validArtifactURL(bad) {
			t.Errorf("%q accepted", bad)
		}
	}
}

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
