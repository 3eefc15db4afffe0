// Package egress is the sandbox boundary's outbound side: which
// destinations a sandbox may open TCP connections to (a template's
// network.egress allow-list), and how that is enforced on a worker.
//
// A sandbox's only route leads to its worker's outer namespace (package
// netns), which has no route anywhere and does not forward. The node
// keeps it that way and adds, per worker:
//
//   - an nftables table in the outer namespace (Apply): input from the
//     sandbox is dropped except the self-service endpoint and, when the
//     template allows anything, the egress proxy's port; forwarding is
//     dropped; TCP connections to allowed destinations are redirected to
//     the proxy. Nothing is added to the host's own namespace.
//   - a transparent TCP proxy (Proxy) listening on the gateway, which
//     reads each connection's original destination, checks it again
//     against the allow-list and the always-denied addresses, and dials
//     it from the node's own namespace.
//   - /etc/hosts for the sandbox (HostsFile) naming the allowed host
//     names, resolved by the node when the actor starts or restores; the
//     sandbox has no DNS server to ask, so no other name resolves.
//
// Only TCP over IPv4 leaves a sandbox; UDP (DNS included) and IPv6 never do.
package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	atev1 "substrate.dev/ate/api/ate/v1"
)

// MaxRules bounds a template's egress rules; each becomes a few nftables
// rules per port and address on every start.
const MaxRules = 64

// MaxPorts bounds one rule's ports.
const MaxPorts = 16

// ErrInvalid marks a policy that cannot be applied; the message names the
// field.
var ErrInvalid = errors.New("invalid network policy")

// Rule allows TCP to one destination: Prefix, or the addresses Host
// resolves to. Ports empty means every port.
type Rule struct {
	Prefix netip.Prefix
	Host   string
	Ports  []uint16
}

// Policy is a template's parsed egress allow-list. The zero Policy allows
// nothing.
type Policy struct {
	Rules []Rule
}

// Empty reports whether p allows nothing.
func (p Policy) Empty() bool { return len(p.Rules) == 0 }

// Hosts returns the host names p's rules name, in rule order, without
// repeats.
func (p Policy) Hosts() []string {
	var hs []string
	for _, r := range p.Rules {
		if r.Host != "" && !slices.Contains(hs, r.Host) {
			hs = append(hs, r.Host)
		}
	}
	return hs
}

// FromProto parses and checks np (nil is the empty policy). Errors wrap
// ErrInvalid and name the field as network.egress[i].FIELD.
func FromProto(np *atev1.NetworkPolicy) (Policy, error) {
	rules := np.GetEgress()
	if len(rules) > MaxRules {
		return Policy{}, fmt.Errorf("%w: network.egress: at most %d rules, got %d", ErrInvalid, MaxRules, len(rules))
	}
	var p Policy
	for i, er := range rules {
		field := fmt.Sprintf("network.egress[%d]", i)
		var r Rule
		switch {
		case er.GetCidr() != "" && er.GetHost() != "":
			return Policy{}, fmt.Errorf("%w: %s: set cidr or host, not both", ErrInvalid, field)
		case er.GetCidr() != "":
			pfx, err := parsePrefix(er.GetCidr())
			if err != nil {
				return Policy{}, fmt.Errorf("%w: %s.cidr: %w", ErrInvalid, field, err)
			}
			r.Prefix = pfx
		case er.GetHost() != "":
			h := strings.TrimSuffix(strings.ToLower(er.GetHost()), ".")
			if err := validHost(h); err != nil {
				return Policy{}, fmt.Errorf("%w: %s.host: %w", ErrInvalid, field, err)
			}
			r.Host = h
		default:
			return Policy{}, fmt.Errorf("%w: %s: needs cidr or host", ErrInvalid, field)
		}
		if len(er.GetPorts()) > MaxPorts {
			return Policy{}, fmt.Errorf("%w: %s.ports: at most %d ports", ErrInvalid, field, MaxPorts)
		}
		for _, port := range er.GetPorts() {
			if port < 1 || port > 65535 {
				return Policy{}, fmt.Errorf("%w: %s.ports: %d is not a TCP port (1-65535)", ErrInvalid, field, port)
			}
			if !slices.Contains(r.Ports, uint16(port)) {
				r.Ports = append(r.Ports, uint16(port))
			}
		}
		p.Rules = append(p.Rules, r)
	}
	return p, nil
}

// parsePrefix accepts an IPv4 prefix in canonical form or a bare IPv4
// address (a /32).
func parsePrefix(s string) (netip.Prefix, error) {
	var pfx netip.Prefix
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return pfx, fmt.Errorf("%q is not an IPv4 prefix such as 10.0.0.0/8", s)
		}
		if p != p.Masked() {
			return pfx, fmt.Errorf("%q has host bits set; write %s", s, p.Masked())
		}
		pfx = p
	} else {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return pfx, fmt.Errorf("%q is not an IPv4 address or prefix such as 192.0.2.7 or 10.0.0.0/8", s)
		}
		pfx = netip.PrefixFrom(a, a.BitLen())
	}
	if !pfx.Addr().Is4() {
		return netip.Prefix{}, fmt.Errorf("%q: only IPv4 leaves a sandbox", s)
	}
	return pfx, nil
}

// validHost checks a DNS name the way a resolver would take it: labels of
// letters, digits and hyphens (underscores too, as service names use),
// 1-63 bytes each, 253 in all, and not an IP literal (use cidr).
func validHost(h string) error {
	if _, err := netip.ParseAddr(h); err == nil {
		return fmt.Errorf("%q is an address; use cidr", h)
	}
	if len(h) == 0 || len(h) > 253 {
		return fmt.Errorf("%q: a host name has 1-253 characters", h)
	}
	for _, l := range strings.Split(h, ".") {
		if len(l) == 0 || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return fmt.Errorf("%q: label %q is not a DNS label", h, l)
		}
		for _, c := range l {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("%q: label %q has %q", h, l, c)
			}
		}
	}
	return nil
}

// Allowed is a Policy with its host names resolved: what a worker
// enforces while it hosts one actor.
type Allowed struct {
	// Rules are Policy's rules with each host rule replaced by one rule
	// per IPv4 address it resolved to (as /32s, Host kept for logs).
	Rules []Rule
	// Hosts maps each allowed host name to its IPv4 addresses, for the
	// sandbox's /etc/hosts.
	Hosts map[string][]netip.Addr
}

// Resolver is the part of *net.Resolver Resolve uses.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// DNSResolver returns a resolver that asks the DNS server at addr
// (host:port) alone, ignoring the node's /etc/hosts and resolv.conf.
func DNSResolver(addr string) Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}}
}

// Resolve resolves p's host names with r (net.DefaultResolver when nil),
// on the node, for IPv4. A name that does not resolve fails the whole
// call: an actor whose allowed service is unreachable should not start
// believing it is.
func Resolve(ctx context.Context, r Resolver, p Policy) (Allowed, error) {
	if r == nil {
		r = net.DefaultResolver
	}
	a := Allowed{Hosts: map[string][]netip.Addr{}}
	for _, rule := range p.Rules {
		if rule.Host == "" {
			a.Rules = append(a.Rules, rule)
			continue
		}
		addrs, ok := a.Hosts[rule.Host]
		if !ok {
			got, err := r.LookupNetIP(ctx, "ip4", rule.Host)
			if err != nil {
				return Allowed{}, fmt.Errorf("egress: resolve allowed host %s: %w", rule.Host, err)
			}
			for _, ad := range got {
				if ad = ad.Unmap(); ad.Is4() && !slices.Contains(addrs, ad) {
					addrs = append(addrs, ad)
				}
			}
			if len(addrs) == 0 {
				return Allowed{}, fmt.Errorf("egress: resolve allowed host %s: no IPv4 address", rule.Host)
			}
			a.Hosts[rule.Host] = addrs
		}
		for _, ad := range addrs {
			a.Rules = append(a.Rules, Rule{Prefix: netip.PrefixFrom(ad, 32), Host: rule.Host, Ports: rule.Ports})
		}
	}
	return a, nil
}

// Key is a's rules in a canonical text form, "" when a allows nothing: two
// Allowed with the same Key make the same nftables table.
func (a *Allowed) Key() string {
	if a == nil {
		return ""
	}
	var b strings.Builder
	for _, r := range a.Rules {
		fmt.Fprintf(&b, "%s %v;", r.Prefix, r.Ports)
	}
	return b.String()
}

// Permits reports whether a's rules allow a TCP connection to dst. It
// does not consult the always-denied addresses (Deny does).
func (a *Allowed) Permits(dst netip.AddrPort) bool {
	if a == nil {
		return false
	}
	ip := dst.Addr().Unmap()
	for _, r := range a.Rules {
		if r.Prefix.Contains(ip) && (len(r.Ports) == 0 || slices.Contains(r.Ports, dst.Port())) {
			return true
		}
	}
	return false
}

// HostsFile returns /etc/hosts for a sandbox allowed a: localhost, then
// each allowed name with its addresses, sorted by name.
func (a *Allowed) HostsFile() []byte {
	var b strings.Builder
	b.WriteString("# written by the ate node: the template's allowed egress host names\n")
	b.WriteString("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
	if a != nil {
		names := make([]string, 0, len(a.Hosts))
		for h := range a.Hosts {
			names = append(names, h)
		}
		slices.Sort(names)
		for _, h := range names {
			for _, ad := range a.Hosts[h] {
				fmt.Fprintf(&b, "%s\t%s\n", ad, h)
			}
		}
	}
	return []byte(b.String())
}
