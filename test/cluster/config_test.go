package cluster

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// adminToken is this test binary's admin bearer token (system:masters).
var adminToken = randomToken()

func randomToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// writeConfigs writes the static token file, one kubeconfig per client,
// containerd's, the kubelet's and kube-proxy's configuration and the CNI
// network (a bridge with host-local addresses, masquerading to the host).
func (k *kubeCluster) writeConfigs() error {
	type user struct{ name, groups string }
	users := map[string]user{
		"admin":                   {"ate-test-admin", "system:masters"},
		"kube-controller-manager": {"system:kube-controller-manager", ""},
		"kube-scheduler":          {"system:kube-scheduler", ""},
		"kubelet":                 {"system:node:" + nodeName, "system:nodes"},
		"kube-proxy":              {"system:kube-proxy", ""},
	}
	var csv strings.Builder
	for client, u := range users {
		token := randomToken()
		if client == "admin" {
			token = adminToken
		}
		fmt.Fprintf(&csv, "%s,%s,%s,\"%s\"\n", token, u.name, u.name, u.groups)
		if err := k.writeKubeconfig(k.path(client+".kubeconfig"), fmt.Sprintf("https://127.0.0.1:%d", apiPort), token); err != nil {
			return err
		}
	}
	k.kubeconfig = k.path("admin.kubeconfig")
	files := map[string]string{
		"tokens.csv": csv.String(),
		"containerd.toml": fmt.Sprintf(`version = 3
root = %[1]q
state = %[2]q
[grpc]
  address = %[3]q
[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = "ate.local/pause:1"
# Per-registry settings (the test registry's address and CA: registry_test.go).
[plugins.'io.containerd.cri.v1.images'.registry]
  config_path = %[7]q
# These machines withhold CAP_SYS_RESOURCE even from root, so no process
# may lower its oom_score_adj below its parent's: runc failed every Pod
# sandbox (the kubelet asks -998) with "failed to update
# /proc/self/oom_score_adj: Permission denied". This clamps Pods' scores
# at containerd's own, as for rootless containerd.
[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
[plugins.'io.containerd.cri.v1.runtime'.cni]
  bin_dirs = ["/usr/lib/cni"]
  conf_dir = %[4]q
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
  BinaryName = %[5]q
  Root = %[6]q
  SystemdCgroup = false
`, k.path("containerd", "root"), k.path("containerd", "state"), k.path("run", "containerd.sock"), k.path("cni", "net.d"), filepath.Join(k.criBin, "runc"), k.path("run", "runc"), k.path("registry-hosts")),
		"cni/net.d/10-ate.conflist": fmt.Sprintf(`{"cniVersion": "1.0.0", "name": "ate-test", "plugins": [
  {"type": "bridge", "bridge": %q, "isGateway": true, "ipMasq": true, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}], "dataDir": %q}},
  {"type": "portmap", "capabilities": {"portMappings": true}}
]}
`, bridgeName, podCIDR, k.path("cni", "ipam")),
		// failCgroupV1: these machines run cgroup v1 (hybrid), which the
		// kubelet refuses since v1.35 unless told otherwise. Eviction and
		// image GC thresholds are off: a busy test disk must not evict the
		// Pods under test or delete the imported pause image (no registry
		// to pull it back from).
		"kubelet.yaml": fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
failSwapOn: false
oomScoreAdj: 0
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://%[1]s
podLogsDir: %[2]s
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %[3]s}
authorization: {mode: Webhook}
readOnlyPort: 0
healthzPort: 0
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
podCIDR: %[4]s
port: %[5]d
evictionHard: {memory.available: "0%%", nodefs.available: "0%%", imagefs.available: "0%%", nodefs.inodesFree: "0%%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
`, k.path("run", "containerd.sock"), k.path("pod-logs"), k.path("pki", "ca.crt"), podCIDR, kubeletPort),
		"kube-proxy.yaml": fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: %q}
mode: iptables
clusterCIDR: %q
hostnameOverride: %q
metricsBindAddress: 127.0.0.1:%d
healthzBindAddress: 127.0.0.1:%d
oomScoreAdj: 0
conntrack: {maxPerCore: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
`, k.path("kube-proxy.kubeconfig"), clusterCIDR, nodeName, proxyMetricsPort, proxyHealth),
	}
	for name, content := range files {
		if err := os.WriteFile(k.path(name), []byte(content), 0o600); err != nil {
			return err
		}
	}
	return nil
}

func (k *kubeCluster) writeKubeconfig(path, server, token string) error {
	ca, err := os.ReadFile(k.path("pki", "ca.crt"))
	if err != nil {
		return err
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["ate-test"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	kc.AuthInfos["ate-test"] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts["ate-test"] = &clientcmdapi.Context{Cluster: "ate-test", AuthInfo: "ate-test", Namespace: "default"}
	kc.CurrentContext = "ate-test"
	b, err := clientcmd.Write(*kc)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}
