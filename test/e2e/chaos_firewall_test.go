package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// cgroupV2Root is where this machine mounts the cgroup v2 hierarchy:
// a hybrid layout puts it under unified/, a pure v2 one at the root.
func cgroupV2Root() (string, error) {
	for _, dir := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
		if _, err := os.Stat(filepath.Join(dir, "cgroup.procs")); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "cgroup.controllers")); err == nil {
				return dir, nil
			}
		}
	}
	return "", fmt.Errorf("no cgroup v2 hierarchy under /sys/fs/cgroup: the chaos harness aims packet drops at processes by their cgroup v2 path (iptables -m cgroup --path)")
}

// firewall drops packets between the components of one test on this
// machine's loopback, as a network that loses them would: each component
// runs in its own cgroup v2 group (cgroupFD, for exec's CgroupFD), and an
// iptables OUTPUT rule matching a group's path and a peer's port drops
// what that process sends there. TCP retransmits, so a connection cut
// for a while resumes once the rule is gone, as after a real partition.
type firewall struct {
	t    testing.TB
	root string // cgroup v2 path of this test's groups, relative to the hierarchy
	dir  string // its directory

	mu    sync.Mutex
	rules map[string][]string // installed rules by key
}

func newFirewall(t testing.TB) *firewall {
	t.Helper()
	v2, err := cgroupV2Root()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("iptables"); err != nil {
		t.Fatalf("the chaos harness needs iptables (apt-get install iptables): %v", err)
	}
	root := fmt.Sprintf("ate-chaos-%d-%s", os.Getpid(), strings.NewReplacer("/", "-", " ", "-").Replace(t.Name()))
	f := &firewall{t: t, root: root, dir: filepath.Join(v2, root), rules: map[string][]string{}}
	if err := os.Mkdir(f.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.close)
	return f
}

// group makes the cgroup of component name and returns a descriptor of
// it for exec.Cmd's SysProcAttr (kept open until the test ends).
func (f *firewall) group(name string) *os.File {
	f.t.Helper()
	dir := filepath.Join(f.dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		f.t.Fatal(err)
	}
	fd, err := os.Open(dir)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { fd.Close() })
	return fd
}

// drop makes the kernel drop TCP packets that component from sends to
// (dport) or from (sport) the given ports, under key; heal removes them.
func (f *firewall) drop(key, from string, sport bool, ports ...int) {
	f.t.Helper()
	ps := make([]string, len(ports))
	for i, p := range ports {
		ps[i] = fmt.Sprint(p)
	}
	dir := "--dports"
	if sport {
		dir = "--sports"
	}
	rule := []string{"OUTPUT", "-p", "tcp", "-m", "cgroup", "--path", f.root + "/" + from,
		"-m", "multiport", dir, strings.Join(ps, ","), "-m", "comment", "--comment", f.root + ":" + key, "-j", "DROP"}
	if out, err := exec.Command("iptables", append([]string{"-I"}, rule...)...).CombinedOutput(); err != nil {
		f.t.Fatalf("iptables -I %s: %v\n%s", strings.Join(rule, " "), err, out)
	}
	f.mu.Lock()
	f.rules[key+"\x00"+strings.Join(rule, " ")] = rule
	f.mu.Unlock()
}

// heal removes every rule installed under key.
func (f *firewall) heal(key string) {
	f.t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for k, rule := range f.rules {
		if strings.HasPrefix(k, key+"\x00") {
			if out, err := exec.Command("iptables", append([]string{"-D"}, rule...)...).CombinedOutput(); err != nil {
				f.t.Errorf("iptables -D %s: %v\n%s", strings.Join(rule, " "), err, out)
			}
			delete(f.rules, k)
		}
	}
}

// close removes the rules left and the groups, which the components'
// cleanups (registered later, so run earlier) have emptied.
func (f *firewall) close() {
	f.mu.Lock()
	keys := slices.Collect(func(yield func(string) bool) {
		for k := range f.rules {
			if !yield(strings.SplitN(k, "\x00", 2)[0]) {
				return
			}
		}
	})
	f.mu.Unlock()
	for _, k := range keys {
		f.heal(k)
	}
	entries, _ := os.ReadDir(f.dir)
	for _, e := range entries {
		if e.IsDir() {
			if err := syscall.Rmdir(filepath.Join(f.dir, e.Name())); err != nil {
				f.t.Errorf("remove cgroup %s: %v (a process of it still runs)", e.Name(), err)
			}
		}
	}
	if err := syscall.Rmdir(f.dir); err != nil {
		f.t.Errorf("remove cgroup %s: %v", f.dir, err)
	}
}
