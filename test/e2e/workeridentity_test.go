package e2e

import (
	"context"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/auth"
	"substrate.dev/ate/internal/k8s/controller"
	"substrate.dev/ate/internal/k8s/k8stest"
	"substrate.dev/ate/internal/pki"
	atek8s "substrate.dev/ate/pkg/apis/ate/v1alpha1"
)

// identityCluster is a cluster whose API server signs node certificates
// for worker Pods' ServiceAccount tokens, reviewed by a real
// kube-apiserver holding the Pods (no kubelet: the test mints each Pod's
// projected token as the kubelet would, and runs its node as a process).
type identityCluster struct {
	*cluster
	kube *k8stest.Env
	// owner is the controller reference of pool-a's worker Pods: a
	// ReplicaSet of Deployment pool-a-workers, which WorkerPool pool-a
	// controls (no kube-controller-manager here: the test makes them).
	owner []metav1.OwnerReference
}

const identityNS = "pools"

func startIdentityCluster(t *testing.T, certTTL string) *identityCluster {
	t.Helper()
	kube := k8stest.Start(t)
	ctx := t.Context()
	if _, err := kube.Clientset.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: identityNS,
		Labels: map[string]string{controller.PoolNamespaceLabel: controller.PoolNamespaceAllowed}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.Clientset.CoreV1().ServiceAccounts(identityNS).Create(ctx, &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Name: controller.DefaultWorkerServiceAccount}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	labels := controller.WorkerPodLabels("pool-a")
	tpl := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
		ServiceAccountName: controller.DefaultWorkerServiceAccount, Containers: []corev1.Container{{Name: "node", Image: "ate"}}}}
	dep, err := kube.Clientset.AppsV1().Deployments(identityNS).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: controller.DeploymentName("pool-a"), OwnerReferences: []metav1.OwnerReference{{
			APIVersion: atek8s.GroupVersion.String(), Kind: "WorkerPool", Name: "pool-a", UID: "pool-a-uid", Controller: ptr.To(true)}}},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: tpl}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rs, err := kube.Clientset.AppsV1().ReplicaSets(identityNS).Create(ctx, &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: dep.Name + "-6f7c9", OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "apps/v1", Kind: "Deployment", Name: dep.Name, UID: dep.UID, Controller: ptr.To(true)}}},
		Spec: appsv1.ReplicaSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: tpl}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := startClusterWith(t, clusterOptions{timing: clusterTiming, apiArgs: []string{
		"--node-signer-dir", caDir, "--kubeconfig", kube.Kubeconfig, "--node-cert-ttl", certTTL}})
	return &identityCluster{cluster: c, kube: kube, owner: []metav1.OwnerReference{{
		APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: ptr.To(true)}}}
}

// pod writes a Pod of the workers' ServiceAccount, a worker Pod of a
// pool (the controller's labels, under its ReplicaSet) or not, and returns a --tls-bootstrap-dir
// for it: its token of audience, bound to it, and the CA.
func (ic *identityCluster) pod(name string, worker bool, audience string) string {
	ic.t.Helper()
	ctx := context.Background()
	var labels map[string]string
	var owner []metav1.OwnerReference
	if worker {
		labels, owner = controller.WorkerPodLabels("pool-a"), ic.owner
	}
	p, err := ic.kube.Clientset.CoreV1().Pods(identityNS).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, OwnerReferences: owner},
		Spec: corev1.PodSpec{ServiceAccountName: controller.DefaultWorkerServiceAccount, AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{Name: "node", Image: "ate"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		ic.t.Fatal(err)
	}
	tr, err := ic.kube.Clientset.CoreV1().ServiceAccounts(identityNS).CreateToken(ctx, controller.DefaultWorkerServiceAccount, &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{Audiences: []string{audience}, ExpirationSeconds: ptr.To[int64](3600),
			BoundObjectRef: &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID}}}, metav1.CreateOptions{})
	if err != nil {
		ic.t.Fatal(err)
	}
	dir := filepath.Join(ic.t.TempDir(), "identity-"+name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		ic.t.Fatal(err)
	}
	ca, err := os.ReadFile(filepath.Join(caDir, pki.CAFile))
	if err != nil {
		ic.t.Fatal(err)
	}
	for file, data := range map[string][]byte{pki.TokenFile: []byte(tr.Status.Token), pki.CAFile: ca} {
		if err := os.WriteFile(filepath.Join(dir, file), data, 0o600); err != nil {
			ic.t.Fatal(err)
		}
	}
	return dir
}

// refusedNode runs `ate node` with bootstrap dir and name, and returns
// its output once it exits, failing the test if it does not exit with
// an error containing want (it must fail at start-up, before any
// worker starts).
func (ic *identityCluster) refusedNode(name, dir, want string) {
	ic.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, ateBin, "node", "--api", ic.in.apiAddr, "--name", name, "--tls-bootstrap-dir", dir,
		"--data-dir", filepath.Join(ic.dir, name), "--snapshots", ic.snaps, "--worker-prefix", ic.workerPrefix(name)).CombinedOutput()
	if err == nil || ctx.Err() != nil || !strings.Contains(string(out), want) {
		ic.t.Fatalf("ate node %s: %v, want a refusal saying %q; output:\n%s", name, err, want, out)
	}
}

// TestNodeTLSBootstrap: a node running as a worker Pod gets its node
// certificate from the API server for its Pod's ServiceAccount token
// (no certificate files, no cert-manager), registers and serves; its
// certificate is renewed with the token every 4 s (6 s leaves)
// while 10 requests a second go through the router to its actor, and
// not one fails; after the API server restarts, the node registers again
// with its renewed certificate. Tokens that must yield nothing yield
// nothing, and the node says why: another Pod's of the same
// ServiceAccount (not a worker Pod), one for another audience, and a
// worker Pod's token used under another node name.
func TestNodeTLSBootstrap(t *testing.T) {
	ic := startIdentityCluster(t, "6s")
	const node = "pool-a-workers-6f7c9-abcde"
	dir := ic.pod(node, true, "ate-node")
	ic.startNode(node, ic.in.apiAddr, "--tls-bootstrap-dir", dir)
	if n := ic.nodes[node].records("node certificate issued"); n < 1 {
		t.Fatalf("the node logged %d certificates issued", n)
	}
	ic.counterActor()

	workers, err := ic.in.client.ListWorkers(context.Background(), &atev1.ListWorkersRequest{})
	if err != nil || len(workers.GetWorkers()) != 1 {
		t.Fatalf("workers: %v, %v", workers, err)
	}
	tunnel := workers.GetWorkers()[0].GetTunnelAddress()
	probe := leafOf(t, issueCert(t, caDir, "router", "probe"))
	ca, err := pki.LoadCA(caDir)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)

	const (
		rate     = 10
		duration = 25 * time.Second
	)
	var (
		ok, failed atomic.Int64
		mu         sync.Mutex
		failures   []string
		serials    = map[string]bool{}
	)
	ctx, cancel := context.WithTimeout(context.Background(), duration)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Second / rate)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				code, body, _, err := ic.in.request(http.MethodGet, "default/counter-1", "/", "")
				if err == nil && code == http.StatusOK && strings.HasPrefix(body, "count=") {
					ok.Add(1)
					return
				}
				failed.Add(1)
				mu.Lock()
				failures = append(failures, fmt.Sprintf("%d %q %v", code, body, err))
				mu.Unlock()
			}()
		}
	}()
	// A new handshake with the node's tunnel every second records the
	// certificate it presents: the node must be its Pod, every time.
	go func() {
		defer wg.Done()
		want := auth.Identity{Component: auth.ComponentNode, Name: node}
		for ctx.Err() == nil {
			leaf, err := tlsProbe(tunnel, probeConfig(probe, roots, auth.ComponentNode, "http/1.1"))
			mu.Lock()
			switch {
			case err != nil:
				failures = append(failures, fmt.Sprintf("handshake with the tunnel: %v", err))
			case len(leaf.URIs) != 1 || leaf.URIs[0].String() != want.URI(auth.DefaultTrustDomain).String():
				failures = append(failures, fmt.Sprintf("the tunnel presented %v, want %s", leaf.URIs, want))
			default:
				serials[leaf.SerialNumber.String()] = true
			}
			mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
	wg.Wait()
	t.Logf("%d requests answered, %d failed; %d node certificates seen, %d issued", ok.Load(), failed.Load(), len(serials),
		ic.nodes[node].records("node certificate issued"))
	if failed.Load() > 0 || len(failures) > 0 {
		t.Fatalf("%d requests failed during rotation: %v", failed.Load(), failures)
	}
	if ok.Load() < rate*int64(duration/time.Second)*9/10 {
		t.Fatalf("only %d requests in %s, want about %d", ok.Load(), duration, rate*int64(duration/time.Second))
	}
	// 6 s leaves renewed at two thirds: ~7 in 25 s; the probe sees most.
	if len(serials) < 4 {
		t.Errorf("%d node certificates seen in %s, want ≥4", len(serials), duration)
	}

	// The node dials the API server anew with its current certificate.
	ic.api.terminate(30 * time.Second)
	ic.api.start("ate apiserver ready")
	waitFor(t, "the node registered again", 30*time.Second, func() bool { return ic.nodePhase(node) == atev1.Node_READY })
	ic.in.ate("suspend", "actor", "counter-1")
	code, body := ic.in.get("default/counter-1", "/")
	if code != http.StatusOK || !strings.HasPrefix(body, "count=") {
		t.Fatalf("after the API server's restart: %d %q", code, body)
	}

	// What must yield nothing.
	ic.refusedNode("debug-shell", ic.pod("debug-shell", false, "ate-node"), "may not be a node: it is not a worker Pod of a WorkerPool")
	ic.refusedNode("pool-a-workers-6f7c9-other", ic.pod("pool-a-workers-6f7c9-other", true, "ate"), "Unauthenticated")
	ic.refusedNode("pool-a-workers-6f7c9-zzzzz", dir, "is --name the Pod's name?")
}
