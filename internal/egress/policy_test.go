package egress

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	atev1 "substrate.dev/ate/api/ate/v1"
)

func TestFromProto(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rules []*atev1.EgressRule
		want  []Rule
		err   string // substring of the error; "" means none
	}{
		{name: "none"},
		{name: "cidr and ports", rules: []*atev1.EgressRule{{Cidr: "10.0.0.0/8", Ports: []int32{443, 443, 80}}},
			want: []Rule{{Prefix: netip.MustParsePrefix("10.0.0.0/8"), Ports: []uint16{443, 80}}}},
		{name: "address", rules: []*atev1.EgressRule{{Cidr: "192.0.2.7"}},
			want: []Rule{{Prefix: netip.MustParsePrefix("192.0.2.7/32")}}},
		{name: "host lower-cased", rules: []*atev1.EgressRule{{Host: "API.Example.com.", Ports: []int32{443}}},
			want: []Rule{{Host: "api.example.com", Ports: []uint16{443}}}},
		{name: "both", rules: []*atev1.EgressRule{{Cidr: "10.0.0.0/8", Host: "a.b"}}, err: "network.egress[0]: set cidr or host, not both"},
		{name: "neither", rules: []*atev1.EgressRule{{Ports: []int32{1}}}, err: "network.egress[0]: needs cidr or host"},
		{name: "host bits", rules: []*atev1.EgressRule{{Cidr: "10.0.0.1/8"}}, err: "write 10.0.0.0/8"},
		{name: "ipv6", rules: []*atev1.EgressRule{{Cidr: "2001:db8::/32"}}, err: "only IPv4"},
		{name: "garbage cidr", rules: []*atev1.EgressRule{{Cidr: "ten"}}, err: "network.egress[0].cidr"},
		{name: "host is an address", rules: []*atev1.EgressRule{{Host: "10.0.0.1"}}, err: "use cidr"},
		{name: "bad host", rules: []*atev1.EgressRule{{Host: "a..b"}}, err: "network.egress[0].host"},
		{name: "bad label", rules: []*atev1.EgressRule{{Host: "-a.b"}}, err: "not a DNS label"},
		{name: "port 0", rules: []*atev1.EgressRule{{Cidr: "10.0.0.0/8", Ports: []int32{0}}}, err: "0 is not a TCP port"},
		{name: "port too big", rules: []*atev1.EgressRule{{Cidr: "10.0.0.0/8", Ports: []int32{65536}}}, err: "65536 is not a TCP port"},
		{name: "too many rules", rules: slices.Repeat([]*atev1.EgressRule{{Cidr: "10.0.0.0/8"}}, MaxRules+1), err: "at most 64 rules"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := FromProto(&atev1.NetworkPolicy{Egress: tc.rules})
			if tc.err != "" {
				if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("FromProto = %v, want an ErrInvalid containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.EqualFunc(p.Rules, tc.want, func(a, b Rule) bool {
				return a.Prefix == b.Prefix && a.Host == b.Host && slices.Equal(a.Ports, b.Ports)
			}) {
				t.Fatalf("rules = %+v, want %+v", p.Rules, tc.want)
			}
		})
	}
}

func TestPermitsAndDeny(t *testing.T) {
	a := &Allowed{Rules: []Rule{
		{Prefix: netip.MustParsePrefix("10.0.0.0/8"), Ports: []uint16{443}},
		{Prefix: netip.MustParsePrefix("192.0.2.7/32")},
	}}
	for _, tc := range []struct {
		dst  string
		want bool
	}{
		{"10.1.2.3:443", true}, {"10.1.2.3:80", false}, {"192.0.2.7:1", true}, {"192.0.2.8:1", false},
	} {
		if got := a.Permits(netip.MustParseAddrPort(tc.dst)); got != tc.want {
			t.Errorf("Permits(%s) = %v, want %v", tc.dst, got, tc.want)
		}
	}
	if (*Allowed)(nil).Permits(netip.MustParseAddrPort("10.1.2.3:443")) {
		t.Error("a nil Allowed permits")
	}
	d := &Deny{Extra: []netip.Prefix{netip.MustParsePrefix("10.9.9.9/32")},
		hostAddrs: func() ([]netip.Addr, error) { return []netip.Addr{netip.MustParseAddr("10.2.2.2")}, nil }}
	for _, tc := range []struct {
		ip   string
		want bool
	}{
		{"127.0.0.1", true}, {"169.254.169.254", true}, {"169.254.17.1", true}, {"0.0.0.0", true},
		{"224.0.0.1", true}, {"255.255.255.255", true}, {"10.9.9.9", true}, {"10.2.2.2", true},
		{"::1", true}, {"10.1.2.3", false}, {"192.0.2.7", false},
	} {
		if got, why := d.Denies(netip.MustParseAddr(tc.ip)); got != tc.want {
			t.Errorf("Denies(%s) = %v (%s), want %v", tc.ip, got, why, tc.want)
		}
	}
}
