package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// upCluster starts a cluster in dir (which setup emptied) and imports
// images (OCI archives) into its containerd.
func upCluster(ctx context.Context, dir string, images []string) (*kubeCluster, error) {
	hostIP, err := hostAddress()
	if err != nil {
		return nil, err
	}
	k := &kubeCluster{
		dir: dir, hostIP: hostIP, procs: map[string]*proc{},
		kubeBin: filepath.Join(cacheDir(), "kube", "bin"),
		criBin:  filepath.Join(cacheDir(), "cluster", "bin"),
	}
	var bins []string
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy", "kubectl"} {
		bins = append(bins, filepath.Join(k.kubeBin, b))
	}
	for _, b := range []string{"containerd", "containerd-shim-runc-v2", "ctr", "runc"} {
		bins = append(bins, filepath.Join(k.criBin, b))
	}
	bins = append(bins, "/usr/lib/cni/bridge", "/usr/lib/cni/host-local", "/usr/lib/cni/portmap", "/usr/lib/cni/loopback")
	if err := missing(append(bins, images...)...); err != nil {
		return nil, err
	}
	for _, d := range []string{"logs", "pki", "etcd", "run", "containerd", "cni/net.d", "cni/ipam", "kubelet", "pod-logs"} {
		if err := os.MkdirAll(k.path(d), 0o755); err != nil {
			return nil, err
		}
	}
	if err := clusterPKI(k.path("pki"), hostIP, serviceIP); err != nil {
		return nil, err
	}
	if err := k.writeConfigs(); err != nil {
		return nil, err
	}
	if err := setSysctls(k.path("sysctl.saved")); err != nil {
		return nil, err
	}
	pki := func(f string) string { return k.path("pki", f) }
	if err := k.start("etcd", filepath.Join(k.kubeBin, "etcd"),
		"--data-dir", k.path("etcd"), "--unsafe-no-fsync",
		fmt.Sprintf("--listen-client-urls=http://127.0.0.1:%d", etcdPort),
		fmt.Sprintf("--advertise-client-urls=http://127.0.0.1:%d", etcdPort),
		fmt.Sprintf("--listen-peer-urls=http://127.0.0.1:%d", etcdPeerPort),
		fmt.Sprintf("--initial-advertise-peer-urls=http://127.0.0.1:%d", etcdPeerPort),
		fmt.Sprintf("--initial-cluster=default=http://127.0.0.1:%d", etcdPeerPort),
		"--listen-metrics-urls="); err != nil {
		return nil, err
	}
	if err := k.start("kube-apiserver", filepath.Join(k.kubeBin, "kube-apiserver"),
		fmt.Sprintf("--etcd-servers=http://127.0.0.1:%d", etcdPort),
		fmt.Sprintf("--secure-port=%d", apiPort), "--bind-address=0.0.0.0", "--advertise-address="+hostIP.String(),
		"--tls-cert-file="+pki("apiserver.crt"), "--tls-private-key-file="+pki("apiserver.key"),
		"--client-ca-file="+pki("ca.crt"), "--token-auth-file="+k.path("tokens.csv"),
		"--kubelet-client-certificate="+pki("apiserver-kubelet.crt"), "--kubelet-client-key="+pki("apiserver-kubelet.key"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+pki("sa.pub"), "--service-account-signing-key-file="+pki("sa.key"),
		"--service-cluster-ip-range="+serviceCIDR, "--authorization-mode=Node,RBAC", "--allow-privileged=true",
		"--enable-admission-plugins=NodeRestriction", "--profiling=false", "--kubelet-preferred-address-types=InternalIP"); err != nil {
		return nil, err
	}
	if err := k.waitFor("kube-apiserver ready", time.Minute, k.apiReady); err != nil {
		return k, err
	}
	if err := k.start("kube-controller-manager", filepath.Join(k.kubeBin, "kube-controller-manager"),
		"--kubeconfig="+k.path("kube-controller-manager.kubeconfig"), "--leader-elect=false",
		"--service-account-private-key-file="+pki("sa.key"), "--root-ca-file="+pki("ca.crt"),
		"--use-service-account-credentials=true", "--bind-address=127.0.0.1", "--secure-port=0",
		"--cluster-cidr="+clusterCIDR, "--service-cluster-ip-range="+serviceCIDR); err != nil {
		return k, err
	}
	if err := k.start("kube-scheduler", filepath.Join(k.kubeBin, "kube-scheduler"),
		"--kubeconfig="+k.path("kube-scheduler.kubeconfig"), "--leader-elect=false",
		"--bind-address=127.0.0.1", "--secure-port=0"); err != nil {
		return k, err
	}
	if err := k.start("containerd", filepath.Join(k.criBin, "containerd"), "--config", k.path("containerd.toml")); err != nil {
		return k, err
	}
	if err := k.waitFor("containerd ready", 30*time.Second, func() error {
		_, err := k.ctr(ctx, "version")
		return err
	}); err != nil {
		return k, err
	}
	for _, img := range images {
		if _, err := k.ctr(ctx, "images", "import", "--no-unpack", img); err != nil {
			return k, err
		}
	}
	if k.reg, err = k.startRegistry(ctx); err != nil {
		return k, err
	}
	if k.images, err = k.reg.push(ctx, "test"); err != nil {
		return k, err
	}
	if err := k.start("kubelet", filepath.Join(k.kubeBin, "kubelet"),
		"--config="+k.path("kubelet.yaml"), "--kubeconfig="+k.path("kubelet.kubeconfig"),
		"--root-dir="+k.path("kubelet"), "--hostname-override="+nodeName, "--node-ip="+hostIP.String()); err != nil {
		return k, err
	}
	if err := k.start("kube-proxy", filepath.Join(k.kubeBin, "kube-proxy"), "--config="+k.path("kube-proxy.yaml")); err != nil {
		return k, err
	}
	if err := k.waitFor("node Ready", 90*time.Second, func() error {
		out, err := k.kubectl(ctx, "get", "node", nodeName, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
		if err != nil {
			return err
		}
		if strings.TrimSpace(out) != "True" {
			return fmt.Errorf("Ready=%q", out)
		}
		return nil
	}); err != nil {
		return k, err
	}
	// Pods of a new namespace need its default ServiceAccount and the
	// kube-root-ca.crt ConfigMap, which kube-controller-manager makes.
	if err := k.waitFor("default ServiceAccount and kube-root-ca.crt", time.Minute, func() error {
		_, err := k.kubectl(ctx, "get", "serviceaccount/default", "configmap/kube-root-ca.crt")
		return err
	}); err != nil {
		return k, err
	}
	return k, nil
}

// apiReady asks kube-apiserver's /readyz as the admin.
func (k *kubeCluster) apiReady() error {
	ca, err := os.ReadFile(k.path("pki", "ca.crt"))
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("https://127.0.0.1:%d/readyz", apiPort), nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz: %s", resp.Status)
	}
	return nil
}
