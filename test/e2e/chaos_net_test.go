package e2e

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
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
	pid := os.Getpid()
	n := &chaosNet{
		t: t, prefix: fmt.Sprintf("ac%d", pid), bridge: fmt.Sprintf("ac%dbr", pid),
		subnet: freeChaosSubnet(t, pid), rules: map[string][]chaosRule{},
	}
	n.gw = &chaosHost{name: "machine", ip: n.subnet + "1"}
	t.Cleanup(n.close)
	// Bridged frames skip the machine's iptables (br_netfilter may be
	// loaded for Kubernetes, whose FORWARD rules are not ours to meet).
	n.run("ip", "link", "add", n.bridge, "type", "bridge", "nf_call_iptables", "0", "nf_call_ip6tables", "0", "nf_call_arptables", "0")
	n.run("ip", "addr", "add", n.gw.ip+"/24", "dev", n.bridge)
	n.run("ip", "link", "set", n.bridge, "up")
	n.nft(n.gw, "add", "table", "inet", n.gwTable())
	n.nft(n.gw, "add", "chain", "inet", n.gwTable(), "input", "{ type filter hook input priority 0; policy accept; }")
	return n
}

// chaosBridgeRE names the bridges of chaos runs by their test process's
// pid (at most 7 digits: interface names hold 15 bytes).
var chaosBridgeRE = regexp.MustCompile(`^ac(\d+)br$`)

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
		pid, _ := strconv.Atoi(m[1])
		if syscall.Kill(pid, 0) != syscall.ESRCH {
			continue // its run is still going
		}
		prefix := "ac" + m[1]
		entries, _ := os.ReadDir("/run/netns")
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), prefix+"-") {
				_ = exec.Command("ip", "netns", "del", e.Name()).Run()
			}
		}
		_ = exec.Command("nft", "delete", "table", "inet", chaosTable+prefix).Run()
		if out, err := exec.Command("ip", "link", "del", i.Name).CombinedOutput(); err != nil {
			t.Fatalf("remove the bridge %s a gone chaos run left: %v\n%s", i.Name, err, out)
		}
	}
}

// freeChaosSubnet picks a 10.251.N.0/24 no interface of this machine is
// on, starting from one derived from pid: "10.251.N.".
func freeChaosSubnet(t testing.TB, pid int) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for k := range 200 {
		subnet := fmt.Sprintf("10.251.%d.", 20+(pid+k)%200)
		if !slices.ContainsFunc(addrs, func(a net.Addr) bool { return strings.HasPrefix(a.String(), subnet) }) {
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

// addr is host:port of h.
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

// drop makes host at drop TCP packets from host from under key; with a
// port, only those from (sport) or to (dport) it. heal removes every
// rule of key.
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
// have run.
func (n *chaosNet) close() {
	n.mu.Lock()
	hosts := n.hosts
	n.hosts = nil
	n.mu.Unlock()
	for _, h := range hosts {
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

// nft runs nft with args in h's namespace and returns its output.
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
