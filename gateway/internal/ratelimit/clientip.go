package ratelimit

import (
	"net/http"
	"net/netip"
	"strings"
)

// ClientIP returns the address a request is rate-limited under (see the package doc):
// the TCP peer, or, when the peer is a trusted proxy, the right-most X-Forwarded-For
// address that is not itself trusted. Addresses come back without IPv4-in-IPv6 mapping or
// zone, so one client has one identity. A RemoteAddr that is no address (a Unix socket)
// yields the zero Addr, which all such requests share.
func ClientIP(r *http.Request, trusted []netip.Prefix) netip.Addr {
	peer := parsePeer(r.RemoteAddr)
	if !isTrusted(peer, trusted) {
		return peer
	}
	var hops []string
	for _, v := range r.Header.Values("X-Forwarded-For") {
		hops = append(hops, strings.Split(v, ",")...)
	}
	client := peer
	for i := len(hops) - 1; i >= 0; i-- {
		addr, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			// A trusted proxy wrote this entry or passed it through unchecked; nothing left
			// of it can be trusted either, and the peer is an identity no client can choose.
			return peer
		}
		addr = addr.Unmap().WithZone("")
		if !isTrusted(addr, trusted) {
			return addr
		}
		client = addr
	}
	return client
}

func parsePeer(remoteAddr string) netip.Addr {
	if ap, err := netip.ParseAddrPort(remoteAddr); err == nil {
		return ap.Addr().Unmap().WithZone("")
	}
	if a, err := netip.ParseAddr(remoteAddr); err == nil {
		return a.Unmap().WithZone("")
	}
	return netip.Addr{}
}

func isTrusted(addr netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}
