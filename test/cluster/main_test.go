// Package cluster runs Substrate on a real single-node Kubernetes cluster
// assembled on this machine from upstream parts (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler, kubelet and kube-proxy of
// k8s.io/kubernetes, containerd and runc built from their Go modules, Debian's CNI plugins),
// installs it with helm and kubectl as a user would, and checks the
// stories of issue 17 against it.
//
// TestMain starts one cluster for the package in clusterDir and tears it
// down, checking nothing is left on the host. A failed test's evidence
// (component logs, Pod logs, events) is printed with the failure and kept
// in clusterDir until the next run's setup removes it.
package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"substrate.dev/ate/internal/k8s/k8stest"
)

// clusterDir holds the running cluster; fixed so a run can clean up after
// a crashed one.
const clusterDir = "/var/tmp/ate-cluster-test"

// kc is the package's cluster, set by TestMain.
var kc *kubeCluster

func TestMain(m *testing.M) { os.Exit(runMain(m)) }

func runMain(m *testing.M) (code int) {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "test/cluster: must run as root (containerd, kubelet, CNI); CI runs as root")
		return 1
	}
	if _, err := os.Stat(clusterDir); err == nil {
		fmt.Fprintf(os.Stderr, "test/cluster: removing the previous run's cluster directory %s (and anything of it left on the host)\n", clusterDir)
		if err := cleanHost(clusterDir); err != nil {
			fmt.Fprintln(os.Stderr, "test/cluster: cleaning the previous run:", err)
			return 1
		}
		if err := os.RemoveAll(clusterDir); err != nil {
			fmt.Fprintln(os.Stderr, "test/cluster:", err)
			return 1
		}
	}
	if err := os.MkdirAll(clusterDir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "test/cluster:", err)
		return 1
	}
	if err := saveFirewall(clusterDir); err != nil {
		fmt.Fprintln(os.Stderr, "test/cluster: recording the firewall:", err)
		return 1
	}
	if err := saveHostBefore(clusterDir); err != nil {
		fmt.Fprintln(os.Stderr, "test/cluster: recording the host's namespaces and veths:", err)
		return 1
	}
	// The teardown removes the kubelet's kubepods cgroups: they must be
	// this cluster's.
	if cg, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods"); len(cg) > 0 {
		fmt.Fprintf(os.Stderr, "test/cluster: another kubelet's cgroups are on this host (%s); the test cluster needs kubepods to itself\n", strings.Join(cg, " "))
		return 1
	}
	if err := loadModules(); err != nil {
		fmt.Fprintln(os.Stderr, "test/cluster:", err)
		return 1
	}
	if err := chooseLayout(); err != nil {
		fmt.Fprintln(os.Stderr, "test/cluster: choosing ports and address ranges:", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "test/cluster: Pods %s, Services %s, kube-apiserver on port %d\n", clusterCIDR, serviceCIDR, apiPort)
	root := k8stest.RepoRoot()
	// The Pod sandbox image is imported (the kubelet's infrastructure, as
	// a node image would carry it); ours come from the registry.
	images := []string{filepath.Join(root, "build/images/pause.tar")}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	start := time.Now()
	c, err := upCluster(ctx, clusterDir, images)
	cancel()
	failed := false
	defer func() {
		if c != nil {
			if err := c.down(); err != nil {
				fmt.Fprintln(os.Stderr, "test/cluster: teardown:", err)
				code = 1
			}
		} else {
			_ = cleanHost(clusterDir)
		}
		// The kernel deletes a network namespace, and its veths, a moment
		// after its last user is gone.
		deadline := time.Now().Add(15 * time.Second)
		for len(leftovers(clusterDir)) > 0 && time.Now().Before(deadline) {
			time.Sleep(200 * time.Millisecond)
		}
		if l := leftovers(clusterDir); len(l) > 0 {
			fmt.Fprintf(os.Stderr, "test/cluster: the cluster left on the host:\n  %s\n", strings.Join(l, "\n  "))
			code = 1
		}
		if code == 0 && !failed {
			_ = os.RemoveAll(clusterDir)
		} else {
			// Keep the logs for whoever reads the failure; drop the bulk.
			for _, d := range []string{"containerd", "kubelet", "etcd"} {
				_ = os.RemoveAll(filepath.Join(clusterDir, d))
			}
			fmt.Fprintf(os.Stderr, "test/cluster: evidence kept in %s (logs/: components, pods/ every container's, evidence-*.txt) until the next run\n", clusterDir)
		}
	}()
	if err != nil {
		fmt.Fprintln(os.Stderr, "test/cluster: starting the cluster:", err)
		if c != nil {
			for _, name := range c.order {
				fmt.Fprintf(os.Stderr, "--- %s (last lines)\n%s\n", name, c.tail(name, 40))
			}
		}
		failed = true
		return 1
	}
	fmt.Fprintf(os.Stderr, "test/cluster: cluster up in %s\n", time.Since(start).Round(100*time.Millisecond))
	kc = c
	stopLogs := make(chan struct{})
	logsDone := keepPodLogs(clusterDir, stopLogs)
	code = m.Run()
	close(stopLogs)
	<-logsDone
	failed = code != 0
	return code
}
