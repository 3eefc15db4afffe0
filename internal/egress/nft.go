package egress

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	vns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// TableName is the nftables table (family inet) the node owns in each
// worker's outer namespace. Apply replaces it whole.
const TableName = "ate_egress"

// ProxyPort is the TCP port the egress proxy listens on at the gateway
// address; allowed connections are redirected to it.
const ProxyPort = 15001

// Gateway describes the outer end of a worker's link, the only place a
// sandbox's packets arrive.
type Gateway struct {
	// IfName is the outer veth end (netns.OuterIfName).
	IfName string
	// Addr is its address (netns.GatewayAddr).
	Addr netip.Addr
	// Ports are TCP ports of the node's own endpoints on Addr the sandbox
	// may always reach (the self-service endpoint).
	Ports []uint16
}

// alwaysDenied are never redirected to the proxy, whatever a rule says:
// "this network", loopback, link-local (cloud metadata at
// 169.254.169.254, every worker's interior 169.254.17.0/30 and gateway),
// multicast, reserved and broadcast. The proxy checks them again, with
// the node's own addresses and Deny's extras.
var alwaysDenied = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("240.0.0.0/4"),
}

// Reset replaces the egress table in the network namespace at nsPath (a
// worker's outer namespace) whole with the deny-all rules (Apply with nil
// a), deleting whatever else a predecessor left in it (another version's
// chains). Either costs 4-16 ms here, mostly the kernel's commit waiting
// for RCU grace periods (BenchmarkApply), so callers skip what would not
// change anything.
func Reset(nsPath string, gw Gateway) error { return apply(nsPath, gw, nil, true) }

// Apply replaces the rules of the egress table in the network namespace
// at nsPath (a worker's outer namespace) with those for a, in one netlink
// batch, so the namespace is never without rules once it had them; the
// table and its chains are created if missing and kept otherwise. A nil or
// empty a leaves the sandbox only gw's ports:
//
//	input   (policy drop): lo, established/related, tcp to gw.Addr:gw.Ports,
//	        and tcp to gw.Addr:ProxyPort when a allows anything
//	forward (policy drop): nothing; the namespace routes nowhere anyway
//	prerouting (nat): from gw.IfName, IPv4 tcp to an always-denied prefix
//	        is left alone (and so dropped); to an allowed prefix and port
//	        it is redirected to ProxyPort
//
// It needs CAP_NET_ADMIN and nf_tables; errors are wrapped system errors.
func Apply(nsPath string, gw Gateway, a *Allowed) error { return apply(nsPath, gw, a, false) }

func apply(nsPath string, gw Gateway, a *Allowed, replace bool) error {
	ns, err := vns.GetFromPath(nsPath)
	if err != nil {
		return fmt.Errorf("egress: open %s: %w", nsPath, err)
	}
	defer ns.Close()
	c, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		return fmt.Errorf("egress: nftables in %s: %w", nsPath, err)
	}
	t := &nftables.Table{Family: nftables.TableFamilyINet, Name: TableName}
	// Adding an existing table or chain is a no-op, so both paths work
	// on a namespace without the table. The batch is atomic: the old
	// rules go as the new ones arrive.
	c.AddTable(t)
	if replace {
		c.DelTable(t)
		c.AddTable(t)
	}
	drop := nftables.ChainPolicyDrop
	input := c.AddChain(&nftables.Chain{Name: "input", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &drop})
	forward := c.AddChain(&nftables.Chain{Name: "forward", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &drop})
	pre := c.AddChain(&nftables.Chain{Name: "prerouting", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest})
	if !replace {
		for _, ch := range []*nftables.Chain{input, forward, pre} {
			c.FlushChain(ch)
		}
	}

	accept := &expr.Verdict{Kind: expr.VerdictAccept}
	c.AddRule(&nftables.Rule{Table: t, Chain: input, Exprs: slices.Concat(iifname("lo"), []expr.Any{accept})})
	c.AddRule(&nftables.Rule{Table: t, Chain: input, Exprs: []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED),
			Xor:  binaryutil.NativeEndian.PutUint32(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(0)},
		accept,
	}})
	ports := slices.Clone(gw.Ports)
	if a != nil && len(a.Rules) > 0 {
		ports = append(ports, ProxyPort)
	}
	gwPrefix := netip.PrefixFrom(gw.Addr, 32)
	for _, p := range ports {
		c.AddRule(&nftables.Rule{Table: t, Chain: input, Exprs: slices.Concat(
			iifname(gw.IfName), ip4Daddr(gwPrefix), tcpDport(p), []expr.Any{accept})})
	}

	ret := &expr.Verdict{Kind: expr.VerdictReturn}
	for _, d := range alwaysDenied {
		c.AddRule(&nftables.Rule{Table: t, Chain: pre, Exprs: slices.Concat(
			iifname(gw.IfName), ip4Daddr(d), []expr.Any{ret})})
	}
	if a != nil {
		redirect := []expr.Any{
			&expr.Immediate{Register: 1, Data: binaryutil.BigEndian.PutUint16(ProxyPort)},
			&expr.Redir{RegisterProtoMin: 1},
		}
		for _, r := range a.Rules {
			if len(r.Ports) == 0 {
				c.AddRule(&nftables.Rule{Table: t, Chain: pre, Exprs: slices.Concat(
					iifname(gw.IfName), ip4Daddr(r.Prefix), tcp(), redirect)})
				continue
			}
			for _, p := range r.Ports {
				c.AddRule(&nftables.Rule{Table: t, Chain: pre, Exprs: slices.Concat(
					iifname(gw.IfName), ip4Daddr(r.Prefix), tcpDport(p), redirect)})
			}
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("egress: nftables in %s: %w", nsPath, err)
	}
	return nil
}

// iifname matches the input interface's name.
func iifname(name string) []expr.Any {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: b},
	}
}

// ip4Daddr matches IPv4 packets whose destination is in p.
func ip4Daddr(p netip.Prefix) []expr.Any {
	m := make([]byte, 4)
	for i := range p.Bits() {
		m[i/8] |= 0x80 >> (i % 8)
	}
	addr := p.Masked().Addr().As4()
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: m, Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: addr[:]},
	}
}

// tcp matches TCP packets.
func tcp() []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
	}
}

// tcpDport matches TCP packets to port.
func tcpDport(port uint16) []expr.Any {
	return append(tcp(),
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
	)
}
