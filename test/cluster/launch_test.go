package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// The cluster's fixed names. One cluster runs per machine at a time (the
// test binary's TestMain); its directory outlives a failed run as evidence
// and is removed by the next run's setup. Ports and address ranges are
// chosen at setup (layout_test.go).
const (
	nodeName   = "ate-node"
	bridgeName = "atecni0"
)

// kubeCluster is a running single-node cluster: etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler, containerd, kubelet and
// kube-proxy, each a host process logging to dir/logs/<name>.log.
type kubeCluster struct {
	dir        string
	hostIP     net.IP
	kubeBin    string // kube-apiserver, kubelet, kubectl, …
	criBin     string // containerd, containerd-shim-runc-v2, ctr
	kubeconfig string // admin (system:masters)
	procs      map[string]*proc
	order      []string
	// reg is the registry the cluster pulls our images from; images
	// are what was pushed there at setup: each image's name (ate,
	// counter, python-notes) → its reference by digest.
	reg    *registry
	images map[string]string
}

type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

func cacheDir() string {
	if c := os.Getenv("ATE_CACHE"); c != "" {
		return c
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "ate")
}

// hostAddress is the IPv4 source address of the default route: what Pods
// reach the host (and the API server) at.
func hostAddress() (net.IP, error) {
	c, err := net.Dial("udp4", "192.0.2.255:9")
	if err != nil {
		return nil, fmt.Errorf("no default IPv4 route: %w", err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP, nil
}

func (k *kubeCluster) path(parts ...string) string {
	return filepath.Join(append([]string{k.dir}, parts...)...)
}

// start runs name's binary with args, its output in logs/name.log.
func (k *kubeCluster) start(name, bin string, args ...string) error {
	logf, err := os.OpenFile(k.path("logs", name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), "PATH="+k.criBin+":/usr/sbin:/usr/bin:/sbin:/bin")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	k.procs[name] = p
	k.order = append(k.order, name)
	return nil
}

// stopProc sends SIGTERM (SIGCONT first, in case a test stopped it) and
// SIGKILL after grace.
func (k *kubeCluster) stopProc(name string, grace time.Duration) {
	p := k.procs[name]
	if p == nil {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGCONT)
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// waitFor polls cond every 200 ms until it holds, a process died, or d passed.
func (k *kubeCluster) waitFor(what string, d time.Duration, cond func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		for name, p := range k.procs {
			select {
			case <-p.done:
				return fmt.Errorf("%s: %s exited (%v); its log: %s", what, name, p.err, k.tail(name, 30))
			default:
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not after %s: %w", what, d, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// tail is the last n lines of a component's log.
func (k *kubeCluster) tail(name string, n int) string {
	b, _ := os.ReadFile(k.path("logs", name+".log"))
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// kubectl runs the cached kubectl as the admin.
func (k *kubeCluster) kubectl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(k.kubeBin, "kubectl"), append([]string{"--kubeconfig", k.kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// ctr runs containerd's ctr in the CRI's namespace.
func (k *kubeCluster) ctr(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(k.criBin, "ctr"), append([]string{"--address", k.path("run", "containerd.sock"), "-n", "k8s.io"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

func missing(paths ...string) error {
	var errs []error
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w (hack/install-kube.sh, hack/install-cluster.sh and hack/build-cluster-images.sh build it; make test runs them)", p, err))
		}
	}
	return errors.Join(errs...)
}
