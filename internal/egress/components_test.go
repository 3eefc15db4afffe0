package egress

import (
	"log/slog"
	"net/netip"
	"slices"
	"testing"
)

// TestHostPrefixes: addresses and names, with or without ports, become
// /32s and /128s, each once; a name that does not resolve gives none.
func TestHostPrefixes(t *testing.T) {
	for _, c := range []struct {
		name  string
		hosts []string
		want  []netip.Prefix
		// has is a prefix of a name's, the rest depending on the resolver.
		has netip.Prefix
	}{
		{name: "IPv4", hosts: []string{"192.0.2.7"}, want: []netip.Prefix{netip.MustParsePrefix("192.0.2.7/32")}},
		{name: "IPv6 with port", hosts: []string{"[2001:db8::1]:7070"}, want: []netip.Prefix{netip.MustParsePrefix("2001:db8::1/128")}},
		{name: "mapped IPv4", hosts: []string{"::ffff:192.0.2.7"}, want: []netip.Prefix{netip.MustParsePrefix("192.0.2.7/32")}},
		{name: "each once", hosts: []string{"192.0.2.7:7070", "192.0.2.8:7070", "192.0.2.7:7071"},
			want: []netip.Prefix{netip.MustParsePrefix("192.0.2.7/32"), netip.MustParsePrefix("192.0.2.8/32")}},
		{name: "name", hosts: []string{"localhost:7070"}, has: netip.MustParsePrefix("127.0.0.1/32")},
		{name: "unresolvable", hosts: []string{"no-such-host.invalid:7070"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := HostPrefixes(t.Context(), slog.New(slog.DiscardHandler), "a test host", c.hosts...)
			if c.has.IsValid() {
				if !slices.Contains(got, c.has) {
					t.Errorf("HostPrefixes(%v) = %v, want %v among them", c.hosts, got, c.has)
				}
			} else if !slices.Equal(got, c.want) {
				t.Errorf("HostPrefixes(%v) = %v, want %v", c.hosts, got, c.want)
			}
		})
	}
}

// TestComponentPrefixes: the record store's and the object store's hosts
// become prefixes the egress ceiling denies; URLs naming no host give
// none.
func TestComponentPrefixes(t *testing.T) {
	for _, c := range []struct {
		name string
		urls []string
		want []netip.Prefix
	}{
		{"postgres", []string{"postgres://ate:pw@192.0.2.9:5432/ate", "postgresql://ate@192.0.2.11/ate"},
			[]netip.Prefix{netip.MustParsePrefix("192.0.2.9/32"), netip.MustParsePrefix("192.0.2.11/32")}},
		{"s3 endpoint", []string{"s3://bucket/p?endpoint=http://192.0.2.10:8333&region=r"}, []netip.Prefix{netip.MustParsePrefix("192.0.2.10/32")}},
		{"no host", []string{"bolt:///var/ate.db", "/var/snapshots", "s3://bucket/p"}, nil},
		{"each once", []string{"postgres://ate:pw@192.0.2.9:5432/ate", "postgres://ate@192.0.2.9:5433/other"},
			[]netip.Prefix{netip.MustParsePrefix("192.0.2.9/32")}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := ComponentPrefixes(t.Context(), slog.New(slog.DiscardHandler), c.urls...); !slices.Equal(got, c.want) {
				t.Errorf("ComponentPrefixes = %v, want %v", got, c.want)
			}
		})
	}
}
