package e2e

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// chaosNet is the network the chaos harness's components live on: each
// component in a network namespace of its own, with its own address on a
// bridge that also reaches this machine (where PostgreSQL, the S3 server
// and the test's clients are, at the bridge's address). A fault drops
// packets as they arrive at a namespace (nftables, its input hook), so
// the sender's kernel sees nothing wrong: its TCP retransmits and backs
// off as across a real network that lost them, and a connection cut for
// a while resumes once the rule is gone. Each direction of each pair is
// its own rule, so a partition can be one-way.
type chaosNet struct {
	t      testing.TB
	prefix string // of the namespaces' and interfaces' names
	bridge string
	subnet string // "10.251.N."
	gw     *chaosHost

	mu    sync.Mutex
	hosts []*chaosHost
	rules map[string][]chaosRule // installed, by fault key
}

// chaosHost is one namespace on the bridge; the machine's own is gw.
type chaosHost struct {
	name, ns, ip string
}

// chaosRule is one installed nftables rule: its namespace and handle.
type chaosRule struct {
	host   *chaosHost
	handle string
}

// chaosTable is the nftables table (family inet) the harness's rules go
// in, in every namespace; on the machine's own its name carries the
// prefix, so two runs' tables do not meet.
const chaosTable = "atechaos"

func newChaosNet(t testing.TB) *chaosNet {
	t.Helper()
	for _, tool := range []string{"ip", "nft", "nsenter"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the chaos harness needs %s (iproute2, nftables, util-linux; hack/install-deps.sh): %v", tool, err)
		}
	}
	reapChaosNets(t)
	// The pid tells a gone run's nets from a live one's (reapChaosNets),
	// the count this process's runs apart: a run whose removal failed
	// must not lend its names, or its rules, to the next.
	pid := os.Getpid()
	prefix := fmt.Sprintf("ac%dc%d", pid, chaosNets.Add(1)%100)
	n := &chaosNet{
		t: t, prefix: prefix, bridge: prefix + "br",
		subnet: freeChaosSubnet(t, pid), rules: map[string][]chaosRule{},
	}
	n.gw = &chaosHost{name: "machine", ip: n.subnet + "1"}
	t.Cleanup(n.close)
	// Frames between two namespaces cross the bridge without reaching
	// the machine's IP stack, unless br_netfilter is loaded and its
	// sysctl on (Kubernetes turns both on): then the machine's iptables
	// FORWARD chain sees them too, and must accept them. This VM's does;
	// a host whose FORWARD policy drops (Docker's) fails the first
	// request between components.
	n.run("ip", "link", "add", n.bridge, "type", "bridge")
	n.run("ip", "addr", "add", n.gw.ip+"/24", "dev", n.bridge)
	n.run("ip", "link", "set", n.bridge, "up")
	n.nft(n.gw, "add", "table", "inet", n.gwTable())
	n.nft(n.gw, "add", "chain", "inet", n.gwTable(), "input", "{ type filter hook input priority 0; policy accept; }")
	return n
}

// chaosNets counts this process's chaos nets.
var chaosNets atomic.Int64

// chaosBridgeRE names the bridges of chaos runs by their test process's
// pid (at most 7 digits) and its count of runs (at most 2): interface
// names hold 15 bytes. hack/leftovers knows the form too.
var chaosBridgeRE = regexp.MustCompile(`^(ac(\d+)c\d+)br$`)

// reapChaosNets removes what runs whose test process is gone (killed
// before its cleanups) left: their bridges, namespaces and tables.
func reapChaosNets(t testing.TB) {
	t.Helper()
	ifaces, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range ifaces {
		m := chaosBridgeRE.FindStringSubmatch(i.Name)
		if m == nil {
			continue
		}
		pid, _ := strconv.Atoi(m[2])
		if syscall.Kill(pid, 0) != syscall.ESRCH {
			continue // its run is still going
		}
		prefix := m[1]
		entries, _ := os.ReadDir("/run/netns")
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), prefix+"-") {
				_ = exec.Command("ip", "netns", "del", e.Name()).Run()
			}
		}
		_ = exec.Command("nft", "delete", "table", "inet", chaosTable+prefix).Run()
		// Another run starting now may have removed it first.
		if out, err := exec.Command("ip", "link", "del", i.Name).CombinedOutput(); err != nil && !strings.Contains(string(out), "Cannot find device") {
			t.Fatalf("remove the bridge %s a gone chaos run left: %v\n%s", i.Name, err, out)
		}
	}
}

// freeChaosSubnet picks a 10.251.N.0/24 that overlaps no network an
// interface of this machine is on (another run's bridge, a wider 10/8),
// starting from one derived from pid: "10.251.N.".
func freeChaosSubnet(t testing.TB, pid int) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for k := range 200 {
		subnet := fmt.Sprintf("10.251.%d.", 20+(pid+k)%200)
		_, ours, _ := net.ParseCIDR(subnet + "0/24")
		if !slices.ContainsFunc(addrs, func(a net.Addr) bool {
			theirs, ok := a.(*net.IPNet)
			return ok && (theirs.Contains(ours.IP) || ours.Contains(theirs.IP))
		}) {
			return subnet
		}
	}
	t.Fatal("no free 10.251.N.0/24 for the chaos harness's bridge: 200 chaos runs at once?")
	return ""
}

func (n *chaosNet) gwTable() string { return chaosTable + n.prefix }

func (n *chaosNet) tableOf(h *chaosHost) string {
	if h == n.gw {
		return n.gwTable()
	}
	return chaosTable
}

// add makes component name's namespace and returns it.
func (n *chaosNet) add(name string) *chaosHost {
	n.t.Helper()
	n.mu.Lock()
	i := len(n.hosts)
	h := &chaosHost{name: name, ns: fmt.Sprintf("%s-%d", n.prefix, i), ip: fmt.Sprintf("%s%d", n.subnet, i+2)}
	n.hosts = append(n.hosts, h)
	n.mu.Unlock()
	veth := fmt.Sprintf("%sv%d", n.prefix, i)
	n.run("ip", "netns", "add", h.ns)
	n.run("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", h.ns)
	n.run("ip", "link", "set", veth, "master", n.bridge, "up")
	n.run("ip", "-n", h.ns, "addr", "add", h.ip+"/24", "dev", "eth0")
	n.run("ip", "-n", h.ns, "link", "set", "eth0", "up")
	n.run("ip", "-n", h.ns, "link", "set", "lo", "up")
	n.nft(h, "add", "table", "inet", chaosTable)
	n.nft(h, "add", "chain", "inet", chaosTable, "input", "{ type filter hook input priority 0; policy accept; }")
	return h
}

// addr is where h's port is reached from the other namespaces.
func (h *chaosHost) addr(port int) string { return fmt.Sprintf("%s:%d", h.ip, port) }

// command runs argv in h's network namespace (only: the mount namespace
// stays the machine's, so the workers' namespaces a node makes under
// /run/netns are seen by everyone). nsenter execs argv, so the process
// is argv's own: its signals are the component's.
func (h *chaosHost) command(argv ...string) []string {
	if h.ns == "" {
		return argv
	}
	return append([]string{"nsenter", "--net=/run/netns/" + h.ns, "--"}, argv...)
}

// drop makes host at drop every packet host from sends it, under key;
// with a port, only TCP packets from (sport) or to (dport) that port.
// heal removes every rule of key.
func (n *chaosNet) drop(key string, at, from *chaosHost, sport bool, port int) {
	n.t.Helper()
	match := []string{"ip", "saddr", from.ip}
	if at == n.gw {
		match = append([]string{"iifname", n.bridge}, match...)
	}
	if port != 0 {
		dir := "dport"
		if sport {
			dir = "sport"
		}
		match = append(match, "tcp", dir, fmt.Sprint(port))
	}
	out := n.nft(at, append(append([]string{"--echo", "--handle", "add", "rule", "inet", n.tableOf(at), "input"}, match...), "drop")...)
	m := handleRE.FindStringSubmatch(out)
	if m == nil {
		n.t.Fatalf("nft add rule in %s: no handle in %q", at.name, out)
	}
	n.mu.Lock()
	n.rules[key] = append(n.rules[key], chaosRule{host: at, handle: m[1]})
	n.mu.Unlock()
}

var handleRE = regexp.MustCompile(`# handle (\d+)`)

// cut drops everything between a and b, both ways.
func (n *chaosNet) cut(key string, a, b *chaosHost) {
	n.drop(key, a, b, false, 0)
	n.drop(key, b, a, false, 0)
}

// cutService drops everything between h and the machine's service on
// port, both ways.
func (n *chaosNet) cutService(key string, h *chaosHost, port int) {
	n.drop(key, n.gw, h, false, port)
	n.drop(key, h, n.gw, true, port)
}

// heal removes every rule installed under key.
func (n *chaosNet) heal(key string) {
	n.t.Helper()
	n.mu.Lock()
	rules := n.rules[key]
	delete(n.rules, key)
	n.mu.Unlock()
	for _, r := range rules {
		n.nft(r.host, "delete", "rule", "inet", n.tableOf(r.host), "input", "handle", r.handle)
	}
}

// close removes the namespaces (their veths go with them), the bridge
// and the machine's table; the components' cleanups, registered later,
// have run. A process still in a namespace would keep it alive past
// `ip netns del`: a component that outlived its cleanup.
func (n *chaosNet) close() {
	n.mu.Lock()
	hosts := n.hosts
	n.hosts = nil
	n.mu.Unlock()
	for _, h := range hosts {
		if out, _ := exec.Command("ip", "netns", "pids", h.ns).Output(); len(strings.TrimSpace(string(out))) > 0 {
			n.t.Errorf("processes still in %s's namespace %s after its cleanup: %s", h.name, h.ns, strings.Fields(string(out)))
		}
		if out, err := exec.Command("ip", "netns", "del", h.ns).CombinedOutput(); err != nil {
			n.t.Errorf("ip netns del %s: %v\n%s", h.ns, err, out)
		}
	}
	if out, err := exec.Command("nft", "delete", "table", "inet", n.gwTable()).CombinedOutput(); err != nil && !strings.Contains(string(out), "No such file") {
		n.t.Errorf("nft delete table %s: %v\n%s", n.gwTable(), err, out)
	}
	if out, err := exec.Command("ip", "link", "del", n.bridge).CombinedOutput(); err != nil && !strings.Contains(string(out), "Cannot find device") {
		n.t.Errorf("ip link del %s: %v\n%s", n.bridge, err, out)
	}
}

// nft runs nft in h's namespace (the machine's rules are in a table of
// this run's; a namespace's are all this run's), failing the test.
func (n *chaosNet) nft(h *chaosHost, args ...string) string {
	n.t.Helper()
	return n.run(h.command(append([]string{"nft"}, args...)...)...)
}

func (n *chaosNet) run(argv ...string) string {
	n.t.Helper()
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		n.t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	return string(out)
}

// tcpForwarder carries TCP connections from its listener to target: the
// way from the namespaces to a server on the machine's loopback, which
// they do not share (chaosRig's PostgreSQL). It injects nothing (faults
// are chaosNet's rules), and it passes each side's end on to the other
// as it came: a clean close as a half close, a reset or an error as a
// reset, so that PostgreSQL ends the backend of a replica killed or cut
// off, and its locks with it, as it would without a forwarder.
type tcpForwarder struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// startForwarder forwards connections to addr (host:0 picks a port) to
// target until the test ends.
func startForwarder(t testing.TB, addr, target string) *tcpForwarder {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	f := &tcpForwarder{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	f.wg.Go(f.serve)
	t.Cleanup(f.close)
	return f
}

func (f *tcpForwarder) addr() string { return f.ln.Addr().String() }

// track registers c for close; false (c closed) once the forwarder is.
func (f *tcpForwarder) track(c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		_ = c.Close()
		return false
	}
	f.conns[c] = struct{}{}
	return true
}

func (f *tcpForwarder) untrack(cs ...net.Conn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range cs {
		delete(f.conns, c)
	}
}

func (f *tcpForwarder) serve() {
	for {
		in, err := f.ln.Accept()
		if err != nil {
			return
		}
		if !f.track(in) {
			return
		}
		f.wg.Go(func() {
			out, err := net.Dial("tcp", f.target)
			if err != nil || !f.track(out) {
				abort(in)
				f.untrack(in)
				return
			}
			var both sync.WaitGroup
			both.Go(func() { forwardOneWay(out, in) })
			both.Go(func() { forwardOneWay(in, out) })
			both.Wait()
			_ = in.Close()
			_ = out.Close()
			f.untrack(in, out)
		})
	}
}

// forwardOneWay copies src to dst. src's clean end becomes dst's half
// close; anything else (a reset, a timeout) resets both, which also ends
// the copy the other way.
func forwardOneWay(dst, src net.Conn) {
	_, err := io.Copy(dst, src)
	if err == nil {
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		return
	}
	abort(dst)
	abort(src)
}

// abort closes c with a reset (no FIN and wait), as a dying peer's
// kernel would.
func abort(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

func (f *tcpForwarder) close() {
	f.mu.Lock()
	f.closed = true
	conns := f.conns
	f.conns = nil
	f.mu.Unlock()
	_ = f.ln.Close()
	for c := range conns {
		_ = c.Close()
	}
	f.wg.Wait()
}

// TestForwarderPassesResets: a client of the forwarder that dies (its
// connection reset) ends its server-side connection too, as it would
// without a forwarder; a clean close arrives as a half close, and the
// answer still gets back.
func TestForwarderPassesResets(t *testing.T) {
	backend, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer backend.Close()
	f := startForwarder(t, "127.0.0.1:0", backend.Addr().String())
	serverSide := func() net.Conn {
		t.Helper()
		s, err := backend.Accept()
		if err != nil {
			t.Fatal(err)
		}
		// A bound on the failure (a server-side read that never ends),
		// not a wait for something to happen.
		_ = s.SetDeadline(time.Now().Add(10 * time.Second))
		return s
	}

	// Reset: the server side's read ends with an error, not a timeout.
	c, err := net.Dial("tcp", f.addr())
	if err != nil {
		t.Fatal(err)
	}
	s := serverSide()
	abort(c)
	_, err = s.Read(make([]byte, 1))
	if ne, ok := err.(net.Error); err == nil || ok && ne.Timeout() {
		t.Fatalf("the client's reset reached the server as %v, want the connection ended", err)
	}
	s.Close()

	// Half close: the server reads EOF and its answer still arrives.
	c, err = net.Dial("tcp", f.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s = serverSide()
	defer s.Close()
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	_ = c.(*net.TCPConn).CloseWrite()
	if got, err := io.ReadAll(s); err != nil || string(got) != "ping" {
		t.Fatalf("server read %q, %v; want ping, then EOF", got, err)
	}
	if _, err := s.Write([]byte("pong")); err != nil {
		t.Fatal(err)
	}
	_ = s.(*net.TCPConn).CloseWrite()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if got, err := io.ReadAll(c); err != nil || string(got) != "pong" {
		t.Fatalf("client read %q, %v; want pong, then EOF", got, err)
	}
}
