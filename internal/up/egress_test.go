package up

import (
	"log/slog"
	"net/netip"
	"slices"
	"testing"
)

// TestAPIServerPrefixes: the API server's addresses, in each --api form,
// becomes the prefixes the node denies to sandboxes; a name that does not
// resolve gives none.
func TestAPIServerPrefixes(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	if got := apiServerPrefixes(t.Context(), "192.0.2.7:7070", log); !slices.Equal(got, []netip.Prefix{netip.MustParsePrefix("192.0.2.7/32")}) {
		t.Errorf("literal: %v", got)
	}
	if got := apiServerPrefixes(t.Context(), "[2001:db8::1]:7070", log); !slices.Equal(got, []netip.Prefix{netip.MustParsePrefix("2001:db8::1/128")}) {
		t.Errorf("IPv6 literal: %v", got)
	}
	if got := apiServerPrefixes(t.Context(), "192.0.2.7:7070,192.0.2.8:7070,192.0.2.7:7071", log); !slices.Equal(got, []netip.Prefix{
		netip.MustParsePrefix("192.0.2.7/32"), netip.MustParsePrefix("192.0.2.8/32")}) {
		t.Errorf("list: %v", got)
	}
	if got := apiServerPrefixes(t.Context(), "dns:///localhost:7070", log); !slices.Contains(got, netip.MustParsePrefix("127.0.0.1/32")) {
		t.Errorf("dns:///localhost: %v", got)
	}
	if got := apiServerPrefixes(t.Context(), "localhost:7070", log); !slices.Contains(got, netip.MustParsePrefix("127.0.0.1/32")) {
		t.Errorf("localhost: %v", got)
	}
	if got := apiServerPrefixes(t.Context(), "no-such-host.invalid:7070", log); len(got) != 0 {
		t.Errorf("unresolvable: %v", got)
	}
}
