package router

import (
	"sync/atomic"
	"testing"
)

// TestLoopbackRouterRefusesForeignHost attacks a loopback router as a
// DNS-rebinding page would: its own name resolves to 127.0.0.1, so the
// local browser sends that name as Host, with Ate-Target-Actor naming
// any actor. The router answers 421 and the actor sees nothing; the
// names only loopback (or the actor domain) can carry still work.
func TestLoopbackRouterRefusesForeignHost(t *testing.T) {
	target := map[string]string{HeaderTargetActor: "default/app"}
	for _, tc := range []struct {
		name, host string
		hdr        map[string]string
		status     int
	}{
		{"rebinding name with target header", "attacker.example:8080", target, 421},
		{"rebinding name alone", "attacker.example", nil, 421},
		{"look-alike of the actor domain", "app.default.actors.localhost.attacker.example", nil, 421},
		{"actor domain suffix without its dot", "app.defaultactors.localhost.evil", nil, 421},
		{"non-loopback address", "192.168.1.10:8080", target, 421},
		{"actor host", "app.default.actors.localhost:8080", nil, 200},
		{"actor host, upper case, trailing dot", "APP.DEFAULT.ACTORS.LOCALHOST.", nil, 200},
		{"localhost with target header", "localhost:8080", target, 200},
		{"a name under localhost", "x.localhost", target, 200},
		{"127.0.0.1", "127.0.0.1:8080", target, 200},
		{"another 127/8 address", "127.1.2.3", target, 200},
		{"::1", "[::1]:8080", target, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var hits atomic.Int64
			res := warmResolver(t, echoTunnel(t, "tunnel", &hits), Policy{})
			srv, _ := newRouter(t, Config{Loopback: true}, res)
			got := get(t, srv, tc.host, "/", tc.hdr)
			if got.err != nil || got.status != tc.status {
				t.Fatalf("Host %q: got %d %q (%v), want %d", tc.host, got.status, got.body, got.err, tc.status)
			}
			if tc.status == 421 {
				if n := hits.Load(); n != 0 {
					t.Errorf("a refused request reached the actor (%d hits)", n)
				}
				if n := res.lookups.Load(); n != 0 {
					t.Errorf("a refused request looked the actor up (%d lookups)", n)
				}
			}
		})
	}
}

// TestNonLoopbackRouterServesAnyHost: a router on a routable address
// is reached under whatever names DNS gives it.
func TestNonLoopbackRouterServesAnyHost(t *testing.T) {
	res := warmResolver(t, echoTunnel(t, "tunnel", nil), Policy{})
	srv, _ := newRouter(t, Config{}, res)
	if got := get(t, srv, "router.example.com", "/", map[string]string{HeaderTargetActor: "default/app"}); got.status != 200 {
		t.Fatalf("got %d %q, want 200", got.status, got.body)
	}
}

func TestLoopbackAddr(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true, "localhost:8080": true, "[::1]:8080": true, "127.0.0.2:80": true,
		":8080": false, "0.0.0.0:8080": false, "[::]:8080": false, "10.0.0.1:8080": false, "router.example:80": false,
	} {
		if got := LoopbackAddr(addr); got != want {
			t.Errorf("LoopbackAddr(%q) = %t, want %t", addr, got, want)
		}
	}
}
