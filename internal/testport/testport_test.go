package testport

import (
	"net"
	"strconv"
	"testing"
)

// TestFreeBelowEphemeralRange: the ports are distinct, bindable on
// loopback, and below the range ":0" binds draw from.
func TestFreeBelowEphemeralRange(t *testing.T) {
	ports, err := Free(20)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	high := ephemeralLow()
	for _, p := range ports {
		if seen[p] {
			t.Fatalf("port %d twice in %v", p, ports)
		}
		seen[p] = true
		if p < low || p >= high {
			t.Fatalf("port %d outside %d-%d", p, low, high-1)
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Fatalf("port %d from Free: %v", p, err)
		}
		l.Close()
	}
	eph, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer eph.Close()
	if p := eph.Addr().(*net.TCPAddr).Port; p < high {
		t.Fatalf("the kernel's :0 gave %d, below the range start %d this package assumes", p, high)
	}
}
