package router

import (
	"errors"
	"net"
	"net/netip"
	"strings"
)

// errForeignHost: a router listening only on loopback got a request
// whose Host is not a loopback name, an address or under the actor
// domain (Config.Loopback).
var errForeignHost = errors.New("host not served on this loopback router")

// LoopbackAddr reports whether listen address addr ("host:port") binds
// loopback only: its host is "localhost" or a loopback IP. An empty host
// (":8080", every interface) is not.
func LoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// loopbackHost reports whether a loopback router serves a request with
// Host host: "localhost" or a name under it (RFC 6761 section 6.3 keeps
// them on the loopback interface, so nobody else can own one), a
// loopback IP, or a name under domain (the actor domain, the operator's
// own choice). Anything else is a name someone resolved to this
// machine's loopback interface — a DNS-rebinding page in a local
// browser, which could otherwise name any actor with Ate-Target-Actor
// from its own origin.
func loopbackHost(host, domain string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if ip, err := netip.ParseAddr(host); err == nil {
		return ip.Unmap().IsLoopback()
	}
	domain = strings.ToLower(strings.Trim(domain, "."))
	for _, d := range []string{"localhost", domain} {
		if d != "" && (host == d || strings.HasSuffix(host, "."+d)) {
			return true
		}
	}
	return false
}
