package cluster

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"substrate.dev/ate/internal/testport"

	"github.com/vishvananda/netlink"
)

// The cluster's ports and address ranges, chosen by chooseLayout at
// setup so the cluster never takes a port or a range the host already
// uses (another cluster, a VPN, a Docker bridge).
var (
	apiPort, etcdPort, etcdPeerPort int
	kubeletPort                     int
	proxyMetricsPort, proxyHealth   int
	podCIDR, clusterCIDR            string
	serviceCIDR                     string
	// serviceIP is the first address of serviceCIDR: the kubernetes Service.
	serviceIP net.IP
)

// clusterRanges and serviceRanges are the candidate /16s, in order of
// preference (the first of each is Kubernetes' usual default).
var (
	clusterRanges = []string{"10.244.0.0/16", "10.245.0.0/16", "10.246.0.0/16", "10.247.0.0/16", "172.30.0.0/16"}
	serviceRanges = []string{"10.96.0.0/16", "10.97.0.0/16", "10.98.0.0/16", "10.99.0.0/16", "172.31.0.0/16"}
)

// chooseLayout picks free ports on the host and Pod and Service ranges
// that overlap no address or route of the host.
func chooseLayout() error {
	ports, err := freePorts(7)
	if err != nil {
		return err
	}
	apiPort, etcdPort, etcdPeerPort, kubeletPort, proxyMetricsPort, proxyHealth = ports[0], ports[1], ports[2], ports[3], ports[4], ports[5]
	registryPort = ports[6]
	used, err := hostPrefixes()
	if err != nil {
		return err
	}
	if clusterCIDR, err = firstFree(clusterRanges, used); err != nil {
		return fmt.Errorf("Pod range: %w", err)
	}
	if serviceCIDR, err = firstFree(serviceRanges, used); err != nil {
		return fmt.Errorf("Service range: %w", err)
	}
	cp := netip.MustParsePrefix(clusterCIDR)
	podCIDR = netip.PrefixFrom(cp.Addr(), 24).String()
	sp := netip.MustParsePrefix(serviceCIDR)
	serviceIP = net.IP(sp.Addr().Next().AsSlice())
	return nil
}

// freePorts returns n distinct ports free on every address now, below
// the kernel's ephemeral range, so no component started meanwhile takes
// one (testport).
func freePorts(n int) ([]int, error) {
	return testport.Free(n)
}

// hostPrefixes lists every IPv4 address and route destination on the
// host, but the cluster's own bridge's (a leftover of a crashed run is
// removed before this runs; this is belt and braces).
func hostPrefixes() ([]netip.Prefix, error) {
	var out []netip.Prefix
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		return nil, err
	}
	for _, a := range addrs {
		if p, ok := toPrefix(a.IPNet); ok {
			out = append(out, p.Masked())
		}
	}
	routes, err := netlink.RouteList(nil, netlink.FAMILY_V4)
	if err != nil {
		return nil, err
	}
	for _, r := range routes {
		if p, ok := toPrefix(r.Dst); ok && p.Bits() > 0 {
			out = append(out, p.Masked())
		}
	}
	return out, nil
}

func toPrefix(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, false
	}
	a, ok := netip.AddrFromSlice(n.IP.To4())
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a, ones), true
}

func firstFree(candidates []string, used []netip.Prefix) (string, error) {
	for _, c := range candidates {
		p := netip.MustParsePrefix(c)
		clash := false
		for _, u := range used {
			if p.Overlaps(u) {
				clash = true
				break
			}
		}
		if !clash {
			return c, nil
		}
	}
	return "", fmt.Errorf("every candidate (%s) overlaps an address or route of this host", strings.Join(candidates, ", "))
}

// loadModules makes sure the kernel features the cluster uses are there:
// br_netfilter (bridged Pod traffic through kube-proxy's rules) and
// overlay (containerd's snapshotter). Built-in or already loaded is fine;
// otherwise modprobe (kmod, which hack/install-cluster.sh installs).
func loadModules() error {
	var errs []error
	if _, err := os.Stat("/proc/sys/net/bridge"); errors.Is(err, os.ErrNotExist) {
		errs = append(errs, modprobe("br_netfilter"))
	}
	if b, err := os.ReadFile("/proc/filesystems"); err == nil && !strings.Contains(string(b), "\toverlay\n") {
		errs = append(errs, modprobe("overlay"))
	}
	return errors.Join(errs...)
}

func modprobe(module string) error {
	path, err := exec.LookPath("modprobe")
	if err != nil {
		return fmt.Errorf("kernel module %s is not loaded and modprobe is missing (apt-get install kmod): %w", module, err)
	}
	if out, err := exec.Command(path, module).CombinedOutput(); err != nil {
		return fmt.Errorf("modprobe %s: %w: %s", module, err, out)
	}
	return nil
}

// hostBefore is what of the cluster's kind was on the host before the
// first run's setup (kept in the cluster directory, like the firewall,
// so a crashed run's cleanup knows it too): other CNI network namespaces
// and veths, which the teardown must leave alone.
type hostBefore struct {
	netns map[string]bool
	veths map[string]bool
}

// saveHostBefore records the host's cni-* namespaces and veths in
// dir/host.saved unless an earlier, crashed run's record is there.
func saveHostBefore(dir string) error {
	p := filepath.Join(dir, "host.saved")
	if _, err := os.Stat(p); err == nil {
		return nil
	}
	var lines []string
	nss, _ := filepath.Glob("/var/run/netns/cni-*")
	for _, ns := range nss {
		lines = append(lines, "netns "+ns)
	}
	ls, err := netlink.LinkList()
	if err != nil {
		return err
	}
	for _, l := range ls {
		if l.Type() == "veth" {
			lines = append(lines, "veth "+l.Attrs().Name)
		}
	}
	return os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
}

func loadHostBefore(dir string) hostBefore {
	h := hostBefore{netns: map[string]bool{}, veths: map[string]bool{}}
	b, _ := os.ReadFile(filepath.Join(dir, "host.saved"))
	for _, line := range strings.Split(string(b), "\n") {
		kind, name, _ := strings.Cut(line, " ")
		switch kind {
		case "netns":
			h.netns[name] = true
		case "veth":
			h.veths[name] = true
		}
	}
	return h
}

// ourNetNS lists the cni-* network namespaces the cluster in dir made.
func ourNetNS(dir string) []string {
	before := loadHostBefore(dir)
	nss, _ := filepath.Glob("/var/run/netns/cni-*")
	var out []string
	for _, ns := range nss {
		if !before.netns[ns] {
			out = append(out, ns)
		}
	}
	return out
}
