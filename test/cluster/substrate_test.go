package cluster

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"substrate.dev/ate/internal/k8s/k8stest"
)

const ns = "ate-system"

// install is what a user did to put Substrate on the cluster; tests after
// the install story use it.
type install struct {
	host       *hostServices
	kubectlAte string         // directory holding kubectl-ate, for PATH
	counts     map[string]int // each counter actor's last count
	// deletedWorker is the worker Pod the Pod-deletion story deleted.
	deletedWorker string
	valuesFile    string
	// caDir is the installation's CA (`ate certs init`), clientConfig
	// the client config kubectl ate uses ($ATE_CONFIG: the CA and the
	// admin token of Secret ate-tokens).
	caDir, clientConfig string
}

// values are the chart values the tests install with: the chart's
// defaults for security (TLS from the Secrets `ate certs secrets` makes,
// worker Pods' certificates from the API server for their ServiceAccount
// tokens, static API tokens from Secret ate-tokens), and besides: the
// ate image from the registry with its pull Secret, the registry keys of
// template pulls, the host's stores, small requests (the node has 2
// cores), a WorkerPool of 3 Pods, and a pin cap of 6 so the router test
// can hold all 6 workers with evictable: false actors (the default cap,
// 4, would let two be evicted).
func (in *install) values(tag string) string {
	return fmt.Sprintf(`image: {repository: %s/ate/ate, tag: %q, pullPolicy: IfNotPresent}
imagePullSecrets: [{name: ate-pull}]
registryCredentials: {secret: ate-registry-credentials}
tls: {nodeCertTTL: 90s}
postgres: {url: %q}
snapshots: {url: %q, credentialsSecret: ate-s3-credentials}
apiserver: {replicas: 2, extraArgs: [--max-pinned-actors=6], resources: {requests: {cpu: 10m, memory: 64Mi}}}
controller: {replicas: 1, extraArgs: [--resync=5s], resources: {requests: {cpu: 10m, memory: 64Mi}}}
router: {replicas: 1, resources: {requests: {cpu: 10m, memory: 64Mi}}}
workerPool: {enabled: true, name: example, replicas: 3, workersPerPod: 2, terminationGracePeriodSeconds: 60,
  resources: {requests: {cpu: 10m, memory: 64Mi}, limits: {memory: 2Gi}}}
`, kc.reg.addr, tag, in.host.storeURL, in.host.snapsURL)
}

// apply is kubectl apply of manifest, with more arguments.
func (k *kubeCluster) apply(ctx context.Context, manifest string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(k.kubeBin, "kubectl"), append([]string{"--kubeconfig", k.kubeconfig, "apply", "-f", "-"}, args...)...)
	cmd.Stdin = strings.NewReader(manifest)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl apply: %w: %s", err, out)
	}
	return string(out), nil
}

// helm runs the cached helm against the cluster.
func helm(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(kc.kubeBin, "helm"), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kc.kubeconfig, "HELM_CACHE_HOME="+kc.path("helm", "cache"),
		"HELM_CONFIG_HOME="+kc.path("helm", "config"), "HELM_DATA_HOME="+kc.path("helm", "data"))
	cmd.Dir = k8stest.RepoRoot()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("helm %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// ate runs kubectl ate (the ate binary as a kubectl plugin), which finds
// the API server through the kubeconfig (EndpointSlices) and dials a Pod
// IP, reachable from the host through the CNI bridge.
func (in *install) ate(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(kc.kubeBin, "kubectl"),
		append([]string{"ate"}, args...)...)
	cmd.Env = append(os.Environ(), "PATH="+in.kubectlAte+":"+os.Getenv("PATH"), "KUBECONFIG="+kc.kubeconfig)
	if in.clientConfig != "" {
		cmd.Env = append(cmd.Env, "ATE_CONFIG="+in.clientConfig)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl ate %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// setContext runs `ate config set-context "$(kubectl config
// current-context)" args…` on client config file, as the README says.
func (in *install) setContext(ctx context.Context, file string, args ...string) error {
	kctx, err := kc.kubectl(ctx, "config", "current-context")
	if err != nil {
		return err
	}
	_, err = in.ateBin(ctx, append([]string{"config", "set-context", strings.TrimSpace(kctx), "--config", file}, args...)...)
	return err
}

// ateBin runs the ate binary itself (not as a plugin): ate certs, ate
// node on the host.
func (in *install) ateBin(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, filepath.Join(in.kubectlAte, "kubectl-ate"), args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ate %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// routerURL is the router Service's cluster IP address, which the host
// reaches through kube-proxy's rules.
func routerURL(ctx context.Context) (string, error) {
	ip, err := kc.kubectl(ctx, "-n", ns, "get", "service", "ate-router", "-o", "jsonpath={.spec.clusterIP}")
	if err != nil {
		return "", err
	}
	return "http://" + strings.TrimSpace(ip) + ":80/", nil
}

// get sends one request to actor (atespace/name) through the router
// Service and returns the status and body.
func get(ctx context.Context, actor string) (int, string, error) {
	u, err := routerURL(ctx)
	if err != nil {
		return 0, "", err
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	req.Header.Set("ate-target-actor", actor)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b)), err
}

// hit asks the counter actor for its next count and fails unless it is
// one more than the last: the actor kept its memory.
func (in *install) hit(t *testing.T, ctx context.Context, actor string) {
	t.Helper()
	code, body, err := get(ctx, actor)
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET %s: %d %q %v", actor, code, body, err)
	}
	want := in.counts[actor] + 1
	if got, err := strconv.Atoi(strings.TrimPrefix(body, "count=")); err != nil || got != want {
		t.Fatalf("GET %s: %q, want count=%d", actor, body, want)
	}
	in.counts[actor] = want
}

// waitRollout waits until every Deployment in ns has rolled out.
func waitRollout(t *testing.T, ctx context.Context, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, err := kc.kubectl(ctx, "-n", ns, "rollout", "status", "deployment/"+n, "--timeout=240s"); err != nil {
			t.Fatal(err)
		}
	}
}

// evidence prints, when t failed, what a reader needs to tell why
// (collectEvidence), and writes it to the cluster directory, which keeps
// it until the next run.
func evidence(t *testing.T) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		ev := collectEvidence(ctx)
		_ = os.WriteFile(kc.path("logs", "evidence-"+strings.ReplaceAll(t.Name(), "/", "_")+".txt"), []byte(ev), 0o644)
		t.Log(ev)
	})
}

// collectEvidence is the Pods, the cluster's events, every ate-system
// container's log (kept by keepPodLogs, so a deleted worker Pod's too)
// and the tails of the cluster components' logs.
func collectEvidence(ctx context.Context) string {
	var b strings.Builder
	for _, args := range [][]string{
		{"get", "pods,deployments,workerpools,endpointslices", "-A", "-o", "wide"},
		{"get", "events", "-A", "--sort-by=.lastTimestamp"},
	} {
		out, _ := kc.kubectl(ctx, args...)
		fmt.Fprintf(&b, "\n=== kubectl %s\n%s", strings.Join(args, " "), out)
	}
	kept, _ := filepath.Glob(kc.path("logs", "pods", ns+"_*", "*", "*.log"))
	for _, f := range kept {
		if data, err := os.ReadFile(f); err == nil {
			lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
			if len(lines) > 60 {
				lines = lines[len(lines)-60:]
			}
			fmt.Fprintf(&b, "\n=== container log %s (last 60 lines)\n%s\n", f, strings.Join(lines, "\n"))
		}
	}
	for _, name := range kc.order {
		fmt.Fprintf(&b, "\n=== %s (last lines; all in %s)\n%s\n", name, kc.path("logs", name+".log"), kc.tail(name, 20))
	}
	return b.String()
}

func itoa(i int) string { return strconv.Itoa(i) }
