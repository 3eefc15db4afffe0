package egress_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/netip"
	"os"
	"testing"

	"substrate.dev/ate/internal/egress"
	"substrate.dev/ate/internal/netns"
)

// BenchmarkApply is what a start of an actor whose template allows egress
// adds (the node skips it when the worker's rules would not change): one
// nftables batch replacing the worker's table, here with four rules.
func BenchmarkApply(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Fatal("needs root (network namespaces, nftables)")
	}
	r := make([]byte, 3)
	_, _ = rand.Read(r)
	slot, err := netns.Ensure(b.Context(), "atee-"+hex.EncodeToString(r))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = netns.Remove(context.Background(), slot) })
	gw := egress.Gateway{IfName: netns.OuterIfName, Addr: netip.MustParseAddr(netns.GatewayAddr), Ports: []uint16{80}}
	a := &egress.Allowed{Rules: []egress.Rule{
		{Prefix: netip.MustParsePrefix("10.0.0.0/8"), Ports: []uint16{443, 80}},
		{Prefix: netip.MustParsePrefix("192.0.2.7/32")},
		{Prefix: netip.MustParsePrefix("198.51.100.0/24"), Ports: []uint16{5432}},
	}}
	for b.Loop() {
		if err := egress.Apply(slot.DialNetNSPath, gw, a); err != nil {
			b.Fatal(err)
		}
	}
}
