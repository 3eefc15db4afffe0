package up

import "testing"

// TestIssuerURLFor: the default issuer is the HTTP listener's address,
// an unspecified host read as loopback.
func TestIssuerURLFor(t *testing.T) {
	for _, tc := range []struct{ addr, want string }{
		{"127.0.0.1:7072", "http://127.0.0.1:7072"},
		{"0.0.0.0:7072", "http://127.0.0.1:7072"},
		{"[::]:7072", "http://127.0.0.1:7072"},
		{":7072", "http://127.0.0.1:7072"},
		{"[::1]:7072", "http://[::1]:7072"},
		{"api.example:80", "http://api.example:80"},
	} {
		if got := issuerURLFor(tc.addr); got != tc.want {
			t.Errorf("issuerURLFor(%q) = %q, want %q", tc.addr, got, tc.want)
		}
	}
}
