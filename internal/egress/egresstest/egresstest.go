// Package egresstest stands up what tests of the sandbox boundary dial:
// a destination outside the node (a network namespace of its own joined
// to the host's by a veth pair, as a service on another machine would
// be) and a DNS server for allowed host names. Everything it adds to the
// host's namespace goes with the test (or with the test process, since
// the destination namespace lives only as long as its file descriptor).
package egresstest

import (
	"bufio"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"testing"

	"github.com/vishvananda/netlink"
	vns "github.com/vishvananda/netns"
	"golang.org/x/net/dns/dnsmessage"

	"substrate.dev/ate/internal/netns"
)

// Destination is a network namespace outside the node with one address,
// Addr, reached from the host's namespace over a veth whose host end has
// HostAddr (an address of the node, so one sandboxes may never reach).
type Destination struct {
	Addr, HostAddr netip.Addr
	// NSPath names the namespace for netns.Listen and netns.DialContext.
	NSPath string
}

// NewDestination creates a Destination in 198.18.N.0/30 (RFC 2544's
// benchmarking range, never routed) for a random N not in use on the
// host; the test's cleanup removes it.
func NewDestination(t testing.TB) *Destination {
	t.Helper()
	ns, err := newNS()
	if err != nil {
		t.Fatalf("egresstest: new namespace: %v", err)
	}
	t.Cleanup(func() { ns.Close() })
	var rnd [2]byte
	_, _ = rand.Read(rnd[:])
	n := int(rnd[0])
	host := netip.AddrFrom4([4]byte{198, 18, byte(n), 1})
	d := &Destination{Addr: netip.AddrFrom4([4]byte{198, 18, byte(n), 2}), HostAddr: host,
		NSPath: fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), int(ns))}
	if err := checkFree(host); err != nil {
		t.Fatalf("egresstest: %v", err)
	}
	name := fmt.Sprintf("egt%02x%02x", rnd[0], rnd[1])
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: "eth0", PeerNamespace: netlink.NsFd(int(ns))}
	if err := netlink.LinkAdd(veth); err != nil {
		t.Fatalf("egresstest: add veth %s: %v", name, err)
	}
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(name); err == nil {
			_ = netlink.LinkDel(l)
		}
	})
	hl, err := netlink.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.AddrAdd(hl, addr(host)); err != nil {
		t.Fatalf("egresstest: address %s: %v", host, err)
	}
	if err := netlink.LinkSetUp(hl); err != nil {
		t.Fatal(err)
	}
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for _, ifn := range []string{"lo", "eth0"} {
		l, err := h.LinkByName(ifn)
		if err != nil {
			t.Fatal(err)
		}
		if ifn == "eth0" {
			if err := h.AddrAdd(l, addr(d.Addr)); err != nil {
				t.Fatal(err)
			}
		}
		if err := h.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

func addr(a netip.Addr) *netlink.Addr {
	return &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(30, 32)}}
}

// checkFree fails if the host already has an address in host's /30.
func checkFree(host netip.Addr) error {
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		return err
	}
	pfx := netip.PrefixFrom(host, 30).Masked()
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP); ok && pfx.Contains(ip.Unmap()) {
			return fmt.Errorf("%s is in use on this machine (%s)", pfx, a.IPNet)
		}
	}
	return nil
}

// newNS returns a new network namespace, leaving the calling thread's
// namespace as it was (the thread is not unlocked if it cannot be set
// back, so Go retires it).
func newNS() (vns.NsHandle, error) {
	type res struct {
		h   vns.NsHandle
		err error
	}
	c := make(chan res, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := vns.Get()
		if err != nil {
			c <- res{err: err}
			runtime.UnlockOSThread()
			return
		}
		defer orig.Close()
		h, err := vns.New()
		if serr := vns.Set(orig); serr != nil {
			c <- res{h, errors.Join(err, serr)}
			return // thread stays locked: it dies with the goroutine
		}
		runtime.UnlockOSThread()
		c <- res{h, err}
	}()
	r := <-c
	return r.h, r.err
}

// Listen serves TCP on d.Addr:port inside d's namespace until the test
// ends; every connection is greeted with Greeting(port) and closed.
func (d *Destination) Listen(t testing.TB, port int) {
	t.Helper()
	ln, err := netns.Listen(d.NSPath, "tcp", net.JoinHostPort(d.Addr.String(), fmt.Sprint(port)))
	if err != nil {
		t.Fatal(err)
	}
	Serve(t, ln)
}

// HostListeners starts greeting listeners (Serve) in the host's own
// namespace on its loopback and on d.HostAddr, the host services a
// sandbox must never reach, and returns their addresses.
func (d *Destination) HostListeners(t testing.TB) (loopback, hostAddr string) {
	t.Helper()
	var addrs []string
	for _, a := range []string{"127.0.0.1:0", net.JoinHostPort(d.HostAddr.String(), "0")} {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			t.Fatal(err)
		}
		Serve(t, ln)
		addrs = append(addrs, ln.Addr().String())
	}
	return addrs[0], addrs[1]
}

// Serve greets every connection on ln with its port (Greeting) and
// closes it, until the test ends.
func Serve(t testing.TB, ln net.Listener) {
	t.Cleanup(func() { ln.Close() })
	port := ln.Addr().(*net.TCPAddr).Port
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			w := bufio.NewWriter(c)
			_, _ = w.WriteString(Greeting(port))
			_ = w.Flush()
			c.Close()
		}
	}()
}

// Greeting is what Serve's listeners send first.
func Greeting(port int) string { return fmt.Sprintf("hello from port %d\n", port) }

// DNS serves A records for names (lower case, without the final dot)
// on a UDP socket on 127.0.0.1 until the test ends, and returns its
// address; other names get NXDOMAIN.
func DNS(t testing.TB, names map[string]netip.Addr) string {
	t.Helper()
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if ans, err := answer(buf[:n], names); err == nil {
				_, _ = pc.WriteTo(ans, from)
			}
		}
	}()
	return pc.LocalAddr().String()
}

func answer(q []byte, names map[string]netip.Addr) ([]byte, error) {
	var p dnsmessage.Parser
	h, err := p.Start(q)
	if err != nil {
		return nil, err
	}
	qs, err := p.AllQuestions()
	if err != nil || len(qs) != 1 {
		return nil, fmt.Errorf("want one question: %v", err)
	}
	qn := qs[0]
	name := qn.Name.String()
	name = name[:len(name)-1]
	a, ok := names[name]
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RCode: dnsmessage.RCodeSuccess}
	if !ok {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, rh)
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(qn); err != nil {
		return nil, err
	}
	if ok && qn.Type == dnsmessage.TypeA {
		if err := b.StartAnswers(); err != nil {
			return nil, err
		}
		if err := b.AResource(dnsmessage.ResourceHeader{Name: qn.Name, Class: dnsmessage.ClassINET, TTL: 5},
			dnsmessage.AResource{A: a.As4()}); err != nil {
			return nil, err
		}
	}
	return b.Finish()
}
