package node

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"strconv"
	"time"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/egress"
	"substrate.dev/ate/internal/netns"
	"substrate.dev/ate/internal/sandbox"
)

// HostsPath is where a sandbox whose template allows egress host names
// finds them: the node bind-mounts its own hosts file there, read-only.
const HostsPath = "/etc/hosts"

// egressResolveTimeout bounds the resolution of a template's allowed host
// names at a start: a DNS server that does not answer fails the start
// rather than holding the worker.
const egressResolveTimeout = 5 * time.Second

// gateway is every worker's outer link as the egress rules see it; the
// self-service endpoint is the one node port a sandbox may always reach.
func gateway() egress.Gateway {
	_, port, _ := net.SplitHostPort(SelfServiceAddr)
	p, _ := strconv.ParseUint(port, 10, 16)
	return egress.Gateway{IfName: netns.OuterIfName, Addr: netip.MustParseAddr(netns.GatewayAddr), Ports: []uint16{uint16(p)}}
}

// setUpEgress applies the deny-all rules to s's outer namespace (which
// replaces whatever a dead predecessor left there) and starts s's egress
// proxy. Slots without namespaces (fake) have no boundary to enforce.
func (n *Node) setUpEgress(s *slot) error {
	if s.sb.DialNetNSPath == "" {
		return nil
	}
	if err := egress.Reset(s.sb.DialNetNSPath, gateway()); err != nil {
		return err
	}
	s.egressRules = ""
	ln, err := netns.Listen(s.sb.DialNetNSPath, "tcp", net.JoinHostPort(netns.GatewayAddr, strconv.Itoa(egress.ProxyPort)))
	if err != nil {
		return fmt.Errorf("egress proxy: %w", err)
	}
	s.egress = egress.NewProxy(ln, &egress.Deny{Extra: n.cfg.EgressDeny, Ceiling: n.cfg.EgressCeiling}, n.log.With("worker", s.name))
	return nil
}

// applyEgress makes s enforce spec's network policy for the actor about to
// start: host names resolved now, /etc/hosts rewritten, nftables rules
// replaced, the proxy's allow-list swapped. s.opMu must be held.
func (n *Node) applyEgress(ctx context.Context, s *slot, spec *atev1.ActorTemplateSpec) error {
	if s.egress == nil {
		return nil
	}
	p, err := egress.FromProto(spec.GetNetwork())
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, egressResolveTimeout)
	a, err := egress.Resolve(rctx, n.cfg.EgressResolver, p)
	cancel()
	if err != nil {
		return err
	}
	if len(p.Hosts()) > 0 {
		// In place, not renamed: a standby prepared earlier has the
		// file's inode bind-mounted already.
		if err := os.WriteFile(n.hostsFile(s), a.HostsFile(), 0o644); err != nil {
			return fmt.Errorf("egress hosts file: %w", err)
		}
	}
	// Most templates allow nothing and most workers deny everything
	// already: no netlink round trip then (clearEgress says what it
	// costs).
	if key := a.Key(); key != s.egressRules {
		s.egressRules = "\x00" // unknown until Apply succeeds
		if err := egress.Apply(s.sb.DialNetNSPath, gateway(), &a); err != nil {
			return err
		}
		s.egressRules = key
	}
	s.egress.Set(&a)
	return nil
}

// clearEgress takes s's allow-list away when it is freed: the proxy
// refuses every new connection and closes the ones it relays. The nftables
// rules stay until the next start replaces them (before its sandbox runs):
// they only lead to the proxy, and a worker that hosts the same template
// again then needs no netlink round trip, which costs 4-16 ms (the
// kernel's nf_tables commit waits for RCU grace periods;
// BenchmarkApply). s.opMu must be held.
func (n *Node) clearEgress(s *slot) {
	if s.egress != nil {
		s.egress.Set(nil)
	}
}

// egressMounts are the mounts spec's network policy adds to a container
// on s: /etc/hosts when it allows host names. They depend on the template
// alone, so a standby, a golden build and every restore of the template's
// snapshots agree (runsc refuses a restore whose mounts differ from the
// checkpoint's).
func (n *Node) egressMounts(s *slot, spec *atev1.ActorTemplateSpec) ([]sandbox.Mount, error) {
	if s.egress == nil {
		return nil, nil
	}
	p, err := egress.FromProto(spec.GetNetwork())
	if err != nil || len(p.Hosts()) == 0 {
		return nil, err
	}
	// The mount source must exist when a standby is prepared, before
	// the start that resolves the names.
	f := n.hostsFile(s)
	if _, err := os.Stat(f); errors.Is(err, fs.ErrNotExist) {
		if err := os.WriteFile(f, (*egress.Allowed)(nil).HostsFile(), 0o644); err != nil {
			return nil, fmt.Errorf("egress hosts file: %w", err)
		}
	}
	return []sandbox.Mount{{Source: f, Destination: HostsPath, ReadOnly: true}}, nil
}

func (n *Node) hostsFile(s *slot) string { return n.workerDir(s, "hosts") }
