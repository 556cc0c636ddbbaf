package ratelimit

import (
	"net/http/httptest"
	"net/netip"
	"testing"
)

func TestClientIP(t *testing.T) {
	t.Parallel()
	proxies := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	tests := []struct {
		name    string
		remote  string
		xff     []string
		trusted []netip.Prefix
		want    string
	}{
		{"without trusted proxies the header is never trusted", "10.0.0.1:4000", []string{"203.0.113.7"}, nil, "10.0.0.1"},
		{"an untrusted peer cannot choose its address", "198.51.100.9:4000", []string{"203.0.113.7"}, proxies, "198.51.100.9"},
		{"a trusted peer's forwarded client is used", "10.0.0.1:4000", []string{"203.0.113.7"}, proxies, "203.0.113.7"},
		{"the right-most untrusted address wins over spoofed left entries", "10.0.0.1:4000", []string{"1.1.1.1, 2.2.2.2, 203.0.113.7, 10.0.0.2"}, proxies, "203.0.113.7"},
		{"several headers form one list in order", "10.0.0.1:4000", []string{"1.1.1.1", "203.0.113.7, 10.0.0.2"}, proxies, "203.0.113.7"},
		{"when every hop is a trusted proxy the left-most is the client", "10.0.0.1:4000", []string{"10.0.0.3, 10.0.0.2"}, proxies, "10.0.0.3"},
		{"a trusted peer without the header is the client", "10.0.0.1:4000", nil, proxies, "10.0.0.1"},
		{"a malformed entry stops the walk at the peer", "10.0.0.1:4000", []string{"203.0.113.7, garbage"}, proxies, "10.0.0.1"},
		{"an empty entry stops the walk at the peer", "10.0.0.1:4000", []string{"203.0.113.7, "}, proxies, "10.0.0.1"},
		{"an entry with a port is malformed", "10.0.0.1:4000", []string{"203.0.113.7:80"}, proxies, "10.0.0.1"},
		{"malformed entries left of the client are never reached", "10.0.0.1:4000", []string{"garbage, 203.0.113.7"}, proxies, "203.0.113.7"},
		{"IPv6 peer", "[2001:db8::1]:443", nil, nil, "2001:db8::1"},
		{"IPv6 trusted proxy and client", "[fd00::1]:443", []string{"2001:db8::7, fd00::2"}, proxies, "2001:db8::7"},
		{"an IPv4-mapped peer is its IPv4 address", "[::ffff:198.51.100.9]:80", nil, nil, "198.51.100.9"},
		{"an IPv4-mapped peer matches IPv4 trusted ranges", "[::ffff:10.0.0.1]:80", []string{"203.0.113.7"}, proxies, "203.0.113.7"},
		{"an IPv4-mapped forwarded address is its IPv4 address", "10.0.0.1:4000", []string{"::ffff:203.0.113.7"}, proxies, "203.0.113.7"},
		{"an IPv4-mapped forwarded proxy is trusted", "10.0.0.1:4000", []string{"203.0.113.7, ::ffff:10.0.0.2"}, proxies, "203.0.113.7"},
		{"a zone is dropped", "[fe80::1%eth0]:80", nil, nil, "fe80::1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest("GET", "/v1/public-key", nil)
			r.RemoteAddr = tt.remote
			for _, v := range tt.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			if got := ClientIP(r, tt.trusted); got != netip.MustParseAddr(tt.want) {
				t.Errorf("got %v, want %s", got, tt.want)
			}
		})
	}
}

func TestClientIP_APeerThatIsNoAddressIsTheZeroAddr(t *testing.T) {
	t.Parallel()
	r := httptest.NewRequest("GET", "/v1/public-key", nil)
	r.RemoteAddr = "@"
	r.Header.Set("X-Forwarded-For", "203.0.113.7")
	if got := ClientIP(r, []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}); got.IsValid() {
		t.Errorf("got %v, want the zero Addr", got)
	}
}
