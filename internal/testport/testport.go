// Package testport picks TCP ports for processes a test starts later, or
// restarts at the same address.
//
// A port asked of the kernel (":0") and released comes from its
// ephemeral range, from which every later ":0" bind and outgoing
// connection also draws: before the process the port was picked for
// binds it, another component's listener or a connection's source port
// may hold it (seen in CI: a node's agent listener took the router's
// port). Ports here come from below that range, at random, and are free
// when picked.
package testport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// low is the lowest port used: above most fixed service ports.
const low = 10000

// Free returns n distinct ports, each free on every IPv4 address when
// picked, below the kernel's ephemeral range. All stay bound until every
// one is picked, so none comes twice.
func Free(n int) ([]int, error) {
	high := ephemeralLow()
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for tries := 0; len(ports) < n; tries++ {
		if tries > 1000 {
			return nil, fmt.Errorf("testport: no %d free ports in %d-%d", n, low, high-1)
		}
		port := low + rand.IntN(high-low)
		// The wildcard address: it conflicts with a listener on any one
		// address, so the port suits loopback and host-wide binds alike.
		l, err := net.Listen("tcp4", "0.0.0.0:"+strconv.Itoa(port))
		if err != nil {
			continue
		}
		ls = append(ls, l)
		ports = append(ports, port)
	}
	return ports, nil
}

// Addr returns "127.0.0.1:PORT" with a port from Free, failing tb if
// there is none.
func Addr(tb testing.TB) string {
	tb.Helper()
	p, err := Free(1)
	if err != nil {
		tb.Fatal(err)
	}
	return "127.0.0.1:" + strconv.Itoa(p[0])
}

// ephemeralLow is the first port of the kernel's ephemeral range
// (32768 when it cannot be read, Linux's default).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 32768
	}
	v, err := strconv.Atoi(f[0])
	if err != nil || v <= low+2000 {
		return 32768
	}
	return v
}
