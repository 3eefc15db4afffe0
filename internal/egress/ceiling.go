package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// Restricted are the ranges a template may open only where the operator's
// ceiling says so explicitly: the private networks where a cluster's own
// machines live (other nodes, kubelets, databases, object stores, Pod and
// Service addresses), shared address space (CGNAT, also used by some
// clouds' and Tailscale's internal networks), link-local and loopback.
// From a sandbox, the node dials these from its own position, so opening
// them is the operator's decision, not a template editor's.
var Restricted = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("fc00::/7"),
	netip.MustParsePrefix("fe80::/10"),
	netip.MustParsePrefix("::1/128"),
}

// DefaultCeilingAllow is --egress-allow's default: the whole IPv4
// Internet, Restricted excepted.
var DefaultCeilingAllow = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}

// ErrBeyondCeiling marks an egress rule that would open addresses the
// operator's ceiling denies.
var ErrBeyondCeiling = errors.New("egress beyond the operator's ceiling")

// Ceiling is the operator's bound on what templates' egress rules may
// open (ate's --egress-allow and --egress-deny). It is a list of
// prefixes, each allowing or denying, and the most specific prefix
// holding an address decides (between equal prefixes, --egress-deny
// beats --egress-allow, which beats Restricted; no prefix at all denies):
// the operator's allow list, the operator's deny list (Pod and Service
// CIDRs, the addresses of the database, the object store, the nodes) and
// Restricted, denied. So 0.0.0.0/0 allowed opens the Internet but not
// 10.0.0.0/8, while 10.1.0.0/16 allowed opens that network, and
// 10.1.2.0/24 denied closes a part of it again. The API server checks
// templates' cidr rules against it at creation (CheckPolicy); the egress
// proxy checks every connection's destination against it (Deny), which
// is what covers host rules, whose addresses are known only when
// resolved. A nil *Ceiling allows everything (tests); the commands
// always make one. Safe for concurrent use: it is not modified after
// NewCeiling.
type Ceiling struct {
	entries []ceilingEntry
}

type ceilingEntry struct {
	prefix netip.Prefix
	allow  bool
	// rank breaks ties between equal prefixes: the operator's deny (2)
	// over the operator's allow (1) over Restricted (0).
	rank   int
	source string // for messages: which list said so
}

// NewCeiling returns the ceiling allowing allow and denying deny and
// Restricted.
func NewCeiling(allow, deny []netip.Prefix) *Ceiling {
	c := &Ceiling{}
	for _, p := range Restricted {
		c.entries = append(c.entries, ceilingEntry{p.Masked(), false, 0, "a private or local range"})
	}
	for _, p := range deny {
		c.entries = append(c.entries, ceilingEntry{p.Masked(), false, 2, "--egress-deny"})
	}
	for _, p := range allow {
		c.entries = append(c.entries, ceilingEntry{p.Masked(), true, 1, "--egress-allow"})
	}
	return c
}

// WithComponents returns c with the addresses of the installation's own
// components (the record store's, the object store's) denied as
// Restricted is: an --egress-allow prefix as specific opens them again.
// A nil c stays nil.
func (c *Ceiling) WithComponents(ps []netip.Prefix) *Ceiling {
	if c == nil {
		return nil
	}
	out := &Ceiling{entries: slices.Clone(c.entries)}
	for _, p := range ps {
		out.entries = append(out.entries, ceilingEntry{p.Masked(), false, 0, "an address of this installation's own components"})
	}
	return out
}

// ParseCeiling is NewCeiling over prefixes or bare addresses written as
// text (the flags' values), IPv4 or IPv6; a value may hold several,
// comma-separated (as a --config-file gives a list).
func ParseCeiling(allow, deny []string) (*Ceiling, error) {
	a, err := parsePrefixes("--egress-allow", allow)
	if err != nil {
		return nil, err
	}
	d, err := parsePrefixes("--egress-deny", deny)
	if err != nil {
		return nil, err
	}
	return NewCeiling(a, d), nil
}

func parsePrefixes(flag string, ss []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range strings.Split(strings.Join(ss, ","), ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("%s %q: not an address or prefix such as 10.1.0.0/16", flag, s)
		}
		out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return out, nil
}

// decide returns the entry deciding for every address of p: the most
// specific entry containing all of p (rank breaking a tie). ok is false
// when no entry contains p.
func (c *Ceiling) decide(p netip.Prefix) (e ceilingEntry, ok bool) {
	for _, x := range c.entries {
		if x.prefix.Addr().Is4() != p.Addr().Is4() || x.prefix.Bits() > p.Bits() || !x.prefix.Contains(p.Addr()) {
			continue
		}
		if !ok || x.prefix.Bits() > e.prefix.Bits() || x.prefix.Bits() == e.prefix.Bits() && x.rank > e.rank {
			e, ok = x, true
		}
	}
	return e, ok
}

// Permits reports whether the ceiling lets a sandbox reach ip, and if
// not, why.
func (c *Ceiling) Permits(ip netip.Addr) (bool, string) {
	if c == nil {
		return true, ""
	}
	ip = ip.Unmap()
	e, ok := c.decide(netip.PrefixFrom(ip, ip.BitLen()))
	switch {
	case !ok:
		return false, "outside the operator's egress ceiling (no --egress-allow prefix holds it)"
	case !e.allow:
		return false, fmt.Sprintf("in %s, %s, which the operator's egress ceiling denies", e.prefix, e.source)
	}
	return true, ""
}

// CheckPrefix returns nil when every address of p is within the ceiling,
// else an error wrapping ErrBeyondCeiling naming the prefix that denies.
func (c *Ceiling) CheckPrefix(p netip.Prefix) error {
	if c == nil {
		return nil
	}
	p = p.Masked()
	e, ok := c.decide(p)
	switch {
	case !ok:
		return fmt.Errorf("%w: %s is not within any --egress-allow prefix", ErrBeyondCeiling, p)
	case !e.allow:
		return fmt.Errorf("%w: %s is in %s (%s), which the operator denies", ErrBeyondCeiling, p, e.prefix, e.source)
	}
	// Allowed as a whole; a more specific deny inside it (one that
	// decides for its own prefix) still closes part of it.
	for _, x := range c.entries {
		if x.allow || x.prefix.Addr().Is4() != p.Addr().Is4() || x.prefix.Bits() <= p.Bits() || !p.Contains(x.prefix.Addr()) {
			continue
		}
		if d, _ := c.decide(x.prefix); !d.allow {
			return fmt.Errorf("%w: %s includes %s (%s), which the operator denies", ErrBeyondCeiling, p, d.prefix, d.source)
		}
	}
	return nil
}

// CheckPolicy checks p's cidr rules against the ceiling; errors wrap
// ErrBeyondCeiling and name the rule as network.egress[i].cidr. Host
// rules pass: their addresses are checked when a connection is made.
func (c *Ceiling) CheckPolicy(p Policy) error {
	for i, r := range p.Rules {
		if r.Host != "" {
			continue
		}
		if err := c.CheckPrefix(r.Prefix); err != nil {
			return fmt.Errorf("network.egress[%d].cidr: %w", i, err)
		}
	}
	return nil
}
