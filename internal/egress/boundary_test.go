package egress_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"

	"substrate.dev/ate/internal/egress"
	"substrate.dev/ate/internal/egress/egresstest"
	"substrate.dev/ate/internal/netns"
	"substrate.dev/ate/internal/sandbox"
)

// mapResolver resolves from a map.
type mapResolver map[string]netip.Addr

func (m mapResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := m[host]; ok {
		return []netip.Addr{a}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// reaches dials addr from the worker's inner namespace, where the kernel's
// network stack stands in for the sandbox's (same address, same route),
// and reports whether the listener there greeted it: a dial the boundary
// redirects to the proxy connects even when the proxy then refuses, so
// only the greeting proves the destination was reached.
func reaches(t *testing.T, slot sandbox.Slot, addr string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
	defer cancel()
	c, err := netns.DialContext(ctx, slot.NetNSPath, "tcp", addr)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	b, _ := io.ReadAll(c)
	_, port, _ := net.SplitHostPort(addr)
	var p int
	fmt.Sscan(port, &p)
	return string(b) == egresstest.Greeting(p)
}

// TestBoundary applies the rules and runs the proxy on a real worker's
// namespaces and dials, from the sandbox's side, everything the boundary
// must refuse and what a template allows.
func TestBoundary(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("egress tests need root (they create network namespaces and nftables rules); run as root")
	}
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	slot, err := netns.Ensure(t.Context(), "atee-"+hex.EncodeToString(b))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = netns.Remove(context.Background(), slot) })

	// Another worker, its sandbox listening on the same interior
	// address: no link joins the two, so the first cannot reach it.
	_, _ = rand.Read(b)
	other, err := netns.Ensure(t.Context(), "atee-"+hex.EncodeToString(b))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = netns.Remove(context.Background(), other) })
	otherLn, err := netns.Listen(other.NetNSPath, "tcp", sandbox.InteriorAddr+":7777")
	if err != nil {
		t.Fatal(err)
	}
	egresstest.Serve(t, otherLn)

	dest := egresstest.NewDestination(t)
	dest.Listen(t, 8443)
	dest.Listen(t, 9000)
	dest.Listen(t, 9001)
	hostLoopAddr, hostAddrAddr := dest.HostListeners(t)
	self, err := netns.Listen(slot.DialNetNSPath, "tcp", netns.GatewayAddr+":80")
	if err != nil {
		t.Fatal(err)
	}
	egresstest.Serve(t, self)
	// Another listener in the outer namespace, as a node endpoint the
	// sandbox must not reach would be.
	gwOther, err := netns.Listen(slot.DialNetNSPath, "tcp", netns.GatewayAddr+":8081")
	if err != nil {
		t.Fatal(err)
	}
	egresstest.Serve(t, gwOther)

	gw := egress.Gateway{IfName: netns.OuterIfName, Addr: netip.MustParseAddr(netns.GatewayAddr), Ports: []uint16{80}}
	if err := egress.Apply(slot.DialNetNSPath, gw, nil); err != nil {
		t.Fatal(err)
	}
	ln, err := netns.Listen(slot.DialNetNSPath, "tcp", fmt.Sprintf("%s:%d", netns.GatewayAddr, egress.ProxyPort))
	if err != nil {
		t.Fatal(err)
	}
	proxy := egress.NewProxy(ln, &egress.Deny{Extra: []netip.Prefix{netip.PrefixFrom(dest.Addr, 32)}}, nil)
	defer proxy.Close()

	d := func(port int) string { return fmt.Sprintf("%s:%d", dest.Addr, port) }
	check := func(t *testing.T, want map[string]bool) {
		t.Helper()
		for addr, ok := range want {
			if got := reaches(t, slot, addr); got != ok {
				t.Errorf("from the sandbox, %s reached = %v, want %v", addr, got, ok)
			}
		}
	}
	// The same for every policy: loopback is the sandbox's own, the
	// node's addresses, link-local and other gateway ports never.
	never := map[string]bool{
		hostLoopAddr: false, hostAddrAddr: false, "169.254.169.254:80": false,
		netns.GatewayAddr + ":8081": false, netns.GatewayAddr + ":80": true,
		sandbox.InteriorAddr + ":7777": false,
	}

	t.Run("empty", func(t *testing.T) {
		check(t, never)
		check(t, map[string]bool{d(8443): false, d(9000): false})
	})

	p, err := egress.FromProto(nil)
	if err != nil || !p.Empty() {
		t.Fatalf("FromProto(nil) = %v, %v; want the empty policy", p, err)
	}
	p = egress.Policy{Rules: []egress.Rule{
		{Prefix: netip.PrefixFrom(dest.Addr, 32), Ports: []uint16{8443}},
		{Host: "allowed.test", Ports: []uint16{9000}},
		// Listed, and refused all the same.
		{Prefix: netip.MustParsePrefix("127.0.0.0/8")},
		{Prefix: netip.MustParsePrefix("169.254.0.0/16")},
		{Prefix: netip.PrefixFrom(dest.HostAddr, 32)},
	}}
	a, err := egress.Resolve(t.Context(), mapResolver{"allowed.test": dest.Addr}, p)
	if err != nil {
		t.Fatal(err)
	}
	// The proxy's Deny names dest as the API server in the last subtest
	// only; here it must allow it.
	proxy.Close()
	ln, err = netns.Listen(slot.DialNetNSPath, "tcp", fmt.Sprintf("%s:%d", netns.GatewayAddr, egress.ProxyPort))
	if err != nil {
		t.Fatal(err)
	}
	proxy = egress.NewProxy(ln, &egress.Deny{}, nil)
	if err := egress.Apply(slot.DialNetNSPath, gw, &a); err != nil {
		t.Fatal(err)
	}
	proxy.Set(&a)

	t.Run("allowed", func(t *testing.T) {
		check(t, never)
		// 9001: the destination listens, but no rule lists the port.
		check(t, map[string]bool{d(8443): true, d(9000): true, d(9001): false})
		hosts := string(a.HostsFile())
		if want := dest.Addr.String() + "\tallowed.test\n"; !strings.Contains(hosts, want) {
			t.Errorf("hosts file %q lacks %q", hosts, want)
		}
	})

	t.Run("api server denied", func(t *testing.T) {
		proxy.Close()
		ln, err := netns.Listen(slot.DialNetNSPath, "tcp", fmt.Sprintf("%s:%d", netns.GatewayAddr, egress.ProxyPort))
		if err != nil {
			t.Fatal(err)
		}
		proxy = egress.NewProxy(ln, &egress.Deny{Extra: []netip.Prefix{netip.PrefixFrom(dest.Addr, 32)}}, nil)
		proxy.Set(&a)
		check(t, map[string]bool{d(8443): false})
	})

	// A host rule's name resolving into a range the operator's ceiling
	// denies (DNS the tenant controls, pointed at a cluster address):
	// the proxy refuses the resolved address, rules or not.
	t.Run("beyond the operator's ceiling", func(t *testing.T) {
		proxy.Close()
		ln, err := netns.Listen(slot.DialNetNSPath, "tcp", fmt.Sprintf("%s:%d", netns.GatewayAddr, egress.ProxyPort))
		if err != nil {
			t.Fatal(err)
		}
		ceiling := egress.NewCeiling(egress.DefaultCeilingAllow, []netip.Prefix{netip.PrefixFrom(dest.Addr, 32)})
		proxy = egress.NewProxy(ln, &egress.Deny{Ceiling: ceiling}, nil)
		proxy.Set(&a)
		check(t, map[string]bool{d(8443): false, d(9000): false})
	})

	t.Run("cleared", func(t *testing.T) {
		proxy.Set(nil)
		if err := egress.Apply(slot.DialNetNSPath, gw, nil); err != nil {
			t.Fatal(err)
		}
		check(t, never)
		check(t, map[string]bool{d(8443): false, d(9000): false})
	})

	// Nothing of this in the host's own namespace.
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	tables, err := c.ListTables()
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range tables {
		if tb.Name == egress.TableName {
			t.Errorf("table %s exists in the host's namespace", tb.Name)
		}
	}
}
