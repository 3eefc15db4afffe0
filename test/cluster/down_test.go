package cluster

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
)

// sysctls the cluster needs: forwarding for Pod traffic, bridged traffic
// through iptables for kube-proxy's Service rules, and route_localnet,
// which kube-proxy sets itself for NodePorts on 127.0.0.1 (saved here so
// the teardown restores it too).
var sysctls = []string{"net/ipv4/ip_forward", "net/bridge/bridge-nf-call-iptables", "net/ipv4/conf/all/route_localnet"}

// setSysctls saves the current values to saved (once: a leftover file from
// a crashed run holds the real originals) and sets each to 1.
func setSysctls(saved string) error {
	if _, err := os.Stat(saved); errors.Is(err, os.ErrNotExist) {
		var b strings.Builder
		for _, s := range sysctls {
			v, err := os.ReadFile("/proc/sys/" + s)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, "%s %s\n", s, strings.TrimSpace(string(v)))
		}
		if err := os.WriteFile(saved, []byte(b.String()), 0o644); err != nil {
			return err
		}
	}
	for _, s := range sysctls {
		if err := os.WriteFile("/proc/sys/"+s, []byte("1"), 0o644); err != nil {
			return fmt.Errorf("sysctl %s: %w", s, err)
		}
	}
	return nil
}

func nftTables() ([]string, error) {
	c, err := nftables.New()
	if err != nil {
		return nil, err
	}
	ts, err := c.ListTables()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, t := range ts {
		out = append(out, fmt.Sprintf("%d/%s", t.Family, t.Name))
	}
	sort.Strings(out)
	return out, nil
}

// saveFirewall records the firewall in dir/firewall.saved unless a
// leftover run's record is there (that one predates the leftover rules).
func saveFirewall(dir string) error {
	p := filepath.Join(dir, "firewall.saved")
	if _, err := os.Stat(p); err == nil {
		return nil
	}
	ts, err := nftTables()
	if err != nil {
		return err
	}
	dump, err := exec.Command("iptables-save").Output()
	if err != nil {
		return fmt.Errorf("iptables-save: %w", err)
	}
	return os.WriteFile(p, []byte(strings.Join(ts, " ")+"\n"+string(dump)), 0o644)
}

// restoreFirewall deletes every nftables table the cluster added
// (kube-proxy's and the CNI plugins' iptables-nft rules live in them) and
// restores iptables' earlier content of the tables that were there.
func restoreFirewall(dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, "firewall.saved"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	first, dump, _ := strings.Cut(string(b), "\n")
	before := map[string]bool{}
	for _, t := range strings.Fields(first) {
		before[t] = true
	}
	c, err := nftables.New()
	if err != nil {
		return err
	}
	ts, err := c.ListTables()
	if err != nil {
		return err
	}
	for _, t := range ts {
		if !before[fmt.Sprintf("%d/%s", t.Family, t.Name)] {
			c.DelTable(t)
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("delete the cluster's nftables tables: %w", err)
	}
	if strings.TrimSpace(dump) != "" {
		cmd := exec.Command("iptables-restore")
		cmd.Stdin = strings.NewReader(dump)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("iptables-restore: %w: %s", err, out)
		}
	}
	return os.Remove(filepath.Join(dir, "firewall.saved"))
}

// down stops the cluster: the kubelet first (so nothing restarts), then
// every container (each container's init is killed, which takes its PID
// namespace — runsc sandboxes of worker Pods included — with it), then
// the other components, then cleanHost.
func (k *kubeCluster) down() error {
	k.stopProc("kubelet", 10*time.Second)
	killContainers(k.dir)
	for i := len(k.order) - 1; i >= 0; i-- {
		k.stopProc(k.order[i], 10*time.Second)
	}
	return cleanHost(k.dir)
}

// processesMentioning lists PIDs whose command line contains s.
func processesMentioning(s string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), s) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// children lists pid's direct children.
func children(pid int) []int {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if c, err := strconv.Atoi(f); err == nil {
			out = append(out, c)
		}
	}
	return out
}

// killContainers SIGKILLs every container init of the shims serving dir's
// containerd, then the shims.
func killContainers(dir string) {
	shims := processesMentioning(filepath.Join(dir, "run", "containerd.sock"))
	for _, s := range shims {
		for _, c := range children(s) {
			_ = syscall.Kill(c, syscall.SIGKILL)
		}
	}
	for _, s := range shims {
		_ = syscall.Kill(s, syscall.SIGKILL)
	}
}

// cleanHost removes what a cluster in dir leaves on the host, whether it
// stopped cleanly or crashed: processes, mounts, network namespaces, the
// CNI bridge, firewall rules, sysctls and the kubelet's cgroups. Each
// step runs; the errors are joined.
func cleanHost(dir string) error {
	var errs []error
	killContainers(dir)
	for _, pid := range processesMentioning(dir) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(processesMentioning(dir)) > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if err := unmountUnder(dir); err != nil {
		errs = append(errs, err)
	}
	// containerd's CRI pins Pod network namespaces at /var/run/netns/cni-*;
	// only this cluster's go (host.saved lists the others).
	for _, ns := range ourNetNS(dir) {
		_ = syscall.Unmount(ns, syscall.MNT_DETACH)
		if err := os.Remove(ns); err != nil {
			errs = append(errs, err)
		}
	}
	if l, err := netlink.LinkByName(bridgeName); err == nil {
		if err := netlink.LinkDel(l); err != nil {
			errs = append(errs, fmt.Errorf("delete bridge %s: %w", bridgeName, err))
		}
	}
	if err := restoreFirewall(dir); err != nil {
		errs = append(errs, err)
	}
	if err := restoreSysctls(filepath.Join(dir, "sysctl.saved")); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, removeCgroups("kubepods"))
	// The shims' sockets live in /run/containerd/s whatever containerd's
	// state directory; the empty directories go (os.Remove keeps a
	// non-empty one: another containerd's).
	for _, d := range []string{"/run/containerd/s", "/run/containerd/runc/k8s.io", "/run/containerd/runc", "/run/containerd"} {
		_ = os.Remove(d)
	}
	return errors.Join(errs...)
}

func restoreSysctls(saved string) error {
	b, err := os.ReadFile(saved)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		name, v, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if err := os.WriteFile("/proc/sys/"+name, []byte(v), 0o644); err != nil {
			return err
		}
	}
	return os.Remove(saved)
}

// unmountUnder unmounts every mount point at or below dir, deepest first.
func unmountUnder(dir string) error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	defer f.Close()
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && (fields[4] == dir || strings.HasPrefix(fields[4], dir+"/")) {
			points = append(points, fields[4])
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(points)))
	var errs []error
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// removeCgroups removes cgroup directories named name (and below) in
// every cgroup v1 hierarchy and the unified one, deepest first.
func removeCgroups(name string) error {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*/" + name)
	var errs []error
	for _, root := range roots {
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		sort.Sort(sort.Reverse(sort.StringSlice(dirs)))
		for _, d := range dirs {
			if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// leftovers lists what of a cluster in dir is still on the host after
// cleanHost: each is a bug in the teardown.
func leftovers(dir string) []string {
	var out []string
	for _, pid := range processesMentioning(dir) {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		out = append(out, fmt.Sprintf("process %d: %s", pid, strings.ReplaceAll(string(b), "\x00", " ")))
	}
	before := loadHostBefore(dir)
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) <= 4 {
				continue
			}
			ns := strings.Replace(f[4], "/run/netns/", "/var/run/netns/", 1)
			if strings.HasPrefix(f[4], dir) || (strings.HasPrefix(ns, "/var/run/netns/cni-") && !before.netns[ns]) {
				out = append(out, "mount "+f[4])
			}
		}
	}
	if nss := ourNetNS(dir); len(nss) > 0 {
		out = append(out, "network namespaces "+strings.Join(nss, " "))
	}
	if _, err := netlink.LinkByName(bridgeName); err == nil {
		out = append(out, "link "+bridgeName)
	}
	if ls, err := netlink.LinkList(); err == nil {
		for _, l := range ls {
			if l.Type() == "veth" && !before.veths[l.Attrs().Name] {
				out = append(out, "veth "+l.Attrs().Name)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "firewall.saved")); err == nil {
		out = append(out, "firewall not restored")
	}
	if cg, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods"); len(cg) > 0 {
		out = append(out, "cgroups "+strings.Join(cg, " "))
	}
	return out
}
