package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"substrate.dev/ate/internal/egress/egresstest"
)

// dialResult is the counter's GET /dial answer (examples/counter/dial.go).
type dialResult struct {
	OK    bool     `json:"ok"`
	Err   string   `json:"err"`
	Reply string   `json:"reply"`
	Addrs []string `json:"addrs"`
}

// dialFrom asks actor to open a TCP connection to addr from inside its
// sandbox.
func (in *installation) dialFrom(actor, addr string) dialResult {
	in.t.Helper()
	code, body := in.get(actor, "/dial?addr="+url.QueryEscape(addr))
	if code != http.StatusOK {
		in.t.Fatalf("GET %s /dial?addr=%s = %d %q", actor, addr, code, body)
	}
	var r dialResult
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		in.t.Fatalf("GET %s /dial: %q: %v", actor, body, err)
	}
	return r
}

// reached reports whether actor's dial to addr was greeted by one of the
// test's listeners (egresstest.Serve): a connection the boundary relays to
// its proxy is accepted even when the proxy then refuses it, so only the
// greeting proves the destination answered.
func (in *installation) reached(actor, addr string) (bool, dialResult) {
	r := in.dialFrom(actor, addr)
	_, port, _ := net.SplitHostPort(addr)
	var p int
	fmt.Sscan(port, &p)
	return r.OK && r.Reply == egresstest.Greeting(p), r
}

// primaryAddr is an IPv4 address of this machine other than loopback and
// the test's own, or the zero Addr if it has none.
func primaryAddr(t *testing.T, not netip.Addr) netip.Addr {
	ifas, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, ifa := range ifas {
		if n, ok := ifa.(*net.IPNet); ok {
			if a, ok := netip.AddrFromSlice(n.IP); ok {
				a = a.Unmap()
				if a.Is4() && !a.IsLoopback() && !a.IsLinkLocalUnicast() && a != not {
					return a
				}
			}
		}
	}
	return netip.Addr{}
}

// TestSandboxBoundary: from inside real sandboxes, the host's loopback
// services, the host's other addresses (the API server's port included),
// cloud metadata and destinations no rule lists are unreachable, for an
// actor whose template allows nothing and for one whose template lists
// them all the same; the self-service endpoint is reachable; a listed
// CIDR/port and a listed host name (resolved through the node's DNS
// server, answered in the sandbox by /etc/hosts) connect, an unlisted
// name does not resolve. The two actors take turns on one worker: the
// rules are set for each start and restore and cleared when it is freed.
func TestSandboxBoundary(t *testing.T) {
	dest := egresstest.NewDestination(t)
	for _, p := range []int{8443, 9000, 9001} {
		dest.Listen(t, p)
	}
	dns := egresstest.DNS(t, map[string]netip.Addr{"allowed.egress.test": dest.Addr, "unlisted.egress.test": dest.Addr})
	hostLoopAddr, hostAddrAddr := dest.HostListeners(t)

	primary := primaryAddr(t, dest.HostAddr)
	if !primary.IsValid() {
		t.Fatal("this machine has no IPv4 address but loopback to try the API server's port on")
	}
	// One worker: the two actors take turns on it, so the second phase
	// shows the rules set for each start and cleared when it is freed.
	// The operator's ceiling opens the local ranges the template lists
	// (and the primary address, private on most machines), to show that
	// what is always denied stays denied even then.
	in := startUp(t, 1, "--demo", "--egress-dns", dns,
		"--egress-allow", "0.0.0.0/0,127.0.0.0/8,169.254.0.0/16,"+primary.String())
	_, apiPort, _ := net.SplitHostPort(in.apiAddr)
	// The API server listens on loopback here; one on the primary
	// address is what a sandbox could otherwise reach. A listener there
	// stands in for it, on the API server's port when that is free.
	apiLn, err := net.Listen("tcp", net.JoinHostPort(primary.String(), apiPort))
	if err != nil {
		apiLn, err = net.Listen("tcp", net.JoinHostPort(primary.String(), "0"))
		if err != nil {
			t.Fatal(err)
		}
	}
	egresstest.Serve(t, apiLn)

	doc := fmt.Sprintf(`name: egress
containers:
- name: counter
  image: oci:%s
  ports: [8080]
  env: {COUNTER_TEST_ENDPOINTS: "1"} # GET /dial
wakeupProbe:
  httpGet: {path: /healthz, port: 8080}
newActors: golden
network:
  egress:
  - {cidr: %s/32, ports: [8443]}
  - {host: allowed.egress.test, ports: [9000]}
  # Listed, and refused all the same.
  - {cidr: 127.0.0.0/8}
  - {cidr: 169.254.0.0/16}
  - {cidr: %s/32}
  - {cidr: %s/32}
`, filepath.Join(repoDir, "build/images/counter"), dest.Addr, dest.HostAddr, primary)
	file := filepath.Join(t.TempDir(), "egress.yaml")
	if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	in.ate("create", "template", "-f", file)
	in.waitTemplateReady("egress")
	in.ate("create", "actor", "egress-1", "--template", "egress")

	never := []string{
		hostLoopAddr, hostAddrAddr, apiLn.Addr().String(),
		"169.254.169.254:80", net.JoinHostPort(primary.String(), apiPort), in.apiAddr,
	}
	type want struct {
		actor, addr string
		ok          bool
	}
	var cases []want
	for _, a := range []string{"default/counter-1", "default/egress-1"} {
		for _, addr := range never {
			cases = append(cases, want{a, addr, false})
		}
	}
	cases = append(cases,
		want{"default/counter-1", net.JoinHostPort(dest.Addr.String(), "8443"), false},
		want{"default/counter-1", "allowed.egress.test:9000", false},
		want{"default/egress-1", net.JoinHostPort(dest.Addr.String(), "8443"), true},
		want{"default/egress-1", net.JoinHostPort(dest.Addr.String(), "9001"), false}, // port not listed
		want{"default/egress-1", "allowed.egress.test:9000", true},
		want{"default/egress-1", "unlisted.egress.test:9000", false},
	)
	check := func(t *testing.T, cases []want) {
		// Refused dials wait out the counter's 3 s dial timeout; in
		// parallel they take one.
		var wg sync.WaitGroup
		var mu sync.Mutex
		var bad []string
		for _, c := range cases {
			wg.Go(func() {
				ok, r := in.reached(c.actor, c.addr)
				if ok != c.ok {
					mu.Lock()
					bad = append(bad, fmt.Sprintf("%s -> %s: reached = %v, want %v (%+v)", c.actor, c.addr, ok, c.ok, r))
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		slices.Sort(bad)
		for _, b := range bad {
			t.Error(b)
		}
	}
	// byActor splits cases so the actors take turns on the one worker:
	// each is suspended before the other is asked.
	byActor := func(actor string) []want {
		var out []want
		for _, c := range cases {
			if c.actor == actor {
				out = append(out, c)
			}
		}
		return out
	}
	in.mustCount("default/counter-1", 1)
	check(t, byActor("default/counter-1"))
	if r := in.dialFrom("default/counter-1", "169.254.17.1:80"); !r.OK {
		t.Errorf("counter-1 cannot reach its self-service endpoint: %+v", r)
	}
	in.ate("suspend", "actor", "counter-1")

	check(t, byActor("default/egress-1"))
	// The self-service endpoint stays reachable (an HTTP server: it says
	// nothing before a request, so the dial is the test).
	if r := in.dialFrom("default/egress-1", "169.254.17.1:80"); !r.OK {
		t.Errorf("egress-1 cannot reach its self-service endpoint: %+v", r)
	}
	// The allowed name resolves inside to what the node's DNS said.
	if r := in.dialFrom("default/egress-1", "allowed.egress.test:9000"); !slices.Contains(r.Addrs, dest.Addr.String()) {
		t.Errorf("allowed.egress.test resolved in the sandbox to %v, want %s", r.Addrs, dest.Addr)
	}
	if r := in.dialFrom("default/egress-1", "unlisted.egress.test:9000"); len(r.Addrs) > 0 || !strings.Contains(r.Err, "lookup") {
		t.Errorf("unlisted.egress.test from the sandbox: %+v, want a failed lookup", r)
	}

	// The worker egress-1 freed denies everything again for counter-1,
	// and egress-1's rules come back with its restore.
	in.ate("suspend", "actor", "egress-1")
	check(t, []want{{"default/counter-1", net.JoinHostPort(dest.Addr.String(), "8443"), false}})
	in.ate("suspend", "actor", "counter-1")
	check(t, []want{
		{"default/egress-1", net.JoinHostPort(dest.Addr.String(), "8443"), true},
		{"default/egress-1", "allowed.egress.test:9000", true},
		{"default/egress-1", "169.254.169.254:80", false},
	})
}
