package egress

import (
	"errors"
	"net/netip"
	"testing"
)

func TestCeiling(t *testing.T) {
	def, err := ParseCeiling([]string{"0.0.0.0/0"}, []string{"203.0.113.7"})
	if err != nil {
		t.Fatal(err)
	}
	// The operator opens one private network and closes part of it again.
	op, err := ParseCeiling([]string{"0.0.0.0/0", "10.1.0.0/16, 192.168.5.5", "172.16.0.0/12"}, []string{"10.1.2.0/24"})
	if err != nil {
		t.Fatal(err)
	}
	narrow, err := ParseCeiling([]string{"198.51.100.0/24"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		c    *Ceiling
		ip   string
		want bool
	}{
		{"internet", def, "93.184.216.34", true},
		{"rfc1918 10/8", def, "10.96.0.1", false},
		{"rfc1918 172.16/12", def, "172.20.0.5", false},
		{"rfc1918 192.168/16", def, "192.168.1.1", false},
		{"cgnat", def, "100.64.0.1", false},
		{"link-local", def, "169.254.169.254", false},
		{"loopback", def, "127.0.0.1", false},
		{"operator-denied address", def, "203.0.113.7", false},
		{"next to the denied address", def, "203.0.113.8", true},
		{"ula", def, "fd00::1", false},
		{"ipv4-mapped private", def, "::ffff:10.0.0.1", false},
		{"operator-opened network", op, "10.1.9.9", true},
		{"denied again inside it", op, "10.1.2.3", false},
		{"rest of 10/8 still closed", op, "10.2.0.1", false},
		{"operator-opened address", op, "192.168.5.5", true},
		{"its neighbour", op, "192.168.5.6", false},
		{"a whole restricted range opened", op, "172.31.0.1", true},
		{"narrow ceiling", narrow, "198.51.100.9", true},
		{"outside a narrow ceiling", narrow, "93.184.216.34", false},
		{"nil ceiling", nil, "10.0.0.1", true},
	} {
		if got, why := tc.c.Permits(netip.MustParseAddr(tc.ip)); got != tc.want {
			t.Errorf("%s: Permits(%s) = %v (%s), want %v", tc.name, tc.ip, got, why, tc.want)
		}
	}
	for _, tc := range []struct {
		c      *Ceiling
		prefix string
		ok     bool
	}{
		{def, "0.0.0.0/0", false}, // holds the private ranges
		{def, "10.0.0.0/8", false},
		{def, "8.0.0.0/7", true},
		{def, "203.0.113.0/24", false}, // holds a denied address
		{op, "10.1.0.0/16", false},     // holds the denied /24
		{op, "10.1.3.0/24", true},
		{op, "10.0.0.0/8", false},
		{op, "172.16.0.0/12", true},
		{narrow, "198.51.100.128/25", true},
		{narrow, "198.51.0.0/16", false},
	} {
		err := tc.c.CheckPrefix(netip.MustParsePrefix(tc.prefix))
		if (err == nil) != tc.ok || err != nil && !errors.Is(err, ErrBeyondCeiling) {
			t.Errorf("CheckPrefix(%s) = %v, want ok %v", tc.prefix, err, tc.ok)
		}
	}
	// The installation's components (a public S3 endpoint, say) are
	// denied; an operator's allow as specific opens one again.
	comp := def.WithComponents([]netip.Prefix{netip.MustParsePrefix("93.184.216.34/32"), netip.MustParsePrefix("198.51.100.1/32")})
	if ok, _ := comp.Permits(netip.MustParseAddr("93.184.216.34")); ok {
		t.Error("a component's address is permitted")
	}
	if err := comp.CheckPrefix(netip.MustParsePrefix("93.184.216.0/24")); !errors.Is(err, ErrBeyondCeiling) {
		t.Errorf("CheckPrefix over a component's address = %v", err)
	}
	opened, err := ParseCeiling([]string{"0.0.0.0/0", "198.51.100.1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ok, why := opened.WithComponents([]netip.Prefix{netip.MustParsePrefix("198.51.100.1/32")}).Permits(netip.MustParseAddr("198.51.100.1")); !ok {
		t.Errorf("an operator-allowed component address is denied: %s", why)
	}
	if ok, _ := def.Permits(netip.MustParseAddr("93.184.216.34")); !ok {
		t.Error("WithComponents changed the ceiling it was called on")
	}
	if _, err := ParseCeiling([]string{"10.0.0.0/33"}, nil); err == nil {
		t.Error("ParseCeiling took a bad prefix")
	}

	// The proxy's Deny applies the ceiling to every connection's
	// destination: what a host rule resolved to included.
	d := &Deny{Ceiling: def, hostAddrs: func() ([]netip.Addr, error) { return nil, nil }}
	if deny, _ := d.Denies(netip.MustParseAddr("10.0.0.5")); !deny {
		t.Error("Deny with a ceiling lets 10.0.0.5 through")
	}
	if deny, why := d.Denies(netip.MustParseAddr("93.184.216.34")); deny {
		t.Errorf("Deny with a ceiling refuses a public address: %s", why)
	}
}
