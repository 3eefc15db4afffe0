// Command leftovers finds, and removes, what a test run left on the host:
// processes that outlived the test binary that started them, mounts,
// network namespaces, runsc state and lock files under /run/ate, and
// listening ports. hack/test.sh snapshots the host before the run and
// checks after every stage, and at its next start cleans up after a run
// that was killed before it could (a CI time-out, a ^C).
//
//	leftovers snapshot -o FILE
//	leftovers check -before FILE -run ID -self PID [-clean]
//
// A process is the run's when its environment carries ATE_TEST_RUN=ID (set
// by hack/test.sh for everything it starts) and it started after the
// snapshot; it is left over when it is no longer a descendant of -self
// (test.sh itself), i.e. the test binary that started it is gone. Host
// objects (mounts, namespaces, /run/ate entries, listening ports) are left
// over when they were not in the snapshot.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// snapshot is the host state a run compares against.
type snapshot struct {
	// Ticks is the time of the snapshot in clock ticks since boot, the
	// unit of a process's start time in /proc/PID/stat.
	Ticks   uint64   `json:"ticks"`
	Mounts  []string `json:"mounts"`
	NetNS   []string `json:"netns"`
	RunAte  []string `json:"runAte"`
	Listens []string `json:"listens"`
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: leftovers snapshot -o FILE | check -before FILE -run ID -self PID [-clean]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "snapshot":
		fs := flag.NewFlagSet("snapshot", flag.ExitOnError)
		out := fs.String("o", "", "file to write")
		_ = fs.Parse(os.Args[2:])
		err = writeSnapshot(*out)
	case "check":
		fs := flag.NewFlagSet("check", flag.ExitOnError)
		before := fs.String("before", "", "snapshot file")
		run := fs.String("run", "", "the run's ATE_TEST_RUN value")
		self := fs.Int("self", 0, "PID whose descendants are still running legitimately")
		clean := fs.Bool("clean", false, "remove what is left over")
		_ = fs.Parse(os.Args[2:])
		var found []string
		found, err = check(*before, *run, *self, *clean)
		if err == nil && len(found) > 0 {
			fmt.Printf("left on the host:\n  %s\n", strings.Join(found, "\n  "))
			os.Exit(1)
		}
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "leftovers:", err)
		os.Exit(2)
	}
}

func take() (snapshot, error) {
	var s snapshot
	var err error
	if s.Ticks, err = nowTicks(); err != nil {
		return s, err
	}
	if s.Mounts, err = mounts(); err != nil {
		return s, err
	}
	s.NetNS = dirNames("/run/netns")
	s.RunAte = dirNames("/run/ate")
	s.Listens = listens()
	return s, nil
}

func writeSnapshot(path string) error {
	s, err := take()
	if err != nil {
		return err
	}
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

func check(beforePath, run string, self int, clean bool) ([]string, error) {
	b, err := os.ReadFile(beforePath)
	if err != nil {
		return nil, err
	}
	var before snapshot
	if err := json.Unmarshal(b, &before); err != nil {
		return nil, fmt.Errorf("%s: %w", beforePath, err)
	}
	var found []string
	pre, err := take()
	if err != nil {
		return nil, err
	}
	roots := map[string]bool{}
	for _, r := range added(before.RunAte, pre.RunAte) {
		roots[filepath.Join("/run/ate", r)] = true
	}
	procs := strayProcesses(run, self, before.Ticks, roots)
	for _, p := range procs {
		found = append(found, fmt.Sprintf("process %d: %s", p.pid, p.cmdline))
	}
	if clean {
		for _, p := range procs {
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
		}
		waitGone(procs, 10*time.Second)
	}
	now, err := take()
	if err != nil {
		return nil, err
	}
	newMounts := added(before.Mounts, now.Mounts)
	newNS := added(before.NetNS, now.NetNS)
	newRunAte := added(before.RunAte, now.RunAte)
	for _, m := range newMounts {
		found = append(found, "mount "+m)
	}
	for _, n := range newNS {
		found = append(found, "network namespace "+n)
	}
	for _, r := range newRunAte {
		found = append(found, "runsc state or lock /run/ate/"+r)
	}
	for _, l := range added(before.Listens, now.Listens) {
		found = append(found, "listening "+l)
	}
	// The chaos harness's (test/e2e/chaos_net_test.go) bridges and
	// nftables tables, by their names: a run killed before its cleanup
	// leaves them (its namespaces are among newNS).
	bridges, tables := chaosBridges(), chaosTables()
	for _, b := range bridges {
		found = append(found, "chaos bridge "+b)
	}
	for _, t := range tables {
		found = append(found, "nftables table inet "+t)
	}
	if clean {
		// Deepest first, so a mount below another is gone before it.
		sort.Sort(sort.Reverse(sort.StringSlice(newMounts)))
		for _, m := range newMounts {
			_ = syscall.Unmount(m, syscall.MNT_DETACH)
		}
		for _, n := range newNS {
			p := filepath.Join("/run/netns", n)
			_ = syscall.Unmount(p, syscall.MNT_DETACH)
			_ = os.Remove(p)
		}
		for _, r := range newRunAte {
			_ = os.RemoveAll(filepath.Join("/run/ate", r))
		}
		for _, b := range bridges {
			_ = exec.Command("ip", "link", "del", b).Run()
		}
		for _, t := range tables {
			_ = exec.Command("nft", "delete", "table", "inet", t).Run()
		}
	}
	return found, nil
}

// chaosBridge is the form of the chaos harness's bridge names
// (chaosBridgeRE in test/e2e/chaos_net_test.go): ac<pid>c<n>br.
var chaosBridge = regexp.MustCompile(`^ac\d+c\d+br$`)

// chaosBridges are the chaos harness's bridges left (their veths went
// with the namespaces, or go with the bridge).
func chaosBridges() []string {
	out, err := exec.Command("ip", "-o", "link", "show", "type", "bridge").Output()
	if err != nil {
		return nil
	}
	var found []string
	for _, l := range strings.Split(string(out), "\n") {
		// "7: ac123c1br: <BROADCAST,…"
		if f := strings.Fields(l); len(f) > 1 {
			if name := strings.TrimSuffix(f[1], ":"); chaosBridge.MatchString(name) {
				found = append(found, name)
			}
		}
	}
	return found
}

// chaosTables are the chaos harness's tables on the machine (inet
// atechaos<prefix>) left; none when nft is missing.
func chaosTables() []string {
	out, err := exec.Command("nft", "list", "tables", "inet").Output()
	if err != nil {
		return nil
	}
	var found []string
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "table" && strings.HasPrefix(f[2], "atechaos") {
			found = append(found, f[2])
		}
	}
	return found
}

type proc struct {
	pid     int
	cmdline string
}

// strayProcesses lists the run's processes that are not descendants of
// self, started after ticks. A process is the run's by its environment
// or, for runsc's sandbox processes (runsc boot starts them with an empty
// environment), by a --root among roots: runsc roots the run made.
func strayProcesses(run string, self int, ticks uint64, roots map[string]bool) []proc {
	entries, _ := os.ReadDir("/proc")
	parent := map[int]int{}
	var candidates []proc
	marker := []byte("ATE_TEST_RUN=" + run + "\x00")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		ppid, start, ok := stat(pid)
		if !ok {
			continue
		}
		parent[pid] = ppid
		if start < ticks {
			continue
		}
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if (err != nil || !bytes.Contains(append(env, 0), marker)) && !roots[runscRoot(cmd)] {
			continue
		}
		candidates = append(candidates, proc{pid, strings.TrimSpace(strings.ReplaceAll(string(cmd), "\x00", " "))})
	}
	var out []proc
	for _, c := range candidates {
		if !descends(parent, c.pid, self) {
			out = append(out, c)
		}
	}
	return out
}

// runscRoot is the value of --root in a NUL-separated command line, "" if
// it has none.
func runscRoot(cmdline []byte) string {
	args := strings.Split(string(cmdline), "\x00")
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--root="); ok {
			return v
		}
		if a == "--root" && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

func descends(parent map[int]int, pid, ancestor int) bool {
	for i := 0; pid > 1 && i < 4096; i++ {
		if pid == ancestor {
			return true
		}
		pid = parent[pid]
	}
	return false
}

// stat returns a process's parent and start time (clock ticks since boot).
func stat(pid int) (ppid int, start uint64, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, false
	}
	// The command name is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state): ppid is field 4, starttime field 22.
	if len(f) < 20 {
		return 0, 0, false
	}
	ppid, err1 := strconv.Atoi(f[1])
	start, err2 := strconv.ParseUint(f[19], 10, 64)
	return ppid, start, err1 == nil && err2 == nil
}

func waitGone(procs []proc, d time.Duration) {
	deadline := time.Now().Add(d)
	for _, p := range procs {
		for time.Now().Before(deadline) {
			if err := syscall.Kill(p.pid, 0); errors.Is(err, syscall.ESRCH) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// nowTicks is the time since boot in the unit of /proc/PID/stat's
// starttime: USER_HZ, 100 on Linux.
func nowTicks() (uint64, error) {
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, errors.New("/proc/uptime is empty")
	}
	up, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return 0, err
	}
	return uint64(up * 100), nil
}

func mounts() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// The namespace directory's own bind mount, which the first
		// named network namespace on a host makes (as `ip netns add`
		// does) and which stays: not a leftover.
		if fields := strings.Fields(sc.Text()); len(fields) > 4 && fields[4] != "/run/netns" && fields[4] != "/var/run/netns" {
			seen[fields[4]] = true
		}
	}
	return keys(seen), sc.Err()
}

func dirNames(dir string) []string {
	entries, _ := os.ReadDir(dir)
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}

// listens lists listening TCP sockets as "tcp 127.0.0.1:PORT"-like keys
// (hex address and port, as /proc/net/tcp spells them).
func listens() []string {
	seen := map[string]bool{}
	for _, name := range []string{"tcp", "tcp6"} {
		f, err := os.Open("/proc/net/" + name)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // header
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			// st 0A is LISTEN.
			if len(fields) > 3 && fields[3] == "0A" {
				seen[name+" "+decodeAddr(fields[1])] = true
			}
		}
		f.Close()
	}
	return keys(seen)
}

// decodeAddr turns /proc/net/tcp's "0100007F:1F90" into "7F000001…:8080";
// the address stays hex (byte order is the kernel's), the port is decimal.
func decodeAddr(s string) string {
	addr, port, ok := strings.Cut(s, ":")
	if !ok {
		return s
	}
	p, err := strconv.ParseUint(port, 16, 16)
	if err != nil {
		return s
	}
	return fmt.Sprintf("%s port %d", addr, p)
}

func added(before, now []string) []string {
	had := map[string]bool{}
	for _, b := range before {
		had[b] = true
	}
	var out []string
	for _, n := range now {
		if !had[n] {
			out = append(out, n)
		}
	}
	return out
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
