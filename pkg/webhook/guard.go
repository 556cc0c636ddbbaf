package webhook

import (
	"context"
	"errors"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
)

// MaxURLLength is the longest endpoint URL accepted.
const MaxURLLength = 2048

// ErrNotPublic is an endpoint URL whose host is or resolves to an address the hosted
// service must not reach (its own network, the cloud metadata service, ...). The text is
// the API's answer.
var ErrNotPublic = errors.New("Webhook URL must resolve to a public address")

// Address ranges that are not "public" beyond what net/netip classifies: shared address
// space (CGNAT), "this network", IETF protocol assignments, benchmarking, reserved; and
// the IPv6 ranges that embed an IPv4 address, which a network that translates them (a
// NAT64 or SIIT gateway, a 6to4 or Teredo relay) delivers to that IPv4 address, private
// or the metadata service's as it may be: NAT64, IPv4-compatible (::a.b.c.d),
// IPv4-translated (::ffff:0:a.b.c.d), 6to4 and Teredo; and the deprecated site-local
// range, which some networks still route internally.
var notPublic = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("64:ff9b::/96"),
	netip.MustParsePrefix("64:ff9b:1::/48"),
	netip.MustParsePrefix("::/96"),
	netip.MustParsePrefix("::ffff:0:0:0/96"),
	netip.MustParsePrefix("2002::/16"),
	netip.MustParsePrefix("2001::/32"),
	netip.MustParsePrefix("fec0::/10"),
}

// IsPublic reports whether a webhook may be delivered to addr in hosted mode: not
// loopback, private, link-local, multicast or unspecified, in IPv4 or IPv6 (an
// IPv4-mapped IPv6 address is judged as its IPv4 address).
func IsPublic(addr netip.Addr) bool {
	addr = addr.Unmap()
	if !addr.IsValid() || addr.IsLoopback() || addr.IsPrivate() || addr.IsUnspecified() ||
		addr.IsLinkLocalUnicast() || addr.IsLinkLocalMulticast() ||
		addr.IsInterfaceLocalMulticast() || addr.IsMulticast() || !addr.IsGlobalUnicast() {
		return false
	}
	for _, p := range notPublic {
		if p.Contains(addr) {
			return false
		}
	}
	return true
}

// Resolver looks a host name up; *net.Resolver is one. Tests pass their own to make a
// name resolve to a private address.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// URLError is an endpoint URL refused at creation or update; its text is the API's answer.
type URLError struct{ Msg string }

func (e *URLError) Error() string { return e.Msg }

// CheckURL validates an endpoint URL: http or https, a host, at most MaxURLLength
// characters, no user info (a password in a URL would be shown in every listing). Unless
// allowPrivate, the host must be public: an IP literal is judged directly, a name by
// every address it resolves to (one private answer is enough to refuse). A name that does
// not resolve is refused too, since it cannot be judged.
func CheckURL(ctx context.Context, r Resolver, raw string, allowPrivate bool) error {
	if len(raw) > MaxURLLength {
		return &URLError{"url must be at most 2048 characters"}
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Hostname() == "" {
		return &URLError{"url must be an http:// or https:// URL"}
	}
	if u.User != nil {
		return &URLError{"url must not contain credentials"}
	}
	if allowPrivate {
		return nil
	}
	host := u.Hostname()
	if addr, err := netip.ParseAddr(strings.TrimSuffix(host, ".")); err == nil {
		if !IsPublic(addr) {
			return &URLError{ErrNotPublic.Error()}
		}
		return nil
	}
	addrs, err := r.LookupNetIP(ctx, "ip", host)
	if err != nil || len(addrs) == 0 {
		return &URLError{ErrNotPublic.Error()}
	}
	for _, a := range addrs {
		if !IsPublic(a) {
			return &URLError{ErrNotPublic.Error()}
		}
	}
	return nil
}

// errDialRefused is what the dial guard returns; Attempt reports it as ErrNotPublic.
var errDialRefused = errors.New("dial refused: address is not public")

// guardControl refuses a connection to an address that is not public. It runs on the
// address the dialer is about to connect to, after DNS, so a name that resolved to a
// public address at creation and to a private one now (DNS rebinding) is refused.
func guardControl(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil || !IsPublic(ap.Addr()) {
		return errDialRefused
	}
	return nil
}
